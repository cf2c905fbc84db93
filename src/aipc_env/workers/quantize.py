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
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aipc_env.core.fileio import atomic_dir
from aipc_env.errors import InputError
from aipc_env.train.results import QuantizeResult
from aipc_env.workers.train.devices import device_memory_mb, peak_rss_mb

if TYPE_CHECKING:
    import torch

__all__ = [
    "quantize_text_encoder",
    "quantize_transformer",
]

MARKER = "aipc_nf4.json"


def _folder_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _source(src: Path, part: str) -> Path:
    if (src / part / "config.json").is_file():
        return src / part
    if (src / "config.json").is_file():
        return src
    raise InputError(
        f"no {part}/config.json in the model folder",
        path=src,
        fix="pass the Qwen-Image-Edit folder (with model_index.json) as --src",
    )


def quantize_transformer(src: Path, dst: Path, device: torch.device) -> QuantizeResult:
    import torch
    from diffusers import BitsAndBytesConfig, QwenImageTransformer2DModel

    from aipc_env.workers.train.tiny import quantize_linear_layers_nf4

    source = _source(src, "transformer")
    start = time.perf_counter()
    with atomic_dir(dst) as tmp:
        # Any: to a type checker diffusers exports a dummy placeholder class, which lacks to_dict
        qcfg: Any = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.bfloat16)
        if device.type != "cpu":
            model = QwenImageTransformer2DModel.from_pretrained(
                str(source), quantization_config=qcfg, torch_dtype=torch.bfloat16, device_map={"": device}
            )
            model.save_pretrained(str(tmp))
            method = "diffusers-bitsandbytes"
        else:
            from safetensors.torch import save_file

            model = QwenImageTransformer2DModel.from_pretrained(str(source), torch_dtype=torch.float32)
            quantize_linear_layers_nf4(model, device, torch.float32)
            save_file(
                {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()},
                str(tmp / "diffusion_pytorch_model.safetensors"),
            )
            config = dict(model.config)
            config["quantization_config"] = qcfg.to_dict()
            (tmp / "config.json").write_text(json.dumps(config, indent=2, default=list))
            method = "bitsandbytes-layerwise"
        (tmp / MARKER).write_text(json.dumps({"method": method, "source": str(source), "quant_type": "nf4"}))
    return QuantizeResult(
        part="transformer",
        dst=str(dst),
        seconds=round(time.perf_counter() - start, 2),
        size_bytes=_folder_size(dst),
        peak_rss_mb=peak_rss_mb(),
        peak_device_mb=device_memory_mb(device, peak=True),
        method=method,
    )


def _dtype_kwarg(dtype: torch.dtype) -> dict[str, Any]:
    """transformers 5 names it `dtype`; 4.x (the qflux clone pins 4.52.4) only knows `torch_dtype`."""
    import transformers

    return {"dtype": dtype} if int(transformers.__version__.split(".")[0]) >= 5 else {"torch_dtype": dtype}


def quantize_text_encoder(src: Path, dst: Path, device: torch.device) -> QuantizeResult:
    import torch
    from transformers import BitsAndBytesConfig, Qwen2_5_VLForConditionalGeneration

    source = _source(src, "text_encoder")
    start = time.perf_counter()
    with atomic_dir(dst) as tmp:
        dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
        qcfg = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=dtype)
        model = Qwen2_5_VLForConditionalGeneration.from_pretrained(
            str(source), quantization_config=qcfg, **_dtype_kwarg(dtype), device_map={"": device}
        )
        model.save_pretrained(str(tmp))
        (tmp / MARKER).write_text(json.dumps({"method": "transformers-bitsandbytes", "source": str(source), "quant_type": "nf4"}))
    return QuantizeResult(
        part="text-encoder",
        dst=str(dst),
        seconds=round(time.perf_counter() - start, 2),
        size_bytes=_folder_size(dst),
        peak_rss_mb=peak_rss_mb(),
        peak_device_mb=device_memory_mb(device, peak=True),
        method="transformers-bitsandbytes",
    )


def main(argv: list[str] | None = None) -> int:
    """`aipc-env quantize`'s worker: the result goes to --result (commands/quantize.py reads it back)."""
    from aipc_env.core.formats import write_model
    from aipc_env.errors import ExitCode
    from aipc_env.launch.hops import QuantizeRun, run_worker
    from aipc_env.workers.train.devices import pick_device

    args = QuantizeRun.parse(argv)

    def body() -> int:
        fn = quantize_transformer if args.part == "transformer" else quantize_text_encoder
        write_model(args.result, fn(Path(args.src), Path(args.dst), pick_device(args.device)))
        return ExitCode.OK

    return run_worker("quantize", body, result=args.result)


if __name__ == "__main__":
    sys.exit(main())
