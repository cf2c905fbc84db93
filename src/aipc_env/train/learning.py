"""Did the LoRA learn the edit? The verdict on held-out samples, from distances measured through the inference path.

Pure (no torch): the training side measures (aipc_env.train.heldout for the built-in default, aipc_env.tools.compare
for a real model), this module judges and words the result. A LoRA learned the edit when, on samples the fit never
saw, sampled from the same noise as the base, its results are closer to their targets than the base's by the
margin: mean LoRA distance <= (1 - margin) x mean base distance. Where the held-out set can tell (the built-in
edit, whose targets differ per control), the LoRA must also be closer to each sample's own target than to the other
samples' targets by the same margin: a LoRA that learned what targets look like, but not to read the control, fails.
"""

from __future__ import annotations

from aipc_env.core.formats import StrictModel

__all__ = ["DEFAULT_MARGIN", "HeldOutSample", "LearningVerdict", "judge_learning", "verdict_lines"]

DEFAULT_MARGIN = 0.2
"""The LoRA must be at least 20% closer than the base (and than the other samples' targets)."""

TRY_NEXT = (
    "check that the targets are the edited images and the controls their sources; train longer or at a "
    "higher learning rate; raise lora.rank; make sure the held-out samples are the same kind of edit"
)


class HeldOutSample(StrictModel):
    id: str
    base: float
    """Distance of the base model's result to the target."""
    lora: float
    """Distance of the LoRA's result (same noise) to the target."""
    lora_to_other_targets: float | None = None
    """Mean distance of the LoRA's result to the other held-out samples' targets (None: not measured)."""


class LearningVerdict(StrictModel):
    metric: str
    """What a distance is (e.g. 'latent RMS')."""
    margin: float
    samples: list[HeldOutSample]
    base_mean: float
    lora_mean: float
    other_targets_mean: float | None
    learned: bool
    reason: str


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def judge_learning(samples: list[HeldOutSample], *, metric: str, margin: float = DEFAULT_MARGIN) -> LearningVerdict:
    """The verdict: learned only when every measured criterion holds (see the module docstring)."""
    if not samples:
        raise ValueError("no held-out samples to judge")
    if not 0 <= margin < 1:
        raise ValueError(f"margin {margin} is not in [0, 1)")
    base, lora = _mean([s.base for s in samples]), _mean([s.lora for s in samples])
    others = [s.lora_to_other_targets for s in samples if s.lora_to_other_targets is not None]
    other = _mean(others) if len(others) == len(samples) else None
    bound = (1 - margin) * base
    if not lora <= bound:
        reason = f"the LoRA is not closer to the targets than the base by the margin ({lora:.3g} > {1 - margin:.2f} x {base:.3g})"
        learned = False
    elif other is not None and not lora <= (1 - margin) * other:
        reason = (
            f"the LoRA is as close to the other samples' targets as to each sample's own ({lora:.3g} vs "
            f"{other:.3g}): it learned what targets look like, not to follow each control"
        )
        learned = False
    else:
        reason = "the LoRA learned the edit"
        learned = True
    return LearningVerdict(
        metric=metric,
        margin=margin,
        samples=samples,
        base_mean=round(base, 6),
        lora_mean=round(lora, 6),
        other_targets_mean=None if other is None else round(other, 6),
        learned=learned,
        reason=reason,
    )


def verdict_lines(v: LearningVerdict, prefix: str) -> list[str]:
    """The verdict in words (the run's last lines)."""
    n = len(v.samples)
    head = f"{prefix}held-out distance to the targets ({n} samples, {v.metric}): base {v.base_mean:.3g}, LoRA {v.lora_mean:.3g}"
    if v.other_targets_mean is not None:
        head += f" (to the other samples' targets {v.other_targets_mean:.3g})"
    if v.learned:
        return [f"{head}: {v.reason}"]
    return [f"{head}: the LoRA did NOT learn the edit: {v.reason}", f"{prefix}what to try: {TRY_NEXT}"]
