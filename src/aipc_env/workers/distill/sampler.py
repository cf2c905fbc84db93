"""The recipe's own Euler sampler, mirroring `QwenImage21Pipeline.__call__` exactly (gate G2 proves it: max abs
diff 0.0), plus prompt encoding and RGB decoding.

What must match the pipeline for bit-exact parity (shared/facts/distill.md): the same `prepare_latents` noise and
packing; `encode_prompt` embeddings and masks; `timestep = t.to(dtype) / 1000`; the update
`(x.float() + dt * v).to(v.dtype)` on the image tokens only (`[:, -N:]`); the KV-cache mode per step. The grid is
the scheduler's effective sigmas after `set_timesteps(sigmas=..., mu=...)`, as the pipeline computes them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from aipc_env.workers.distill.lessons import check_embeddings_detached, check_rgb

__all__ = [
    "Prompted",
    "decode_rgb",
    "encode",
    "euler",
    "img_shapes_for",
    "initial_noise",
    "latent_hw",
    "set_grid",
    "velocity",
    "with_target_slots",
]

ImgShapes = list[list[tuple[int, int, int]]]
"""The transformer's img_shapes: per sample, the (frames, h, w) latent grid of each image."""


@dataclass
class Prompted:
    """Encoded prompts: what the transformer reads besides the latents."""

    embeds: torch.Tensor
    mask: torch.Tensor | None
    image_pad_mask: torch.Tensor

    def to(self, device: torch.device | str, dtype: torch.dtype | None = None) -> Prompted:
        return Prompted(
            self.embeds.to(device, dtype), None if self.mask is None else self.mask.to(device), self.image_pad_mask.to(device)
        )


def encode(pipe: Any, prompts: list[str], device: torch.device, *, grad: bool = False) -> Prompted:
    """`pipe.encode_prompt` under no_grad (distillation lesson 1; `grad=True` exists only to prove the check fires)."""
    with torch.set_grad_enabled(grad):
        embeds, mask, image_pad_mask = pipe.encode_prompt(prompt=prompts, device=device)
    check_embeddings_detached(embeds, mask)
    return Prompted(embeds, mask, image_pad_mask)


def latent_hw(pipe: Any, height: int, width: int) -> tuple[int, int, int, int]:
    """(height, width) floored as the pipeline does, and the latent grid (h, w) in tokens."""
    multiple = pipe.vae_scale_factor * 2
    height, width = height // multiple * multiple, width // multiple * multiple
    return height, width, height // pipe.vae_scale_factor, width // pipe.vae_scale_factor


def img_shapes_for(pipe: Any, batch: int, height: int, width: int) -> ImgShapes:
    _, _, h, w = latent_hw(pipe, height, width)
    return [[(1, h, w)]] * batch


def initial_noise(
    pipe: Any, batch: int, height: int, width: int, generator: torch.Generator | None, device: torch.device, dtype: torch.dtype
) -> torch.Tensor:
    """The pipeline's own `prepare_latents` noise (randn_tensor, then packed)."""
    height, width, _, _ = latent_hw(pipe, height, width)
    latents: torch.Tensor
    latents, _ = pipe.prepare_latents(None, batch, pipe.transformer.config.in_channels, height, width, dtype, device, generator)
    return latents


def with_target_slots(image_pad_mask: torch.Tensor, n_tokens: int) -> torch.Tensor:
    """The transformer's img_mask: the prompt's image-pad mask plus one slot per 2x2 group of target tokens."""
    return torch.cat([image_pad_mask, image_pad_mask.new_ones(image_pad_mask.shape[0], n_tokens // 4)], dim=1)


def set_grid(pipe: Any, sigmas: list[float], n_tokens: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Set the scheduler exactly as the pipeline does; return its (timesteps, effective sigmas incl. the end)."""
    from diffusers.pipelines.qwenimage21.pipeline_qwenimage21 import calculate_shift, retrieve_timesteps

    cfg = pipe.scheduler.config
    mu = calculate_shift(
        n_tokens,
        cfg.get("base_image_seq_len", 256),
        cfg.get("max_image_seq_len", 4096),
        cfg.get("base_shift", 0.5),
        cfg.get("max_shift", 1.15),
    )
    timesteps, _ = retrieve_timesteps(pipe.scheduler, len(sigmas), device, sigmas=sigmas, mu=mu)
    pipe.scheduler.set_begin_index(0)
    return timesteps, pipe.scheduler.sigmas.clone()


def velocity(
    transformer: Any,
    latents: torch.Tensor,
    t: torch.Tensor,
    prompted: Prompted,
    img_shapes: ImgShapes,
    *,
    kv_cache: Any = None,
    kv_mode: str | None = None,
    attention_kwargs: dict[str, Any] | None = None,
) -> torch.Tensor:
    """One transformer call as the pipeline makes it; returns the image tokens' velocity [B, N, C]."""
    timestep = t.expand(latents.shape[0]).to(latents.dtype) if t.ndim == 0 else t.to(latents.dtype)
    inner = getattr(transformer, "module", transformer)  # under DDP the cache context is the wrapped module's
    with inner.cache_context("cond"):
        out: torch.Tensor = transformer(
            hidden_states=latents,
            timestep=timestep / 1000,
            encoder_hidden_states=prompted.embeds,
            encoder_hidden_states_mask=prompted.mask,
            img_shapes=img_shapes,
            img_mask=with_target_slots(prompted.image_pad_mask, latents.shape[1]),
            attention_kwargs=attention_kwargs or {},
            kv_cache=kv_cache,
            kv_cache_mode=kv_mode,
            return_dict=False,
        )[0]
    return out[:, -latents.size(1) :]


@torch.no_grad()
def euler(
    pipe: Any,
    transformer: Any,
    prompted: Prompted,
    latents: torch.Tensor,
    sigmas: list[float],
    height: int,
    width: int,
    *,
    use_kv_cache: bool = True,
    attention_kwargs: dict[str, Any] | None = None,
    record: bool = False,
) -> tuple[torch.Tensor, list[torch.Tensor], torch.Tensor, torch.Tensor]:
    """Run the sampler from `latents` over the grid. Returns (final latents, [latents after each step, starting
    with the input] if record else [], timesteps, effective sigmas)."""
    from diffusers.models.transformers.transformer_qwenimage21 import QwenImage21KVCache

    timesteps, eff = set_grid(pipe, sigmas, latents.shape[1], latents.device)
    shapes = img_shapes_for(pipe, latents.shape[0], height, width)
    cache_on = use_kv_cache and transformer.config.causal_condition
    cache = QwenImage21KVCache(len(transformer.transformer_blocks)) if cache_on else None
    trajectory = [latents] if record else []
    for i, t in enumerate(timesteps):
        mode = ("extract" if i == 0 else "cached") if cache_on else None
        v = velocity(transformer, latents, t, prompted, shapes, kv_cache=cache, kv_mode=mode, attention_kwargs=attention_kwargs)
        dt = eff[i + 1] - eff[i]
        latents = (latents.to(torch.float32) + dt * v).to(v.dtype)
        if record:
            trajectory.append(latents)
    return latents, trajectory, timesteps, eff


@torch.no_grad()
def decode_rgb(pipe: Any, latents: torch.Tensor, height: int, width: int, decode_device: str = "cpu") -> torch.Tensor:
    """Latents -> RGB in [0, 1], [B, 3, H, W]. Decoded on `decode_device` (distillation lesson 3: the CPU; a bf16 GPU
    decode of this video VAE needs ~76 GB of transients at 512 px) and sliced to RGB (item 2: the VAE is RGBA)."""
    height, width, _, _ = latent_hw(pipe, height, width)
    vae = pipe.vae
    device = torch.device(decode_device)
    original = next(vae.parameters()).device
    vae.to(device)
    try:
        z = pipe._unpack_latents(latents, height, width, pipe.vae_scale_factor).to(device, vae.dtype)
        c = vae.config.z_dim
        mean = torch.tensor(vae.config.latents_mean).view(1, c, 1, 1, 1).to(device, z.dtype)
        std = torch.tensor(vae.config.latents_std).view(1, c, 1, 1, 1).to(device, z.dtype)
        rgba: torch.Tensor = vae.decode(z * std + mean, return_dict=False)[0]
    finally:
        vae.to(original)
    rgb = rgba[:, :3, 0]
    check_rgb(rgb)
    return (rgb.float() / 2 + 0.5).clamp(0, 1)
