"""The fit phase: NF4 transformer + LoRA (peft) + Adam8bit under accelerate, from cached latents and embeddings.
The text encoder and VAE are never loaded here. Stops exactly at max_train_steps; checkpoints keep at most K;
resume restores LoRA weights, optimizer, scheduler and step, and the data order and noise are functions of the
step, so a resumed run ends with the same weights as an uninterrupted one."""

from __future__ import annotations

import gc
import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aipc_env.core.fileio import loads_json, respect_umask
from aipc_env.core.formats import write_model
from aipc_env.core.heartbeat import Heartbeat
from aipc_env.core.runfolder import RunFolder, lora_file_in
from aipc_env.errors import AipcError, ExitCode
from aipc_env.train.areas import PIPELINE_CONTROL_PIXELS
from aipc_env.train.config import BUILTIN_SYNTHETIC, BUILTIN_TINY, TrainConfig
from aipc_env.train.progress import PhaseProgress
from aipc_env.train.results import FitSummary
from aipc_env.train.resume import CheckpointState, model_identity, resume_dir, training_fingerprint
from aipc_env.train.verdict import verdict_lines, verdict_passes
from aipc_env.workers.train.checkpoint import restore_checkpoint, save_checkpoint
from aipc_env.workers.train.devices import DEVICE_FIX, compute_dtype, device_memory_mb, require_device
from aipc_env.workers.train.lora_file import save_run_lora
from aipc_env.workers.train.objective import flow_matching_loss

if TYPE_CHECKING:
    import torch
    from torch.optim.lr_scheduler import LRScheduler

    from aipc_env.workers.train.cache import CacheEntry

__all__ = ["bucket_groups", "bucket_positions", "collate", "load_transformer", "run_fit", "tiny_base_cache"]


def tiny_base_cache() -> Path:
    """Where the built-in model is trained once and kept (the per-user cache)."""
    from aipc_env.train.tinybase import base_cache_root

    return base_cache_root()


def load_transformer(cfg: TrainConfig, device: torch.device, dtype: torch.dtype, log: Callable[[str], object] = print) -> Any:
    """The NF4 transformer: a pre-quantized dir, quantized on load on a GPU/XPU, or (CPU) loaded then quantized
    layer by layer with bitsandbytes (diffusers' bitsandbytes loader refuses to run without a GPU)."""
    import torch
    from diffusers import QwenImageTransformer2DModel

    from aipc_env.workers.train.tiny import quantize_linear_layers_nf4

    assert cfg.model
    if cfg.model.path == BUILTIN_TINY:
        from aipc_env.workers.train.tinyedit import load_tiny_base

        model = load_tiny_base(tiny_base_cache(), log=log)
        quantize_linear_layers_nf4(model, device, dtype)
        return model
    if cfg.model.transformer_path:
        from aipc_env.workers.train.prequantized import load_nf4_transformer

        return load_nf4_transformer(Path(cfg.model.transformer_path), device, dtype)
    if device.type != "cpu":
        from diffusers import BitsAndBytesConfig

        q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=dtype)
        return QwenImageTransformer2DModel.from_pretrained(
            cfg.model.path, subfolder="transformer", quantization_config=q, torch_dtype=dtype, device_map={"": device}
        )
    model = QwenImageTransformer2DModel.from_pretrained(cfg.model.path, subfolder="transformer", torch_dtype=torch.float32)
    quantize_linear_layers_nf4(model, device, dtype)
    return model


def collate(entries: list[CacheEntry], drop: list[bool], device: torch.device, dtype: torch.dtype) -> dict[str, Any]:
    """Stack cached entries into model inputs; prompts are padded with a mask; dropped captions use the
    empty-prompt embeddings (the cache keys qflux gets wrong)."""
    import torch

    embeds: list[torch.Tensor] = []
    masks: list[torch.Tensor] = []
    for e, d in zip(entries, drop):
        pe = e["empty_prompt_embeds"] if d else e["prompt_embeds"]
        pm = e["empty_prompt_mask"] if d else e["prompt_mask"]
        embeds.append(pe.float())
        masks.append(pm.bool() if pm is not None else torch.ones(pe.shape[0], dtype=torch.bool))
    length = max(x.shape[0] for x in embeds)
    padded = torch.zeros(len(embeds), length, embeds[0].shape[-1])
    mask = torch.zeros(len(embeds), length, dtype=torch.bool)
    for i, (x, m) in enumerate(zip(embeds, masks)):
        padded[i, : x.shape[0]] = x
        mask[i, : x.shape[0]] = m
    target = torch.stack([e["target"].float() for e in entries])
    controls = torch.cat(
        [torch.stack([e["controls"][k].float() for e in entries]) for k in range(len(entries[0]["controls"]))], dim=1
    )
    weights: torch.Tensor | None = None
    if any(e.get("mask") is not None for e in entries):
        weights = torch.stack(
            [tm.float() if (tm := e.get("mask")) is not None else torch.zeros(target.shape[1]) for e in entries]
        )
    return {
        "target": target.to(device, dtype),
        "controls": controls.to(device, dtype),
        "prompt_embeds": padded.to(device, dtype),
        "prompt_mask": None if bool(mask.all()) else mask.to(device),
        "img_shapes": [list(map(tuple, e["shapes"])) for e in entries],
        "token_mask": None if weights is None else weights.to(device),
    }


def _positions(step_micro: int, batch: int, n: int, seed: int) -> list[int]:
    """Sample indices of one micro-batch: a fixed permutation per epoch, a function of the micro-step only."""
    import torch

    out: list[int] = []
    for pos in range(step_micro * batch, (step_micro + 1) * batch):
        epoch, i = divmod(pos, n)
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed * 7919 + epoch))
        out.append(int(perm[i]))
    return out


def bucket_groups(shapes: list[list[tuple[int, int, int]]] | None, n: int) -> list[list[int]]:
    """Sample indices grouped by their img_shapes (one aspect-ratio bucket per group), in first-seen order; one
    group of all when the index has no shapes."""
    if shapes is None:
        return [list(range(n))]
    groups: dict[tuple[tuple[int, int, int], ...], list[int]] = {}
    for i, s in enumerate(shapes):
        groups.setdefault(tuple(map(tuple, s)), []).append(i)  # type: ignore[arg-type]  # rows of 3 ints
    return list(groups.values())


def bucket_positions(step_micro: int, batch: int, groups: list[list[int]], seed: int) -> list[int]:
    """Sample indices of one micro-batch, all from one bucket: per epoch each bucket is shuffled and cut into
    batches (the last one filled from the bucket's start), and the batches are shuffled. A function of the
    micro-step only (resume-exact). One bucket: the plain per-epoch permutation."""
    import torch

    if len(groups) == 1:
        return [groups[0][i] for i in _positions(step_micro, batch, len(groups[0]), seed)]
    per_epoch = sum(math.ceil(len(g) / batch) for g in groups)
    epoch, k = divmod(step_micro, per_epoch)
    g = torch.Generator().manual_seed(seed * 7919 + epoch)
    batches: list[list[int]] = []
    for members in groups:
        order = [members[int(i)] for i in torch.randperm(len(members), generator=g)]
        for start in range(0, len(order), batch):
            batches.append([order[(start + j) % len(order)] for j in range(batch)])
    return batches[int(torch.randperm(len(batches), generator=g)[k])]


def _save_checkpoint(
    cfg: TrainConfig, step: int, model: torch.nn.Module, opt: torch.optim.Optimizer, sched: LRScheduler, smoothed: float | None
) -> Path:
    assert cfg.model
    state = CheckpointState(
        step=step,
        smoothed_loss=smoothed,
        lora_rank=cfg.lora.rank,
        lora_alpha=cfg.lora.alpha,
        target_modules=cfg.lora.target_modules,
        model=model_identity(cfg.model.path),
        fingerprint=training_fingerprint(cfg),
    )
    return save_checkpoint(Path(cfg.output_dir), state, model, opt, sched, limit=cfg.train.checkpoints_total_limit)


def _loaded_models() -> list[str]:
    """Classes of the model instances alive in this process (proves the fit phase holds no text encoder)."""
    import warnings

    import torch

    names: set[str] = set()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        objects = gc.get_objects()
    for obj in objects:
        try:
            if (
                type(obj).__name__.endswith(("ForConditionalGeneration", "Transformer2DModel", "AutoencoderKLQwenImage"))
                and isinstance(obj, torch.nn.Module)
                and type(obj).__name__.endswith(("ForConditionalGeneration", "Transformer2DModel", "AutoencoderKLQwenImage"))
            ):
                names.add(type(obj).__name__)
        except ReferenceError:
            continue
    return sorted(names)


def _plot(rows: list[dict[str, Any]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot([r["step"] for r in rows], [r["loss"] for r in rows], alpha=0.4, label="loss")
    ax.plot([r["step"] for r in rows], [r["smoothed_loss"] for r in rows], label="smoothed")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("flow-matching loss")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def _steps_left(step: int, cfg: TrainConfig, rows: list[dict[str, Any]]) -> str:
    """What a heartbeat inside step `step + 1` says is left: the steps after it, and the last step's time."""
    last = f"; the last took {rows[-1]['step_seconds']:.0f} s" if rows else ""
    return f"{cfg.train.max_train_steps - step - 1} more step(s) after it{last}"


def run_fit(cfg: TrainConfig, log: Callable[[str], None] = print) -> int:
    import torch
    from accelerate import Accelerator
    from diffusers.optimization import get_scheduler
    from peft import LoraConfig

    from aipc_env.workers.train.cache import load_cache_index, read_entry

    assert cfg.data
    accelerator = Accelerator(mixed_precision="no", cpu=cfg.device == "cpu")
    device = accelerator.device
    if cfg.device != "auto":
        wanted = require_device(cfg.device)
        if device.type != wanted.type:
            raise AipcError(
                f"accelerate placed the fit phase on {device}, the config names {cfg.device}", key="device", fix=DEVICE_FIX
            )
    dtype = compute_dtype(device, cfg.compute_dtype)
    paths, index = load_cache_index(cfg)
    groups = bucket_groups(index.shapes, len(paths))
    from accelerate.utils import set_seed

    set_seed(cfg.train.seed)  # LoRA init and everything after it is a function of the seed
    assert cfg.model
    how = (
        "pre-quantized NF4"
        if cfg.model.transformer_path
        else "quantizing to NF4 on load"
        if device.type != "cpu"
        else "then quantizing its Linear layers to NF4"
    )
    log(f"fit: loading the transformer ({cfg.model.transformer_path or cfg.model.path}; {how}) ...")
    t_load = time.perf_counter()
    with Heartbeat(log, "fit: still loading the transformer"):
        model = load_transformer(cfg, device, dtype, log=log)
    log(f"fit: transformer ready in {time.perf_counter() - t_load:.1f} s")
    model.requires_grad_(False)
    model.add_adapter(
        LoraConfig(
            r=cfg.lora.rank,
            lora_alpha=cfg.lora.alpha,  # type: ignore[arg-type]  # peft says int; a float alpha works (it scales by alpha / r)
            target_modules=cfg.lora.target_modules,
            init_lora_weights=cfg.lora.init if cfg.lora.init == "gaussian" else True,
        )
    )
    if cfg.train.gradient_checkpointing:
        model.enable_gradient_checkpointing()
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        p.data = p.data.float()
    if cfg.optimizer.type == "adam8bit":
        from bitsandbytes.optim.adam import Adam8bit

        # typed as torch's Optimizer: bitsandbytes leaves Optimizer8bit.step unannotated
        opt: torch.optim.Optimizer = Adam8bit(
            params, lr=cfg.train.learning_rate, betas=cfg.optimizer.betas, weight_decay=cfg.optimizer.weight_decay
        )
    else:
        opt = torch.optim.AdamW(
            params, lr=cfg.train.learning_rate, betas=cfg.optimizer.betas, weight_decay=cfg.optimizer.weight_decay
        )
    sched = get_scheduler(
        cfg.train.lr_scheduler, opt, num_warmup_steps=cfg.train.warmup_steps, num_training_steps=cfg.train.max_train_steps
    )
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    log_path = out / "train_log.jsonl"
    step: int = 0
    smoothed: float | None = None
    rows: list[dict[str, Any]] = []
    resume = resume_dir(cfg)
    if resume is not None:
        state = restore_checkpoint(resume, model, opt, sched, device)
        step, smoothed = state.step, state.smoothed_loss
        if log_path.is_file():
            rows = [r for r in map(loads_json, log_path.read_text().splitlines()) if r["step"] <= step]
        log(f"fit: resumed from {resume} at step {step}")
    models = _loaded_models()
    log(
        f"fit: device {device}, compute dtype {str(dtype).replace('torch.', '')}, {len(paths)} cached samples, "
        f"{sum(p.numel() for p in params)} LoRA parameters; models in memory: {', '.join(models)}; "
        f"{len(groups)} aspect-ratio bucket(s), each batch from one"
    )
    accum, bs = cfg.train.gradient_accumulation_steps, cfg.data.batch_size
    t_step = time.perf_counter()
    beat = Heartbeat(log, "fit: step running")  # a step can take longer than a silence may (the tiny model on a CPU)
    progress = PhaseProgress("fit", cfg.train.max_train_steps, unit="steps", done=step, log=beat.say)
    if step < cfg.train.max_train_steps:
        beat.say(
            f"fit: step {step + 1} starting (the first one also compiles kernels: on an XPU Triton's JIT can take "
            "a minute or more the first time)"
        )
    with log_path.open("w", encoding="utf-8") as fh, progress, beat:
        for r in rows:
            fh.write(json.dumps(r) + "\n")
        while step < cfg.train.max_train_steps:
            beat.waiting(f"fit: step {step + 1}/{cfg.train.max_train_steps} running", left=_steps_left(step, cfg, rows))
            total = 0.0
            for k in range(accum):
                micro = step * accum + k
                idx = bucket_positions(micro, bs, groups, cfg.train.seed)
                read = [read_entry(paths[i]) for i in idx]
                entries = [e for e in read if e is not None]
                if len(entries) != len(read):
                    raise AipcError(
                        "a cache entry became unreadable", path=cfg.resolved_cache_dir(), fix="run the cache phase again"
                    )
                g = torch.Generator().manual_seed(cfg.train.seed * 1_000_003 + micro)
                drop = [bool(torch.rand(1, generator=g) < cfg.data.caption_dropout_rate) for _ in entries]
                batch = collate(entries, drop, device, dtype)
                with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
                    loss = flow_matching_loss(model, batch, g, cfg.data.mask_weight)
                accelerator.backward(loss / accum)
                total += float(loss.detach()) / accum
            if cfg.train.max_grad_norm:
                torch.nn.utils.clip_grad_norm_(params, cfg.train.max_grad_norm)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            step += 1
            if not math.isfinite(total):
                log(f"fit: loss is {total} at step {step}; stopping")
                return ExitCode.PROBLEMS
            smoothed = total if smoothed is None else 0.9 * smoothed + 0.1 * total
            now = time.perf_counter()
            row: dict[str, Any] = {
                "step": step,
                "loss": round(total, 6),
                "smoothed_loss": round(smoothed, 6),
                "lr": sched.get_last_lr()[0],
                "step_seconds": round(now - t_step, 4),
                "device_memory_mb": device_memory_mb(device),
            }
            t_step = now
            rows.append(row)
            fh.write(json.dumps(row) + "\n")
            fh.flush()
            progress.advance(
                f"step {step}/{cfg.train.max_train_steps} loss {total:.4f} smoothed {smoothed:.4f} "
                f"lr {row['lr']:.2e} {row['step_seconds'] * 1000:.0f} ms"
            )
            if step % cfg.train.checkpointing_steps == 0 and step < cfg.train.max_train_steps:
                saved = _save_checkpoint(cfg, step, model, opt, sched, smoothed)
                progress.note(f"fit: checkpoint {saved}")
    lora_dir = RunFolder(out).lora_dir
    save_run_lora(lora_dir, model)  # its alpha / rank folded into lora_B: the trained strength in diffusers and ComfyUI
    respect_umask(lora_dir)  # safetensors writes 0600 through a temp file; the LoRA is meant to be shared
    _plot(rows, out / "loss.png")
    log(f"fit: {step} steps done; log {log_path}; plot {out / 'loss.png'}")
    if cfg.model and cfg.model.path != BUILTIN_TINY and cfg.control_area() != PIPELINE_CONTROL_PIXELS:
        log(
            f"fit: this LoRA learned controls at {cfg.control_area()} pixels (data.control_pixels), not the pipeline's "
            f"{PIPELINE_CONTROL_PIXELS}: to edit as it was trained, call the diffusers pipeline inside "
            f"`with aipc_env.workers.train.conditioning.pipeline_control_pixels(pipe, {cfg.control_area()}):`"
        )
    verdict = None
    if cfg.data.datasets == [BUILTIN_SYNTHETIC]:
        from aipc_env.workers.train.cache import synthetic_shapes
        from aipc_env.workers.train.heldout import measure_builtin_edit

        t_judge = time.perf_counter()
        with Heartbeat(log, f"fit: held-out check of {cfg.data.heldout_samples} samples running"):
            verdict = measure_builtin_edit(
                model,
                count=cfg.data.heldout_samples,
                latent_hw=cfg.data.target_size[0] // 8,
                device=device,
                dtype=dtype,
                control_shape=synthetic_shapes(cfg)[1],
            )
        log(f"fit: held-out check done in {time.perf_counter() - t_judge:.2f} s")
    summary = FitSummary(
        steps=step,
        models_in_memory=models,
        lora=str(lora_file_in(lora_dir)),
        final_smoothed_loss=smoothed,
        resumed_from=str(resume) if resume else None,
        heldout=verdict,
    )
    write_model(RunFolder(out).fit_summary, summary)
    if verdict is not None:
        for line in verdict_lines(verdict, "fit: "):
            log(line)
        if not verdict_passes(verdict):
            return ExitCode.PROBLEMS
    return ExitCode.OK
