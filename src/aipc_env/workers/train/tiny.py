"""A tiny, randomly initialised Qwen-Image-Edit transformer and a fixed training batch, built offline.

Used by `verify` (gate G0: the NF4 QLoRA plumbing on this device) and by the built-in default of `train`.
Shapes follow the Qwen-Image-Edit pipelines: VAE latents (z_dim 16, 8x spatial) packed 2x2 into 64-channel
tokens; the control image's tokens are appended to the noisy target's along the sequence; `img_shapes`
lists both; the transformer predicts the flow-matching velocity (noise - x0) for the target tokens
(aipc_env.workers.train.objective).
Imports torch: never import this module on the doctor's path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

__all__ = [
    "LORA_TARGETS",
    "TINY_TRANSFORMER_CONFIG",
    "TinyBatch",
    "build_tiny_transformer",
    "make_batch",
    "pack_latents",
    "quantize_linear_layers_nf4",
]

TINY_TRANSFORMER_CONFIG: dict[str, Any] = dict(
    patch_size=2,
    in_channels=64,
    out_channels=16,
    num_layers=2,
    attention_head_dim=16,
    num_attention_heads=4,
    joint_attention_dim=64,
    axes_dims_rope=(4, 6, 6),
    guidance_embeds=False,
)
"""Inner and text widths 64 = one NF4 block (bitsandbytes' CPU kernels want in_features to be a multiple of 64)."""
LORA_TARGETS = ["to_q", "to_k", "to_v", "to_out.0"]


def build_tiny_transformer(seed: int = 0, **overrides: Any) -> Any:
    """A QwenImageTransformer2DModel from a config (no download), deterministic for a seed."""
    from diffusers import QwenImageTransformer2DModel

    torch.manual_seed(seed)
    return QwenImageTransformer2DModel(**{**TINY_TRANSFORMER_CONFIG, **overrides})


def quantize_linear_layers_nf4(
    model: torch.nn.Module, device: torch.device | str, compute_dtype: torch.dtype, skip: tuple[str, ...] = ()
) -> int:
    """Replace every nn.Linear by a bitsandbytes NF4 Linear4bit on `device`, exactly as diffusers'
    `BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4")` does on a GPU/XPU: every Linear layer,
    no double quantization of the statistics, uint8 storage (tests/test_quantize.py proves the weights are
    identical to that loader's).

    diffusers' loader refuses to run without a GPU; quantizing the layers directly works on every device
    bitsandbytes supports (CPU included). Returns the number of layers quantized.
    """
    from bitsandbytes.nn.modules import Linear4bit, Params4bit

    count = 0
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            full = f"{name}.{child_name}" if name else child_name
            if not isinstance(child, torch.nn.Linear) or any(full.startswith(s) for s in skip):
                continue
            q = Linear4bit(
                child.in_features,
                child.out_features,
                bias=child.bias is not None,
                compute_dtype=compute_dtype,
                quant_type="nf4",
                quant_storage=torch.uint8,
                device="meta",
            )
            q.weight = Params4bit(
                child.weight.data.to("cpu", torch.float32).contiguous(),
                requires_grad=False,
                quant_type="nf4",
                compress_statistics=False,
                quant_storage=torch.uint8,
            )
            if child.bias is not None:
                q.bias = torch.nn.Parameter(child.bias.data.to(compute_dtype), requires_grad=False)
            setattr(module, child_name, q.to(device))
            count += 1
    model.to(device)
    # what diffusers' bitsandbytes loader sets: without it peft wraps Linear4bit in its generic LoRA layer
    # instead of its bitsandbytes one (tests/test_quantize.py checks the layer class)
    model.is_loaded_in_4bit = True  # type: ignore[assignment]  # diffusers' flag on an nn.Module, whose __setattr__ is typed for tensors and modules only
    for p in model.parameters():
        if p.dtype.is_floating_point and p.dtype != compute_dtype:
            p.data = p.data.to(compute_dtype)
    return count


def pack_latents(latents: torch.Tensor) -> torch.Tensor:
    """[B, C, H, W] -> [B, (H/2)(W/2), 4C], the pipelines' 2x2 patch packing."""
    b, c, h, w = latents.shape
    x = latents.view(b, c, h // 2, 2, w // 2, 2).permute(0, 2, 4, 1, 3, 5)
    return x.reshape(b, (h // 2) * (w // 2), c * 4)


@dataclass
class TinyBatch:
    target: torch.Tensor
    """Packed clean target latents x0 [B, N, 64]."""
    control: torch.Tensor
    """Packed control latents [B, N, 64]."""
    prompt_embeds: torch.Tensor
    prompt_mask: torch.Tensor | None
    img_shapes: list[list[tuple[int, int, int]]]
    """[[(1, h, w), (1, h, w)]] * B: target then control."""

    def to(self, device: torch.device | str, dtype: torch.dtype | None = None, **_kwargs: Any) -> TinyBatch:
        """Move (and cast) the tensors; accepts accelerate's send_to_device call (device only)."""
        return TinyBatch(
            self.target.to(device, dtype),
            self.control.to(device, dtype),
            self.prompt_embeds.to(device, dtype),
            None if self.prompt_mask is None else self.prompt_mask.to(device),
            self.img_shapes,
        )

    def inputs(self) -> dict[str, Any]:
        """The batch as inputs of aipc_env.workers.train.objective.flow_matching_loss."""
        return {
            "target": self.target,
            "controls": self.control,
            "prompt_embeds": self.prompt_embeds,
            "prompt_mask": self.prompt_mask,
            "img_shapes": self.img_shapes,
            "token_mask": None,
        }


def make_batch(batch_size: int = 2, latent_hw: int = 8, text_len: int = 12, seed: int = 1) -> TinyBatch:
    """A fixed synthetic batch with learnable structure: the target is a fixed function of the control."""
    g = torch.Generator().manual_seed(seed)
    control = torch.randn(batch_size, 16, latent_hw, latent_hw, generator=g)
    target = 0.5 * control.flip(-1) + 0.1 * torch.randn(batch_size, 16, latent_hw, latent_hw, generator=g)
    prompt = torch.randn(batch_size, text_len, TINY_TRANSFORMER_CONFIG["joint_attention_dim"], generator=g)
    h = latent_hw // 2
    return TinyBatch(pack_latents(target), pack_latents(control), prompt, None, [[(1, h, h), (1, h, h)]] * batch_size)
