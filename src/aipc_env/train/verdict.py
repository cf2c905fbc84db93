"""Did the LoRA learn the edit? The verdict on held-out samples, from distances measured through the inference path,
against baselines a LoRA that did not learn the edit would pass.

Pure (no torch): the training env's workers measure (aipc_env.workers.train.heldout for the built-in default,
aipc_env.workers.compare for a real model and the held-out phase), this module decides (the verdict) and words
the result. On samples the fit never saw, four
outputs are measured against each sample's target:

- the LoRA's result and the base model's result, sampled from the same noise;
- the control copied unchanged (what a LoRA that learned to copy returns);
- the mean of the other held-out samples' targets, where there are at least two samples (what a LoRA that learned
  what targets look like, but not to read each control, returns; the sample's own target is left out of its mean,
  so the baseline never sees the answer).

The LoRA learned the edit when its mean distance beats each baseline's by the margin: lora <= (1 - margin) x
baseline, for every baseline measured. Where it does not, the verdict names the baselines it did not beat, in words.
"The base already does this edit" is its own outcome: on at least 3 samples, the base beats the copy and the mean
target by the margin, the LoRA does too, and only the base is not beaten; nothing failed in training
(docs/decisions.md, "The verdict beats named baselines").
"""

from __future__ import annotations

from typing import Literal

from aipc_env.core.formats import StrictModel

__all__ = [
    "BASELINE_WORDS",
    "BASE_OUTCOME_SAMPLES",
    "DEFAULT_MARGIN",
    "HeldOutSample",
    "LearningVerdict",
    "Outcome",
    "learning_verdict",
    "verdict_lines",
    "verdict_passes",
]

DEFAULT_MARGIN = 0.2
"""The LoRA must be at least 20% closer to the targets than each baseline."""

BASE_OUTCOME_SAMPLES = 3
"""The fewest samples that can show the base already does the edit (the runbook's held-out minimum): with two, the
mean target is one other sample's target, and a base that paints grey beats it on unrelated random targets
(measured on the tiny random pipeline: base 65.7, mean target 83.9, pixels)."""

Baseline = Literal["base", "copy", "mean_target"]
Outcome = Literal["learned", "not_learned", "base_already_does_it"]

BASELINE_WORDS: dict[str, str] = {
    "copy": "the LoRA is no closer than returning the control: it may have learned to copy",
    "mean_target": (
        "the LoRA is no closer than the mean of the other targets: it may have learned what targets look like, "
        "not to follow each control"
    ),
    "base": "the LoRA is no closer than the base model without it: it did not learn the edit",
}
"""Why the LoRA did not learn, per baseline it did not beat (in the order the summary names them)."""

BASELINE_LABELS: dict[str, str] = {"base": "base", "copy": "control copied", "mean_target": "mean target"}

TRY_NEXT = (
    "check that the targets are the edited images and the controls their sources; train longer or at a "
    "higher learning rate; raise lora.rank; make sure the held-out samples are the same kind of edit"
)
BASE_DOES_IT = (
    "the base model already does this edit (it beats returning the control and the mean target by the margin): "
    "the LoRA adds less than the margin; nothing failed in training: use the base model, or train an edit it "
    "does not do yet"
)


class HeldOutSample(StrictModel):
    id: str
    base: float
    """Distance of the base model's result to the target."""
    lora: float
    """Distance of the LoRA's result (same noise) to the target."""
    copy_control: float
    """Distance of the control, copied unchanged, to the target."""
    mean_target: float | None = None
    """Distance of the mean of the other held-out samples' targets to this target (None: fewer than two samples)."""


class LearningVerdict(StrictModel):
    metric: str
    """What a distance is (e.g. 'latent RMS')."""
    margin: float
    samples: list[HeldOutSample]
    lora_mean: float
    base_mean: float
    copy_mean: float
    """Mean distance of the control copied unchanged."""
    mean_target_mean: float | None
    """Mean distance of the other samples' mean target (None: fewer than two samples, not measured)."""
    not_beaten: list[Baseline]
    """The baselines the LoRA is not closer than by the margin (empty: learned)."""
    outcome: Outcome
    learned: bool
    reason: str


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _beats(value: float, baseline: float, margin: float) -> bool:
    return value <= (1 - margin) * baseline


def learning_verdict(samples: list[HeldOutSample], *, metric: str, margin: float = DEFAULT_MARGIN) -> LearningVerdict:
    """The verdict: learned only when the LoRA beats every measured baseline by the margin (module docstring)."""
    if not samples:
        raise ValueError("no held-out samples to judge")
    if not 0 <= margin < 1:
        raise ValueError(f"margin {margin} is not in [0, 1)")
    lora, base = _mean([s.lora for s in samples]), _mean([s.base for s in samples])
    copy = _mean([s.copy_control for s in samples])
    targets = [s.mean_target for s in samples if s.mean_target is not None]
    mean_target = _mean(targets) if len(samples) >= 2 and len(targets) == len(samples) else None
    baselines: dict[Baseline, float | None] = {"copy": copy, "mean_target": mean_target, "base": base}
    not_beaten: list[Baseline] = [
        name for name, value in baselines.items() if value is not None and not _beats(lora, value, margin)
    ]
    base_does_it = (
        len(samples) >= BASE_OUTCOME_SAMPLES
        and mean_target is not None
        and _beats(base, copy, margin)
        and _beats(base, mean_target, margin)
    )
    outcome: Outcome
    if not not_beaten:
        outcome, reason = "learned", "the LoRA learned the edit"
    elif not_beaten == ["base"] and base_does_it:
        outcome, reason = "base_already_does_it", BASE_DOES_IT
    else:
        outcome = "not_learned"
        first = not_beaten[0]
        value = baselines[first]
        assert value is not None
        reason = f"{BASELINE_WORDS[first]} ({lora:.3g} > {1 - margin:.2f} x {value:.3g})"
        if len(not_beaten) > 1:
            reason += "; nor closer than the " + " or the ".join(BASELINE_LABELS[n] for n in not_beaten[1:])
    return LearningVerdict(
        metric=metric,
        margin=margin,
        samples=samples,
        lora_mean=round(lora, 6),
        base_mean=round(base, 6),
        copy_mean=round(copy, 6),
        mean_target_mean=None if mean_target is None else round(mean_target, 6),
        not_beaten=not_beaten,
        outcome=outcome,
        learned=outcome == "learned",
        reason=reason,
    )


def verdict_passes(v: LearningVerdict) -> bool:
    """Whether the run that made this verdict succeeded (exit 0): learned, or the base already does the edit (not a
    failure of training; the outcome and the words say so)."""
    return v.outcome != "not_learned"


def verdict_lines(v: LearningVerdict, prefix: str) -> list[str]:
    """The verdict in words (the run's last lines)."""
    n = len(v.samples)
    head = (
        f"{prefix}held-out distance to the targets ({n} samples, {v.metric}): LoRA {v.lora_mean:.3g}; "
        f"baselines: base {v.base_mean:.3g}, control copied {v.copy_mean:.3g}"
    )
    head += (
        f", mean target {v.mean_target_mean:.3g}" if v.mean_target_mean is not None else ", mean target not measured (1 sample)"
    )
    if v.outcome == "learned":
        return [f"{head}: {v.reason} (closer than every baseline by at least {v.margin:.0%})"]
    if v.outcome == "base_already_does_it":
        return [f"{head}: {v.reason}"]
    return [f"{head}: the LoRA did NOT learn the edit: {v.reason}", f"{prefix}what to try: {TRY_NEXT}"]
