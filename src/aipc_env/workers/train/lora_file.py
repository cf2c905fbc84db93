"""The run's LoRA file, written so that every loader applies it at the strength it was trained at.

peft scales a LoRA module's output by alpha / rank (its `scaling`). diffusers reads alpha from the file's adapter
metadata; ComfyUI's loader ignores that metadata and reads alpha only from per-module `.alpha` tensors, so a
diffusers-layout file without them loads at scale 1.0 there (half the strength at alpha = 2 x rank). diffusers, in
turn, mis-reads `.alpha` tensors beside its own `transformer.*.lora_A/B` keys. So the file keeps diffusers' layout
and has each module's scale multiplied into its lora_B (B' = scale x B, hence B'A = scale x BA), with metadata that
says lora_alpha == r: scale 1.0 in diffusers, in ComfyUI and in any loader that assumes alpha = rank
(docs/decisions.md, "The trained LoRA carries its scale in lora_B"; tests/test_lora_loaders.py proves the deltas
equal through both loaders). Resume never reads this file: checkpoints keep peft's own weights (train.checkpoint).

Imports torch, peft and diffusers when called: the training side only.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aipc_env.core.runfolder import lora_file_in

if TYPE_CHECKING:
    import torch

__all__ = ["fold_scales", "peft_scales", "save_run_lora", "unit_scale_metadata"]

_A, _B = ".lora_A.weight", ".lora_B.weight"


def peft_scales(model: Any, adapter: str = "default") -> dict[str, float]:
    """Each LoRA module's scale as peft applies it in training (alpha / r, or its rsLoRA and pattern variants),
    by module name (`transformer_blocks.0.attn.to_q`)."""
    from peft.tuners.lora import LoraLayer

    return {
        name: float(module.scaling[adapter])
        for name, module in model.named_modules()
        if isinstance(module, LoraLayer) and adapter in module.scaling
    }


def fold_scales(tensors: dict[str, torch.Tensor], scales: dict[str, float]) -> dict[str, torch.Tensor]:
    """peft-layout LoRA tensors (`<module>.lora_A.weight`, `<module>.lora_B.weight`) with each module's scale
    multiplied into its lora_B. Every module with tensors must have a finite scale and both halves, and every scale
    a module; anything else is a ValueError naming the module (a file with a module at the wrong strength is never
    written)."""
    modules = {k.removesuffix(_A) for k in tensors if k.endswith(_A)}
    ups = {k.removesuffix(_B) for k in tensors if k.endswith(_B)}
    if modules != ups:
        raise ValueError(f"LoRA module {min(modules ^ ups)} has only one of lora_A and lora_B")
    other = [k for k in tensors if not k.endswith((_A, _B))]
    if other:
        raise ValueError(f"tensor {min(other)} is not a plain LoRA weight: its strength cannot be folded into lora_B")
    if modules != set(scales):
        odd = min(modules ^ set(scales))
        raise ValueError(f"LoRA module {odd} has weights without a scale, or a scale without weights")
    infinite = [m for m, scale in scales.items() if not math.isfinite(scale)]
    if infinite:
        raise ValueError(f"LoRA module {min(infinite)} has the scale {scales[min(infinite)]}: not a strength to save")
    return {
        key: (value * scales[key.removesuffix(_B)] if key.endswith(_B) else value).detach().contiguous().cpu()
        for key, value in tensors.items()
    }


def unit_scale_metadata(config: dict[str, Any]) -> dict[str, Any]:
    """The adapter metadata of a folded file: the trained config with lora_alpha == r for every module (alpha_pattern
    equal to rank_pattern) and plain alpha / r scaling (no rsLoRA), so diffusers applies scale 1.0."""
    return {
        **config,
        "lora_alpha": config["r"],
        "alpha_pattern": dict(config.get("rank_pattern") or {}),
        "use_rslora": False,
    }


def save_run_lora(lora_dir: Path, model: Any, adapter: str = "default") -> Path:
    """Write the model's LoRA to lora_dir/pytorch_lora_weights.safetensors in diffusers' layout, its scale folded
    into lora_B. Returns the file."""
    from diffusers import QwenImageEditPipeline
    from peft.utils import get_peft_model_state_dict

    tensors = fold_scales(get_peft_model_state_dict(model, adapter_name=adapter), peft_scales(model, adapter))
    QwenImageEditPipeline.save_lora_weights(
        lora_dir,
        transformer_lora_layers=tensors,
        transformer_lora_adapter_metadata=unit_scale_metadata(model.peft_config[adapter].to_dict()),
    )
    return lora_file_in(lora_dir)
