"""The built-in default's held-out check, run at the end of the fit: each held-out control is sampled as the
Qwen-Image-Edit pipeline samples it (aipc_env.workers.train.sampling), with the LoRA switched off and on, from the same
noise, and each result is measured against its target, beside the baselines of aipc_env.train.verdict (the control
copied unchanged, the mean of the other held-out targets). Imports torch: training side only."""

from __future__ import annotations

from typing import Any

from aipc_env.train.verdict import DEFAULT_MARGIN, HeldOutSample, LearningVerdict, learning_verdict

__all__ = ["HELDOUT_STEPS", "measure_builtin_edit", "measure_latents", "rms"]

HELDOUT_STEPS = 8
"""Sampling steps of the held-out check."""


def rms(a: Any, b: Any) -> float:
    return float(((a.float() - b.float()) ** 2).mean().sqrt())


def measure_builtin_edit(
    model: Any,
    *,
    count: int,
    latent_hw: int,
    device: Any,
    dtype: Any,
    margin: float = DEFAULT_MARGIN,
    control_shape: tuple[int, int, int] | None = None,
) -> LearningVerdict:
    """Sample `count` held-out edits (never trained on) with the base and with the LoRA; judge the distances.
    control_shape: the control's img_shapes entry as the cache conditioned it (aipc_env.workers.train.cache.synthetic_shapes;
    default: the conditioning rule for a control of the target's size at the target's area)."""
    import torch

    from aipc_env.workers.train.conditioning import control_size, latent_grid

    side = latent_hw * 8
    _, ch, cw = control_shape or latent_grid(control_size((side, side), side * side))

    from aipc_env.workers.train.sampling import sample_edit_latents
    from aipc_env.workers.train.tinyedit import HELDOUT_SEED, edit_sample, scheduler_for_tiny

    held = [edit_sample(HELDOUT_SEED + j, latent_hw) for j in range(count)]
    scheduler = scheduler_for_tiny()

    def sample_all() -> list[Any]:
        out = []
        for j, s in enumerate(held):
            with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
                latents = sample_edit_latents(
                    model,
                    scheduler,
                    controls=s.control[None].to(device, dtype),
                    prompt_embeds=s.prompt_embeds[None].to(device, dtype),
                    prompt_mask=None,
                    target_hw=(latent_hw, latent_hw),
                    control_hw=(2 * ch, 2 * cw),
                    steps=HELDOUT_STEPS,
                    generator=torch.Generator().manual_seed(j),
                )
            out.append(latents[0].float().cpu())
        return out

    model.disable_adapters()
    try:
        base = sample_all()
    finally:
        model.enable_adapters()
    lora = sample_all()
    return measure_latents(held, base, lora, margin=margin)


def measure_latents(held: list[Any], base: list[Any], lora: list[Any], *, margin: float = DEFAULT_MARGIN) -> LearningVerdict:
    """The verdict on sampled latents: each sample's base and LoRA result, its control copied unchanged and the mean
    of the other samples' targets, against its target (the control and target latents of `held`)."""
    import torch

    targets = [s.target.float() for s in held]
    samples = []
    for j, (s, b, lo) in enumerate(zip(held, base, lora)):
        mean_target = torch.stack([t for k, t in enumerate(targets) if k != j]).mean(0) if len(held) >= 2 else None
        samples.append(
            HeldOutSample(
                id=f"held-out-{j}",
                base=round(rms(b, s.target), 6),
                lora=round(rms(lo, s.target), 6),
                copy_control=round(rms(s.control, s.target), 6),
                mean_target=None if mean_target is None else round(rms(mean_target, s.target), 6),
            )
        )
    return learning_verdict(samples, metric="latent RMS", margin=margin)
