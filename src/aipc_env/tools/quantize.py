"""One-time NF4 pre-quantization (runbook §7.1, §7.2): the output folder carries `quantization_config` in its
config.json and the engine loads it directly. Output is written to a hidden temporary folder and renamed at the
end, so an interrupted run leaves no half model.

Transformer: on a GPU/XPU, diffusers' bitsandbytes loader quantizes shard by shard while loading; on a CPU
(diffusers refuses: "No GPU found") the model is loaded and its Linear layers quantized with bitsandbytes
directly, and saved in the same bitsandbytes state-dict format. Text encoder: transformers' bitsandbytes loader
(works on CPU too).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import ClassVar, Literal

from aipc_env.errors import AipcError, InputError
from aipc_env.fileio import atomic_dir
from aipc_env.formats import VersionedModel
from aipc_env.train.devices import device_memory_mb, peak_rss_mb

__all__ = [
    "QuantizeResult",
    "is_prequantized",
    "load_nf4_transformer",
    "quantize_text_encoder",
    "quantize_transformer",
]

MARKER = "aipc_nf4.json"


class QuantizeResult(VersionedModel):
    """`aipc-env quantize --json`."""

    FORMAT: ClassVar[str] = "quantize result"
    schema_version: Literal[1] = 1
    part: Literal["transformer", "text-encoder"]
    dst: str
    seconds: float
    size_bytes: int
    peak_rss_mb: float | None
    peak_device_mb: float | None
    method: str


def _folder_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _source(src: Path, part: str) -> Path:
    if (src / part / "config.json").is_file():
        return src / part
    if (src / "config.json").is_file():
        return src
    raise InputError(f"no {part}/config.json in the model folder", path=src,
                     fix="pass the Qwen-Image-Edit folder (with model_index.json) as --src")


def quantize_transformer(src: Path, dst: Path, device) -> QuantizeResult:
    import torch
    from diffusers import BitsAndBytesConfig, QwenImageTransformer2DModel

    from aipc_env.train.tiny import quantize_linear_layers_nf4

    source = _source(src, "transformer")
    start = time.perf_counter()
    with atomic_dir(dst) as tmp:
        qcfg = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                  bnb_4bit_compute_dtype=torch.bfloat16)
        if device.type != "cpu":
            model = QwenImageTransformer2DModel.from_pretrained(str(source), quantization_config=qcfg,
                                                                torch_dtype=torch.bfloat16, device_map={"": device})
            model.save_pretrained(str(tmp))
            method = "diffusers-bitsandbytes"
        else:
            from safetensors.torch import save_file

            model = QwenImageTransformer2DModel.from_pretrained(str(source), torch_dtype=torch.float32)
            quantize_linear_layers_nf4(model, device, torch.float32)
            save_file({k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()},
                      str(tmp / "diffusion_pytorch_model.safetensors"))
            config = dict(model.config)
            config["quantization_config"] = qcfg.to_dict()
            (tmp / "config.json").write_text(json.dumps(config, indent=2, default=list))
            method = "bitsandbytes-layerwise"
        (tmp / MARKER).write_text(json.dumps({"method": method, "source": str(source), "quant_type": "nf4"}))
    return QuantizeResult(part="transformer", dst=str(dst), seconds=round(time.perf_counter() - start, 2),
                          size_bytes=_folder_size(dst), peak_rss_mb=peak_rss_mb(),
                          peak_device_mb=device_memory_mb(device, peak=True), method=method)


def _dtype_kwarg(dtype) -> dict:
    """transformers 5 names it `dtype`; 4.x (the qflux clone pins 4.52.4) only knows `torch_dtype`."""
    import transformers

    return {"dtype": dtype} if int(transformers.__version__.split(".")[0]) >= 5 else {"torch_dtype": dtype}


def quantize_text_encoder(src: Path, dst: Path, device) -> QuantizeResult:
    import torch
    from transformers import BitsAndBytesConfig, Qwen2_5_VLForConditionalGeneration

    source = _source(src, "text_encoder")
    start = time.perf_counter()
    with atomic_dir(dst) as tmp:
        dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
        qcfg = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=dtype)
        model = Qwen2_5_VLForConditionalGeneration.from_pretrained(str(source), quantization_config=qcfg,
                                                                   **_dtype_kwarg(dtype),
                                                                   device_map={"": device})
        model.save_pretrained(str(tmp))
        (tmp / MARKER).write_text(json.dumps({"method": "transformers-bitsandbytes", "source": str(source),
                                              "quant_type": "nf4"}))
    return QuantizeResult(part="text-encoder", dst=str(dst), seconds=round(time.perf_counter() - start, 2),
                          size_bytes=_folder_size(dst), peak_rss_mb=peak_rss_mb(),
                          peak_device_mb=device_memory_mb(device, peak=True), method="transformers-bitsandbytes")


def is_prequantized(path: Path) -> bool:
    from aipc_env.fileio import read_json

    try:
        config = read_json(path / "config.json", "config.json")
    except InputError:
        return False
    return isinstance(config, dict) and "quantization_config" in config


def load_nf4_transformer(path: Path, device, compute_dtype):
    """Load a pre-quantized transformer folder. GPU/XPU: diffusers. CPU: rebuild each Linear4bit from the saved
    packed weights and quantization statistics (bitsandbytes' Params4bit.from_prequantized)."""
    import bitsandbytes as bnb
    import torch
    from diffusers import QwenImageTransformer2DModel
    from safetensors.torch import load_file

    if not is_prequantized(path):
        raise InputError("not a pre-quantized NF4 folder (config.json has no quantization_config)", path=path,
                         key="model.transformer_path", fix="create it: aipc-env quantize transformer --src MODEL --dst DIR")
    if device.type != "cpu":
        return QwenImageTransformer2DModel.from_pretrained(str(path), torch_dtype=compute_dtype, device_map={"": device})
    from aipc_env.fileio import read_json

    config = read_json(path / "config.json", "config.json")
    config.pop("quantization_config", None)
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise AipcError("no weights (*.safetensors) in the NF4 folder", path=path)
    state: dict = {}
    for f in files:
        state.update(load_file(str(f)))
    model = QwenImageTransformer2DModel.from_config(config)  # real buffers (rope tables); weights replaced below
    suffix = ".weight.quant_state.bitsandbytes__nf4"
    qpaths = sorted({k[: -len(suffix)] for k in state if k.endswith(suffix)})
    for module_path in qpaths:
        parent_name, _, child = module_path.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        old = getattr(parent, child)
        layer = bnb.nn.Linear4bit(old.in_features, old.out_features, bias=old.bias is not None,
                                  compute_dtype=compute_dtype, quant_type="nf4", device="meta")
        prefix = module_path + ".weight."
        stats = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
        layer.weight = bnb.nn.Params4bit.from_prequantized(data=state[module_path + ".weight"], quantized_stats=stats,
                                                           requires_grad=False, device=device)
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
