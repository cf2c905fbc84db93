"""The smoke run's own steps, run inside the qflux env by the smoke launcher:
`python -m aipc_env.workers.qflux_smoke prepare --out DIR --recommended FILE --config FILE [--plus]` builds the
tiny random Qwen-Image-Edit(-Plus) pipeline (with the env's transformers, so upstream's pinned 4.52.4 reads it)
and a 3-sample dataset, and writes the smoke config from the recommended one for the device this env has (with
an XPU, the pre-quantized folders the recommendation names are made from the tiny model with aipc-env's own
quantize); `... verify --run DIR --clone CLONE --config FILE` checks what upstream's own cache and fit phases
left behind."""

from __future__ import annotations

import glob
import json
import os
import re
import sys
from pathlib import Path
from typing import TypedDict

from aipc_env.core.runfolder import lora_file_in
from aipc_env.errors import ExitCode
from aipc_env.launch.hops import SmokePrepare, SmokeVerify, run_worker, step_of

__all__ = ["main"]


def has_xpu() -> bool:
    import torch

    return hasattr(torch, "xpu") and torch.xpu.is_available()


def prepare(out: Path, plus: bool, recommended: Path, config: Path) -> dict[str, object]:
    import numpy as np
    import yaml
    from PIL import Image

    from aipc_env.core.fileio import atomic_write_text
    from aipc_env.qflux.smoke import TINY_SIDE, smoke_config
    from aipc_env.workers.train.tinypipe import build_tiny_pipeline

    accelerator = has_xpu()
    cfg, changed = smoke_config(yaml.safe_load(recommended.read_text(encoding="utf-8")), out, accelerator=accelerator, plus=plus)
    build_tiny_pipeline(out / "model", plus=plus)
    if accelerator:  # the recommendation's pre-quantized folders, made from the tiny model as a user makes them
        import torch

        from aipc_env.workers.quantize import quantize_text_encoder, quantize_transformer

        if cfg["model"].get("text_encoder_path"):
            quantize_text_encoder(out / "model", Path(cfg["model"]["text_encoder_path"]), torch.device("xpu"))
        if cfg["model"].get("transformer_path"):
            quantize_transformer(out / "model", Path(cfg["model"]["transformer_path"]), torch.device("xpu"))
    rng = np.random.default_rng(0)
    images, control = out / "data" / "images", out / "data" / "control"
    images.mkdir(parents=True, exist_ok=True)
    control.mkdir(parents=True, exist_ok=True)
    for i, name in enumerate(("a", "b", "c")):
        base = rng.integers(0, 255, (TINY_SIDE, TINY_SIDE, 3), dtype=np.uint8)
        Image.fromarray(base).save(control / f"{name}.png")
        Image.fromarray(np.flip(base, axis=1).copy()).save(images / f"{name}.png")
        (images / f"{name}.txt").write_text(f"mirror the picture {i}", encoding="utf-8")
    atomic_write_text(out / "changes.json", json.dumps(changed, indent=2))
    atomic_write_text(config, yaml.safe_dump(cfg, sort_keys=False))
    return {"model": str(out / "model"), "data": str(out / "data"), "xpu": accelerator, "changed": sorted(changed)}


class _SmokeCheck(TypedDict):
    name: str
    ok: bool
    detail: str


class _SmokeVerdict(TypedDict):
    """What the verify step writes to verify.json."""

    passed: bool
    checks: list[_SmokeCheck]


def verify(run: Path, clone: Path, config: Path) -> _SmokeVerdict:
    import torch
    import yaml
    from bitsandbytes.nn.modules import Linear4bit, Params4bit  # where bnb.nn re-exports them from

    cfg = yaml.safe_load(config.read_text(encoding="utf-8"))
    model, output = Path(cfg["model"]["pretrained_model_name_or_path"]), Path(cfg["logging"]["output_dir"])
    steps, every = cfg["train"]["max_train_steps"], cfg["train"]["checkpointing_steps"]
    keep = cfg["train"]["checkpoints_total_limit"]
    rank, alpha = cfg["model"]["lora"]["r"], cfg["model"]["lora"]["lora_alpha"]

    sys.path.insert(0, str(clone / "src"))
    checks: list[_SmokeCheck] = []

    def check(name: str, ok: bool, detail: str) -> None:
        checks.append({"name": name, "ok": bool(ok), "detail": detail})

    from qflux.models.load_model import load_transformer

    dit = load_transformer(str(model), torch.bfloat16, quantize_type="nf4", transformer_path=cfg["model"].get("transformer_path"))
    linears = {n: m for n, m in dit.transformer_blocks.named_modules() if isinstance(m, torch.nn.Linear)}
    nf4 = [
        n
        for n, m in linears.items()
        if isinstance(m, Linear4bit) and isinstance(m.weight, Params4bit) and m.weight.quant_type == "nf4"
    ]
    check(
        "nf4-linear-layers",
        bool(linears) and len(nf4) == len(linears),
        f"{len(nf4)}/{len(linears)} Linear layers of the DiT blocks are bnb.nn.Linear4bit (nf4), as the clone's "
        "load_transformer(quantize_type='nf4') gives them to the fit phase",
    )
    log = run / "smoke.log"
    text = log.read_text(encoding="utf-8", errors="replace") if log.is_file() else ""
    row = re.search(r"DTypes\s*│\s*nf4\s*│\s*([^│]+)│", text)
    check(
        "fit-phase-ran-nf4",
        row is not None,
        f"upstream's model summary in the fit phase: nf4 {row.group(1).strip()}"
        if row
        else f"no nf4 row in upstream's model summary ({log})",
    )
    lasts = sorted(glob.glob(str(output / "**" / "checkpoint-last-*-last"), recursive=True))
    state = {}
    if lasts:
        state = json.loads((Path(lasts[-1]) / "state.json").read_text(encoding="utf-8"))
    others = [p for p in glob.glob(str(output / "**" / "checkpoint-*"), recursive=True) if p not in lasts]
    check(
        "final-checkpoint",
        bool(lasts) and state.get("global_step") == steps and bool(state.get("is_last")),
        f"{lasts[-1] if lasts else 'none'}: global_step {state.get('global_step')} (max_train_steps {steps}); "
        f"{len(lasts)} final and {len(others)} periodic checkpoint(s)",
    )
    steps_kept = sorted(int(p.rsplit("-", 1)[-1]) for p in others if p.rsplit("-", 1)[-1].isdigit())
    newest = list(range(every, steps + 1, every))[-keep:]
    check(
        "checkpoints-pruned",
        steps_kept == newest,
        f"periodic checkpoints left at steps {steps_kept}: checkpoints_total_limit {keep} keeps the newest "
        f"{newest} of steps 1-{steps} (the adapted pruning; upstream never prunes)",
    )
    ok_reload, detail = False, "no final checkpoint"
    if lasts:
        from diffusers import QwenImageEditPipeline, QwenImageTransformer2DModel

        weights = lora_file_in(lasts[-1])
        sd, meta = QwenImageEditPipeline.lora_state_dict(str(weights.parent), weight_name=weights.name, return_lora_metadata=True)
        fresh = QwenImageTransformer2DModel.from_pretrained(str(model), subfolder="transformer")
        QwenImageEditPipeline.load_lora_into_transformer(sd, transformer=fresh, metadata=meta)
        layer = fresh.transformer_blocks[0].attn.to_q
        scaling = list(layer.scaling.values())
        up = [v for k, v in sd.items() if re.search(r"lora[._](B|up)\b", k)]
        trained = bool(up) and any(float(v.abs().max()) > 0 for v in up)  # B starts at zero
        ok_reload = (
            bool(meta)
            and meta.get("transformer.lora_alpha") == alpha
            and meta.get("transformer.r") == rank
            and scaling == [alpha / rank]
            and trained
            and all(bool(torch.isfinite(v).all()) for v in sd.values())
        )
        detail = (
            f"{len(sd)} tensors via diffusers, metadata alpha {(meta or {}).get('transformer.lora_alpha')} "
            f"r {(meta or {}).get('transformer.r')}, scaling {scaling} (expected {alpha / rank:g}), "
            f"lora_B trained: {trained}"
        )
    check("lora-reloads-with-alpha", ok_reload, detail)
    return {"passed": all(c["ok"] for c in checks), "checks": checks}


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    spec = SmokePrepare if step_of(argv) == SmokePrepare.STEP else SmokeVerify
    args = spec.parse(argv)
    return run_worker(f"the smoke's {spec.STEP} step", lambda: _step(args))


def _step(args: SmokePrepare | SmokeVerify) -> int:
    from aipc_env.workers.train.compat import quiet_bitsandbytes_notices

    quiet_bitsandbytes_notices()
    if isinstance(args, SmokePrepare):
        print(json.dumps(prepare(args.out, args.plus, args.recommended, args.config)))
        return ExitCode.OK
    result = verify(args.run, args.clone, args.config)
    (args.run / "verify.json").write_text(json.dumps(result, indent=2), encoding="utf-8")
    for c in result["checks"]:
        print(f"smoke: {'ok  ' if c['ok'] else 'FAIL'} {c['name']}: {c['detail']}", flush=True)
    return ExitCode.OK if result["passed"] else ExitCode.PROBLEMS


if __name__ == "__main__":
    sys.exit(main())
