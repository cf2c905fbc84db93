"""Loading a pre-quantized NF4 transformer folder (what `aipc-env quantize transformer` writes): the engine's fit
phase reads it; workers/quantize.py writes it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from aipc_env.errors import AipcError, InputError

if TYPE_CHECKING:
    import torch

__all__ = ["is_prequantized", "load_nf4_transformer"]


def is_prequantized(path: Path) -> bool:
    from aipc_env.core.fileio import read_json

    try:
        config = read_json(path / "config.json", "config.json")
    except InputError:
        return False
    return isinstance(config, dict) and "quantization_config" in config


def load_nf4_transformer(path: Path, device: torch.device, compute_dtype: torch.dtype) -> Any:
    """Load a pre-quantized transformer folder. GPU/XPU: diffusers. CPU: rebuild each Linear4bit from the saved
    packed weights and quantization statistics (bitsandbytes' Params4bit.from_prequantized)."""
    import torch
    from bitsandbytes.nn.modules import Linear4bit, Params4bit
    from diffusers import QwenImageTransformer2DModel
    from safetensors.torch import load_file

    if not is_prequantized(path):
        raise InputError(
            "not a pre-quantized NF4 folder (config.json has no quantization_config)",
            path=path,
            key="model.transformer_path",
            fix="create it: aipc-env quantize transformer --src MODEL --dst DIR",
        )
    if device.type != "cpu":
        return QwenImageTransformer2DModel.from_pretrained(str(path), torch_dtype=compute_dtype, device_map={"": device})
    from aipc_env.core.fileio import read_json

    config = read_json(path / "config.json", "config.json")
    config.pop("quantization_config", None)
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise AipcError("no weights (*.safetensors) in the NF4 folder", path=path)
    state: dict[str, torch.Tensor] = {}
    for f in files:
        state.update(load_file(str(f)))
    model = QwenImageTransformer2DModel.from_config(config)  # real buffers (rope tables); weights replaced below
    suffix = ".weight.quant_state.bitsandbytes__nf4"
    qpaths = sorted({k[: -len(suffix)] for k in state if k.endswith(suffix)})
    for module_path in qpaths:
        parent_name, _, child = module_path.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        old = getattr(parent, child)
        layer = Linear4bit(
            old.in_features,
            old.out_features,
            bias=old.bias is not None,
            compute_dtype=compute_dtype,
            quant_type="nf4",
            device="meta",
        )
        prefix = module_path + ".weight."
        stats = {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}
        layer.weight = Params4bit.from_prequantized(
            data=state[module_path + ".weight"], quantized_stats=stats, requires_grad=False, device=device
        )
        if old.bias is not None:
            layer.bias = torch.nn.Parameter(state[module_path + ".bias"].to(compute_dtype), requires_grad=False)
        setattr(parent, child, layer)
    rest = {k: v for k, v in state.items() if not any(k.startswith(p + ".") for p in qpaths)}
    missing, _ = model.load_state_dict(rest, strict=False)
    missing = [m for m in missing if not any(m.startswith(p + ".") for p in qpaths)]
    if missing:
        raise AipcError(f"the NF4 folder lacks {len(missing)} tensors ({missing[0]} ...)", path=path)
    for p in model.parameters():
        if p.dtype.is_floating_point and p.dtype != compute_dtype:
            p.data = p.data.to(compute_dtype)
    return model.to(device)
