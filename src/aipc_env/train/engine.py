"""The built-in engine, run by the launcher inside the training env: `python -m aipc_env.train.engine
--phase cache|fit --config CONFIG` (fit under `accelerate launch`).

Implemented here: model `builtin:tiny` with dataset `builtin:synthetic` — a tiny random Qwen-Image-Edit
transformer, NF4-quantized with bitsandbytes, LoRA via peft, Adam8bit, accelerate, the pipelines' flow-matching
objective, exact step count, diffusers-format LoRA with adapter metadata, a per-step log and a loss plot.
Real model directories and image datasets (text encoder + VAE cache phase) are not implemented yet: the engine
refuses them with a clear message before loading anything.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import time
from pathlib import Path

from aipc_env.errors import AipcError, InputError
from aipc_env.train.config import BUILTIN_SYNTHETIC, BUILTIN_TINY, TrainConfig, load_config

TINY_VERSION = "tiny-v1"


def _check_supported(cfg: TrainConfig) -> None:
    assert cfg.model and cfg.data
    if cfg.model.path != BUILTIN_TINY or any(d != BUILTIN_SYNTHETIC for d in cfg.data.datasets):
        raise InputError("the built-in engine currently trains only model 'builtin:tiny' on dataset "
                         "'builtin:synthetic'; real Qwen-Image-Edit directories and image datasets are not "
                         "implemented yet", key="model.path",
                         fix="use engine: qflux with an adapted qwen-image-finetune clone for real models")


def _sample_key(cfg: TrainConfig, index: int) -> str:
    assert cfg.data
    text = json.dumps({"v": TINY_VERSION, "i": index, "size": list(cfg.data.target_size)}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _latent_hw(cfg: TrainConfig) -> int:
    assert cfg.data
    h, w = cfg.data.target_size
    if h != w:
        raise InputError("builtin:synthetic uses square samples", key="data.target_size", fix="use [64, 64]")
    return h // 8


def run_cache(cfg: TrainConfig) -> int:
    import torch

    from aipc_env.tiny import make_batch

    assert cfg.data
    cache = cfg.resolved_cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    made = skipped = 0
    start = time.perf_counter()
    for i in range(cfg.data.synthetic_samples):
        path = cache / f"{_sample_key(cfg, i)}.pt"
        if path.is_file():
            try:
                torch.load(path, weights_only=True)
                skipped += 1
                continue
            except Exception:  # noqa: BLE001 - a corrupt entry is redone
                print(f"cache: entry {path.name} is corrupt; redoing it", flush=True)
        b = make_batch(batch_size=1, latent_hw=_latent_hw(cfg), seed=1000 + i)
        entry = {"target": b.target[0].half(), "control": b.control[0].half(),
                 "prompt_embeds": b.prompt_embeds[0].half(), "latent_hw": _latent_hw(cfg)}
        tmp = path.with_suffix(".tmp")
        torch.save(entry, tmp)
        os.replace(tmp, path)
        made += 1
        print(f"cache: {i + 1}/{cfg.data.synthetic_samples} {path.name}", flush=True)
    size = sum(p.stat().st_size for p in cache.glob("*.pt"))
    print(f"cache: {made} written, {skipped} already cached, {size / 1024:.1f} KiB in {cache} "
          f"({time.perf_counter() - start:.2f} s)", flush=True)
    return 0


def _load_cache(cfg: TrainConfig) -> list[dict]:
    import torch

    assert cfg.data
    entries = []
    for i in range(cfg.data.synthetic_samples):
        path = cfg.resolved_cache_dir() / f"{_sample_key(cfg, i)}.pt"
        if not path.is_file():
            raise AipcError(f"cache entry {path.name} is missing", path=cfg.resolved_cache_dir(),
                            fix="run the cache phase first (the launcher does)")
        entries.append(torch.load(path, weights_only=True))
    return entries


def _collate(entries: list[dict]):
    import torch

    from aipc_env.tiny import TinyBatch

    h = entries[0]["latent_hw"] // 2
    return TinyBatch(torch.stack([e["target"] for e in entries]).float(),
                     torch.stack([e["control"] for e in entries]).float(),
                     torch.stack([e["prompt_embeds"] for e in entries]).float(), None,
                     [[(1, h, h), (1, h, h)]] * len(entries))


def _device_memory_mb(device) -> float | None:
    import torch

    if device.type == "xpu":
        return round(torch.xpu.memory_allocated(device) / 2**20, 1)
    if device.type == "cuda":
        return round(torch.cuda.memory_allocated(device) / 2**20, 1)
    return None


def _plot(log_rows: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot([r["step"] for r in log_rows], [r["loss"] for r in log_rows], alpha=0.4, label="loss")
    ax.plot([r["step"] for r in log_rows], [r["smoothed_loss"] for r in log_rows], label="smoothed")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("flow-matching loss")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def run_fit(cfg: TrainConfig) -> int:
    import torch
    from accelerate import Accelerator
    from accelerate.utils import set_seed
    from diffusers import QwenImageEditPipeline
    from diffusers.optimization import get_scheduler
    from peft import LoraConfig
    from peft.utils import get_peft_model_state_dict

    from aipc_env.tiny import build_tiny_transformer, flow_matching_loss, quantize_linear_layers_nf4

    assert cfg.data
    accelerator = Accelerator(mixed_precision="no",
                              gradient_accumulation_steps=cfg.train.gradient_accumulation_steps,
                              cpu=cfg.device == "cpu")
    device = accelerator.device
    dtype = {"auto": torch.float32 if device.type == "cpu" else torch.bfloat16, "bfloat16": torch.bfloat16,
             "float16": torch.float16, "float32": torch.float32}[cfg.compute_dtype]
    set_seed(cfg.train.seed)
    entries = _load_cache(cfg)
    print(f"fit: device {device}, compute dtype {str(dtype).replace('torch.', '')}, {len(entries)} cached samples; "
          "no text encoder or VAE is loaded in this phase", flush=True)
    model = build_tiny_transformer(seed=cfg.train.seed)
    n = quantize_linear_layers_nf4(model, device, dtype)
    model.requires_grad_(False)
    lora = LoraConfig(r=cfg.lora.rank, lora_alpha=cfg.lora.alpha, target_modules=cfg.lora.target_modules,
                      init_lora_weights=cfg.lora.init if cfg.lora.init == "gaussian" else True)
    model.add_adapter(lora)
    if cfg.train.gradient_checkpointing:
        model.enable_gradient_checkpointing()
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        p.data = p.data.float()
    if cfg.optimizer.type == "adam8bit":
        import bitsandbytes as bnb

        opt = bnb.optim.Adam8bit(params, lr=cfg.train.learning_rate, betas=cfg.optimizer.betas,
                                 weight_decay=cfg.optimizer.weight_decay)
    else:
        opt = torch.optim.AdamW(params, lr=cfg.train.learning_rate, betas=cfg.optimizer.betas,
                                weight_decay=cfg.optimizer.weight_decay)
    sched = get_scheduler(cfg.train.lr_scheduler, opt, num_warmup_steps=cfg.train.warmup_steps,
                          num_training_steps=cfg.train.max_train_steps)
    loader = torch.utils.data.DataLoader(entries, batch_size=cfg.data.batch_size, shuffle=True,
                                         collate_fn=_collate, num_workers=0,
                                         generator=torch.Generator().manual_seed(cfg.train.seed))
    model, opt, loader, sched = accelerator.prepare(model, opt, loader, sched)
    print(f"fit: {n} NF4 layers, {sum(p.numel() for p in params)} LoRA parameters, "
          f"{cfg.train.max_train_steps} steps x {cfg.train.gradient_accumulation_steps} accumulation", flush=True)
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    log_path = out / "train_log.jsonl"
    rows: list[dict] = []
    step, smoothed, noise = 0, None, torch.Generator().manual_seed(cfg.train.seed)
    t_step = time.perf_counter()
    with log_path.open("w", encoding="utf-8") as log:
        while step < cfg.train.max_train_steps:
            for batch in loader:
                batch = batch.to(device, dtype)
                with accelerator.accumulate(model):
                    with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
                        loss = flow_matching_loss(model, batch, noise)
                    accelerator.backward(loss)
                    opt.step()
                    sched.step()
                    opt.zero_grad(set_to_none=True)
                if not accelerator.sync_gradients:
                    continue
                step += 1
                value = float(loss.detach())
                if not math.isfinite(value):
                    print(f"fit: loss is {value} at step {step}; stopping", flush=True)
                    return 1
                smoothed = value if smoothed is None else 0.9 * smoothed + 0.1 * value
                now = time.perf_counter()
                row = {"step": step, "loss": round(value, 6), "smoothed_loss": round(smoothed, 6),
                       "lr": sched.get_last_lr()[0], "step_seconds": round(now - t_step, 4),
                       "device_memory_mb": _device_memory_mb(device)}
                t_step = now
                rows.append(row)
                log.write(json.dumps(row) + "\n")
                print(f"step {step}/{cfg.train.max_train_steps} loss {value:.4f} smoothed {smoothed:.4f} "
                      f"lr {row['lr']:.2e} {row['step_seconds'] * 1000:.0f} ms", flush=True)
                if step >= cfg.train.max_train_steps:
                    break
    unwrapped = accelerator.unwrap_model(model)
    lora_dir = out / "lora"
    QwenImageEditPipeline.save_lora_weights(
        lora_dir, transformer_lora_layers=get_peft_model_state_dict(unwrapped),
        transformer_lora_adapter_metadata=unwrapped.peft_config["default"].to_dict())
    _check_reload(lora_dir, unwrapped)
    _plot(rows, out / "loss.png")
    print(f"fit: {step} steps done; LoRA saved to {lora_dir / 'pytorch_lora_weights.safetensors'}; "
          f"log {log_path}; plot {out / 'loss.png'}", flush=True)
    return 0


def _check_reload(lora_dir: Path, trained) -> None:
    """Load the saved LoRA back through diffusers' Qwen-Image loader into a fresh model: same tensors, same alpha."""
    import torch
    from diffusers import QwenImageEditPipeline
    from peft.utils import get_peft_model_state_dict

    from aipc_env.tiny import build_tiny_transformer

    state, meta = QwenImageEditPipeline.lora_state_dict(str(lora_dir), return_lora_metadata=True)
    fresh = build_tiny_transformer()
    QwenImageEditPipeline.load_lora_into_transformer(state, transformer=fresh, metadata=meta)
    (config,) = fresh.peft_config.values()
    want = {k: v.float().cpu() for k, v in get_peft_model_state_dict(trained).items()}
    got = {k: v.float().cpu() for k, v in get_peft_model_state_dict(fresh, adapter_name=next(iter(fresh.peft_config))).items()}
    same = want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want)
    expected_alpha = trained.peft_config["default"].lora_alpha
    if not same or config.lora_alpha != expected_alpha:
        raise AipcError(f"the saved LoRA does not load back identically (alpha {config.lora_alpha}, expected "
                        f"{expected_alpha})", path=lora_dir)
    print(f"fit: LoRA reloaded through diffusers: {len(got)} tensors identical, alpha {config.lora_alpha}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="aipc_env.train.engine")
    parser.add_argument("--phase", choices=["cache", "fit"], required=True)
    parser.add_argument("--config", required=True)
    args = parser.parse_args(argv)
    try:
        cfg = load_config(args.config)
        _check_supported(cfg)
        return run_cache(cfg) if args.phase == "cache" else run_fit(cfg)
    except AipcError as exc:
        print(exc.render(), file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
