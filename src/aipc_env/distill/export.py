"""`distill export --format comfyui`: the published LoRA (diffusers/peft layout with adapter metadata) rewritten in
the layout ComfyUI loads and Qwen-Image-Lightning ships: `diffusion_model.<module>.lora_down.weight` (A),
`.lora_up.weight` (B) and `.alpha` (a scalar), one file, no metadata needed. diffusers reads the same layout back
through its own conversion of non-diffusers Qwen-Image LoRAs (the one that loads Lightning LoRAs).

Run in the training env: `python -m aipc_env.distill.export --config C --format comfyui [--out FILE]`.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from aipc_env.errors import AipcError, ExitCode, InputError

__all__ = ["FORMATS", "comfyui_state_dict", "export_lora", "main"]

FORMATS = ("comfyui",)
_KEY = re.compile(r"^transformer\.((?:[A-Za-z_][A-Za-z0-9_]*|[0-9]+)(?:\.(?:[A-Za-z_][A-Za-z0-9_]*|[0-9]+))*)"
                  r"\.lora_([AB])\.weight$")
_MAX_TENSORS = 100_000


def _metadata(raw: dict | None, path: Path) -> tuple[int, float]:
    """(rank, alpha) from the adapter metadata; without it the alpha is unknown (seed item 6): refused."""
    text = (raw or {}).get("lora_adapter_metadata")
    if not text:
        raise InputError("the LoRA has no adapter metadata: its alpha is unknown, and an export would load at the "
                         "wrong strength", path=path, fix="publish it again with `aipc-env distill train`")
    try:
        meta = json.loads(text)
        rank, alpha = int(meta["transformer.r"]), float(meta["transformer.lora_alpha"])
    except (ValueError, KeyError, TypeError) as exc:
        raise InputError(f"its adapter metadata is unreadable ({type(exc).__name__}: {exc})", path=path,
                         fix="publish it again with `aipc-env distill train`") from None
    if meta.get("transformer.rank_pattern") or meta.get("transformer.alpha_pattern"):
        raise InputError("per-module ranks or alphas (rank_pattern/alpha_pattern) are not exported", path=path,
                         fix="train with one rank and alpha for every module")
    if meta.get("transformer.use_dora") or meta.get("transformer.use_rslora"):
        raise InputError("DoRA or rsLoRA adapters have no ComfyUI LoRA layout", path=path,
                         fix="train a plain LoRA (use_dora and use_rslora off)")
    if rank < 1 or not alpha > 0:
        raise InputError(f"rank {rank} / alpha {alpha:g} in its metadata are not usable", path=path,
                         fix="publish it again with `aipc-env distill train`")
    return rank, alpha


def comfyui_state_dict(tensors: dict, rank: int, alpha: float, *, path: Path) -> dict:
    """diffusers-layout tensors -> ComfyUI/Lightning layout. Every key must be a transformer LoRA A/B weight of
    the stated rank, in pairs."""
    import torch

    if len(tensors) > _MAX_TENSORS:
        raise InputError(f"{len(tensors)} tensors: more than any Qwen-Image LoRA has", path=path,
                         fix="point at the run's lora/pytorch_lora_weights.safetensors")
    modules: dict[str, dict[str, torch.Tensor]] = {}
    for key, value in tensors.items():
        m = _KEY.match(key)
        if m is None:
            raise InputError(f"tensor {key!r} is not a transformer LoRA weight (transformer.<module>.lora_A/B"
                             ".weight)", path=path, fix="export only LoRAs published by `aipc-env distill train`")
        modules.setdefault(m.group(1), {})[m.group(2)] = value
    out = {}
    for module, pair in sorted(modules.items()):
        if set(pair) != {"A", "B"}:
            raise InputError(f"module {module} has lora_{''.join(pair)} without its pair", path=path,
                             fix="publish the LoRA again")
        a, b = pair["A"], pair["B"]
        if a.ndim != 2 or b.ndim != 2 or a.shape[0] != rank or b.shape[1] != rank:
            raise InputError(f"module {module}: lora_A {tuple(a.shape)} / lora_B {tuple(b.shape)} do not have rank "
                             f"{rank}", path=path, fix="publish the LoRA again")
        out[f"diffusion_model.{module}.lora_down.weight"] = a.contiguous()
        out[f"diffusion_model.{module}.lora_up.weight"] = b.contiguous()
        out[f"diffusion_model.{module}.alpha"] = torch.tensor(alpha, dtype=torch.float32)
    return out


def export_lora(lora_dir: Path, dest: Path, fmt: str = "comfyui") -> dict:
    """Write the export atomically; returns what was written."""
    from safetensors import safe_open
    from safetensors.torch import save

    from aipc_env.fileio import atomic_write_bytes

    if fmt not in FORMATS:
        raise InputError(f"unknown export format {fmt!r}", fix=f"use one of: {', '.join(FORMATS)}")
    src = Path(lora_dir) / "pytorch_lora_weights.safetensors"
    if not src.is_file():
        raise InputError("no published LoRA there", path=src, fix="run `aipc-env distill train` first")
    try:
        with safe_open(str(src), framework="pt") as fh:
            raw = fh.metadata()
            tensors = {k: fh.get_tensor(k) for k in fh.keys()}  # noqa: SIM118 - safe_open is not iterable
    except Exception as exc:  # noqa: BLE001 - any damage: one clear line
        raise InputError(f"not a readable safetensors file ({type(exc).__name__}: {exc})", path=src,
                         fix="publish the LoRA again with `aipc-env distill train`") from None
    rank, alpha = _metadata(raw, src)
    converted = comfyui_state_dict(tensors, rank, alpha, path=src)
    atomic_write_bytes(dest, save(converted, metadata={"format": "pt", "aipc_env_export": "comfyui",
                                                        "lora_rank": str(rank), "lora_alpha": f"{alpha:g}"}))
    return {"format": fmt, "path": str(dest), "modules": len(converted) // 3, "rank": rank, "alpha": alpha,
            "source": str(src)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="aipc_env.distill.export")
    parser.add_argument("--config", required=True)
    parser.add_argument("--format", choices=FORMATS, default="comfyui")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    try:
        from aipc_env.distill.config import load_distill_config

        cfg = load_distill_config(args.config)
        dest = Path(args.out) if args.out else cfg.out / "export" / f"student-{args.format}.safetensors"
        result = export_lora(cfg.out / "lora", dest, args.format)
        print(f"distill: exported {result['modules']} LoRA modules (rank {result['rank']}, alpha "
              f"{result['alpha']:g}) in the {args.format} layout to {dest}", flush=True)
        return ExitCode.OK
    except AipcError as exc:
        print(exc.render(), file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
