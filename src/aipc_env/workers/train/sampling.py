"""Sampling an edit the way diffusers' QwenImageEditPipeline.__call__ does, from latents already encoded.

The built-in default has no VAE or text encoder (its data are latents), so its held-out check cannot call the
pipeline with an image. This is the pipeline's own denoising loop, step for step, built from diffusers' own
pieces (`calculate_shift`, `retrieve_timesteps`, `randn_tensor`, the pipeline's `_pack_latents`, its sigmas
`linspace(1, 1/steps, steps)`, `timestep / 1000`, `img_shapes` of target then control, the scheduler's `step`):
tests/test_learning.py proves that it returns bit-identical latents to `QwenImageEditPipeline(...,
output_type="latent")` on the tiny pipeline, given the control latents and prompt embeddings the pipeline made.
A diffusers release that changes the loop fails that test, not a user's verdict silently.
Imports torch: training side only.
"""

from __future__ import annotations

from typing import Any

__all__ = ["sample_edit_latents"]


def sample_edit_latents(
    transformer: Any,
    scheduler: Any,
    *,
    controls: Any,
    prompt_embeds: Any,
    prompt_mask: Any,
    target_hw: tuple[int, int],
    control_hw: tuple[int, int] | list[tuple[int, int]],
    steps: int,
    generator: Any,
) -> Any:
    """Packed latents [B, N, 64] of the edited image (before the VAE), sampled from `generator`'s noise.

    controls: packed control latents [B, Nc, 64] (several controls concatenated along Nc, as the Plus pipeline
    does); target_hw / control_hw: latent height and width (VAE units, 8x below pixels) of the output and of the
    control, or a list of one per control: each control keeps its own grid (aipc_env.workers.train.conditioning), as in
    the pipelines' `img_shapes`.
    """
    import numpy as np
    import torch
    from diffusers.pipelines.qwenimage.pipeline_qwenimage_edit import (
        QwenImageEditPipeline,
        calculate_shift,
        retrieve_timesteps,
    )
    from diffusers.utils.torch_utils import randn_tensor

    batch = controls.shape[0]
    channels = transformer.config.in_channels // 4
    h, w = target_hw
    dtype, device = prompt_embeds.dtype, controls.device
    noise = randn_tensor((batch, 1, channels, h, w), generator=generator, device=device, dtype=dtype)
    latents = QwenImageEditPipeline._pack_latents(noise, batch, channels, h, w)
    grids = control_hw if isinstance(control_hw, list) else [control_hw]
    img_shapes = [[(1, h // 2, w // 2), *[(1, ch // 2, cw // 2) for ch, cw in grids]]] * batch
    sigmas = np.linspace(1.0, 1 / steps, steps).tolist()  # the pipeline's own schedule (it passes the array)
    cfg = scheduler.config
    mu = calculate_shift(
        latents.shape[1],
        cfg.get("base_image_seq_len", 256),
        cfg.get("max_image_seq_len", 4096),
        cfg.get("base_shift", 0.5),
        cfg.get("max_shift", 1.15),
    )
    timesteps, _ = retrieve_timesteps(scheduler, steps, device, sigmas=sigmas, mu=mu)
    scheduler.set_begin_index(0)
    controls = controls.to(device, dtype)
    with torch.no_grad():
        for t in timesteps:
            timestep = t.expand(batch).to(dtype)
            with transformer.cache_context("cond"):
                pred = transformer(
                    hidden_states=torch.cat([latents, controls], dim=1),
                    timestep=timestep / 1000,
                    guidance=None,
                    encoder_hidden_states_mask=prompt_mask,
                    encoder_hidden_states=prompt_embeds,
                    img_shapes=img_shapes,
                    attention_kwargs={},
                    return_dict=False,
                )[0][:, : latents.shape[1]]
            latents = scheduler.step(pred, t, latents, return_dict=False)[0]
    return latents
