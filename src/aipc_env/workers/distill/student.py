"""Student LoRA training on stored teacher trajectories (the `distill train` stage).

Student step k jumps from the teacher's latents at sigma_{s*k} to sigma_{s*(k+1)} (s = student_stride, 2 for
8 -> 4 steps) in one Euler step, so its target velocity is v* = (x_{s(k+1)} - x_{sk}) / (sigma_{s(k+1)} -
sigma_{sk}). The loss is the velocity MSE, uniform or endpoint-weighted (times delta-sigma squared: the error
of the step's landing point; distillation lesson 4: uniform lets the tiny first step's huge velocities dominate).

The harness is distillation lesson 5's: the standalone transformer (NF4 on AI PCs), the LoRA added before
`accelerator.prepare`, `accelerator.backward`. Checkpoints, resume and the LoRA publish (with metadata, seed
item 6) come from the engine's machinery (aipc_env.workers.train.checkpoint). Divergence (a loss spike, or the velocity
MSE on the training pairs worsening) stops the run with a named error and keeps the last good checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import torch

from aipc_env.core.fileio import loads_json
from aipc_env.core.runfolder import RunFolder, lora_file_in
from aipc_env.distill.config import DistillConfig
from aipc_env.distill.lesson_errors import ObjectiveRose, TrainingDiverged, VelocityDiverged
from aipc_env.errors import InputError
from aipc_env.workers.distill import sampler
from aipc_env.workers.distill.lessons import check_lora_before_prepare, check_training_outcome, mark_prepared

__all__ = [
    "PairBatch",
    "Trajectory",
    "add_lora",
    "load_trajectories",
    "make_batch",
    "prepare_student",
    "publish",
    "run_student",
    "step_loss",
    "velocity_mse",
]


@dataclass
class Trajectory:
    latents: torch.Tensor
    timesteps: torch.Tensor
    sigmas: torch.Tensor
    prompted: sampler.Prompted


@dataclass
class PairBatch:
    x: torch.Tensor
    t: torch.Tensor
    sigma: torch.Tensor
    sigma_next: torch.Tensor
    v_target: torch.Tensor
    prompted: sampler.Prompted
    img_shapes: sampler.ImgShapes


def load_trajectories(cfg: DistillConfig, model_key: str) -> list[Trajectory]:
    from aipc_env.workers.distill.trajectories import load_index, read_trajectory

    index, paths = load_index(cfg)
    if (
        index.model_key != model_key
        or index.teacher_sigmas != cfg.teacher_sigmas
        or (index.height, index.width) != (cfg.height, cfg.width)
    ):
        raise InputError(
            "the stored trajectories were made with another model, grid or size than the config's",
            path=paths[0].parent if paths else cfg.out,
            fix="run `aipc-env distill trajectories` again",
        )
    out: list[Trajectory] = []
    for p in paths:
        got = read_trajectory(p)
        if got is None:
            raise InputError(
                "a trajectory file is missing or unreadable",
                path=p,
                fix="run `aipc-env distill trajectories` again (it redoes only what is missing)",
            )
        _, t = got
        out.append(
            Trajectory(
                t["latents"],
                t["timesteps"],
                t["sigmas"],
                sampler.Prompted(t["prompt_embeds"][None], t["prompt_mask"][None].bool(), t["image_pad_mask"][None].bool()),
            )
        )
    if not out:
        raise InputError("no trajectories stored", path=cfg.out / "trajectories", fix="run `aipc-env distill trajectories` first")
    return out


def _stack_prompts(items: list[sampler.Prompted]) -> sampler.Prompted:
    """Right-pad to one length (the pipeline's layout); no mask when nothing is padded (as encode_prompt)."""
    length = max(p.embeds.shape[1] for p in items)
    dim = items[0].embeds.shape[2]
    embeds = torch.zeros(len(items), length, dim, dtype=items[0].embeds.dtype)
    mask = torch.zeros(len(items), length, dtype=torch.long)
    pad = torch.zeros(len(items), length, dtype=torch.bool)
    for i, p in enumerate(items):
        n = p.embeds.shape[1]
        embeds[i, :n] = p.embeds[0]
        mask[i, :n] = p.mask[0].long() if p.mask is not None else 1
        pad[i, :n] = p.image_pad_mask[0]
    return sampler.Prompted(embeds, None if bool(mask.all()) else mask, pad)


def make_batch(
    trajs: list[Trajectory],
    picks: list[tuple[int, int]],
    stride: int,
    shapes_one: sampler.ImgShapes,
    device: torch.device,
    dtype: torch.dtype,
    *,
    starts: list[torch.Tensor] | None = None,
    ends: list[torch.Tensor] | None = None,
) -> PairBatch:
    """The pairs (trajectory i, student step k); `starts`/`ends` replace the stored latents (on-policy)."""
    xs: list[torch.Tensor] = []
    xe: list[torch.Tensor] = []
    ts: list[torch.Tensor] = []
    s0: list[torch.Tensor] = []
    s1: list[torch.Tensor] = []
    for j, (i, k) in enumerate(picks):
        tr = trajs[i]
        a, b = stride * k, stride * (k + 1)
        xs.append(starts[j] if starts is not None else tr.latents[a])
        xe.append(ends[j] if ends is not None else tr.latents[b])
        ts.append(tr.timesteps[a])
        s0.append(tr.sigmas[a])
        s1.append(tr.sigmas[b])
    x, x_end = torch.stack(xs).to(device), torch.stack(xe).to(device)
    sigma, sigma_next = torch.stack(s0).to(device, torch.float32), torch.stack(s1).to(device, torch.float32)
    v_target = (x_end.float() - x.float()) / (sigma_next - sigma).view(-1, 1, 1)
    prompted = _stack_prompts([trajs[i].prompted for i, _ in picks]).to(device, dtype)
    return PairBatch(x.to(dtype), torch.stack(ts).to(device), sigma, sigma_next, v_target, prompted, shapes_one * len(picks))


def step_loss(model: Any, batch: PairBatch, weighting: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, per-sample unweighted velocity MSE). endpoint: the error times delta-sigma squared."""
    v = sampler.velocity(model, batch.x, batch.t, batch.prompted, batch.img_shapes).float()
    err = ((v - batch.v_target) ** 2).mean(dim=(1, 2))
    if weighting == "endpoint":
        return (err * (batch.sigma_next - batch.sigma) ** 2).mean(), err.detach()
    return err.mean(), err.detach()


@torch.no_grad()
def velocity_mse(model: Any, batches: list[PairBatch], *, adapter: bool) -> float:
    """Unweighted MSE of predicted vs stored velocities (the recorded project's velocity diagnostic), adapter on or off."""
    if not adapter:
        model.disable_adapters()
    try:
        errs = [step_loss(model, b, "uniform")[1] for b in batches]
    finally:
        if not adapter:
            model.enable_adapters()
    return float(torch.cat(errs).mean())


@torch.no_grad()
def objective(model: Any, batches: list[PairBatch], weighting: str) -> float:
    return float(torch.stack([step_loss(model, b, weighting)[0] for b in batches]).mean())


def add_lora(model: Any, cfg: DistillConfig) -> list[torch.nn.Parameter]:
    """The LoRA (zero-initialised B: the student starts as the naive 4-step model); returns its parameters in
    fp32."""
    from peft import LoraConfig

    model.add_adapter(
        LoraConfig(
            r=cfg.student.rank,
            lora_alpha=cfg.student.alpha,  # type: ignore[arg-type]  # peft says int; float works
            target_modules=cfg.student.target_modules,
            init_lora_weights=True,
        )
    )
    params = [p for n, p in model.named_parameters() if "lora_" in n]
    for p in params:
        p.data = p.data.float()
        p.requires_grad_(True)
    return params


def prepare_student(accelerator: Any, model: Any, optimizer: torch.optim.Optimizer) -> Any:
    """accelerator.prepare, recording the LoRA it saw (check_lora_before_prepare proves the order)."""
    mark_prepared(model)
    return accelerator.prepare(model, optimizer)


def publish(model: Any, lora_dir: Path, *, metadata: bool = True) -> Path:
    """Distillation lesson 6's canonical path: get_peft_model_state_dict -> save_lora_weights(..., **_collate_lora_metadata).
    Written to a temp folder and renamed. `metadata=False` exists only to prove the check fires."""
    from diffusers import QwenImage21Pipeline
    from diffusers.training_utils import _collate_lora_metadata
    from peft.utils import get_peft_model_state_dict

    from aipc_env.core.fileio import atomic_dir

    extra = _collate_lora_metadata({"transformer": model}) if metadata else {}
    with atomic_dir(lora_dir) as tmp:
        QwenImage21Pipeline.save_lora_weights(str(tmp), transformer_lora_layers=get_peft_model_state_dict(model), **extra)
    return lora_file_in(lora_dir)


def _fingerprint(cfg: DistillConfig, model_key: str) -> str:
    s = cfg.student.model_dump(
        mode="json", exclude={"max_train_steps", "checkpointing_steps", "checkpoints_total_limit", "resume", "divergence"}
    )
    blob = json.dumps(
        {"student": s, "model": model_key, "sigmas": cfg.teacher_sigmas, "seed": cfg.seed, "stride": cfg.student_stride},
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _picks(g: torch.Generator, n_traj: int, n_steps: int, batch: int) -> list[tuple[int, int]]:
    idx = torch.randint(n_traj, (batch,), generator=g).tolist()
    ks = torch.randint(n_steps, (batch,), generator=g).tolist()
    return list(zip(idx, ks))


@torch.no_grad()
def _on_policy(
    model: Any,
    trajs: list[Trajectory],
    picks: list[tuple[int, int]],
    stride: int,
    shapes_one: sampler.ImgShapes,
    device: torch.device,
    dtype: torch.dtype,
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Roll the student (adapter on) from the stored noise to sigma_{stride*k}, then the teacher (adapter off)
    `stride` steps from there: the pair (x_hat_{sk}, x_hat_{s(k+1)})."""
    starts: list[torch.Tensor] = []
    ends: list[torch.Tensor] = []
    for i, k in picks:
        tr = trajs[i]
        prompted = tr.prompted.to(device, dtype)
        x = tr.latents[0][None].to(device, dtype)
        for j in range(k):
            a, b = stride * j, stride * (j + 1)
            v = sampler.velocity(model, x, tr.timesteps[a].to(device), prompted, shapes_one)
            x = (x.to(torch.float32) + (tr.sigmas[b] - tr.sigmas[a]).to(device) * v).to(v.dtype)
        start = x
        model.disable_adapters()
        try:
            for j in range(stride * k, stride * (k + 1)):
                v = sampler.velocity(model, x, tr.timesteps[j].to(device), prompted, shapes_one)
                x = (x.to(torch.float32) + (tr.sigmas[j + 1] - tr.sigmas[j]).to(device) * v).to(v.dtype)
        finally:
            model.enable_adapters()
        starts.append(start[0].cpu())
        ends.append(x[0].cpu())
    return starts, ends


def _plot(rows: list[dict[str, Any]], checks: list[dict[str, Any]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.5))
    a.plot([r["step"] for r in rows], [r["loss"] for r in rows], label="step loss")
    a.set_xlabel("optimizer step")
    a.set_ylabel("student loss")
    a.set_yscale("log")
    a.legend()
    if checks:
        b.plot([c["step"] for c in checks], [c["velocity_mse_on"] for c in checks], marker="o", label="adapter on")
        b.axhline(checks[0]["velocity_mse_off"], color="gray", linestyle="--", label="adapter off")
        b.set_xlabel("optimizer step")
        b.set_ylabel("velocity MSE (training pairs)")
        b.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def run_student(
    cfg: DistillConfig, *, log: Callable[[str], object] = print, inject: frozenset[str] = frozenset()
) -> dict[str, Any]:
    """Train; returns the metrics of the verdict. Raises TrainingDiverged (with .metrics) on divergence."""
    from accelerate import Accelerator
    from accelerate.utils import set_seed
    from diffusers.optimization import get_scheduler

    from aipc_env.distill.model_paths import model_key
    from aipc_env.train.resume import CheckpointState, checkpoint_dirs, find_resume
    from aipc_env.workers.distill.lessons import check_lora_metadata
    from aipc_env.workers.distill.models import device_and_dtype, load_transformer, model_dir, resolve_run
    from aipc_env.workers.train.checkpoint import restore_checkpoint, save_checkpoint

    s = cfg.student
    cfg = resolve_run(cfg, log=log)[0]
    device, dtype = device_and_dtype(cfg)
    out = cfg.out
    accelerator = Accelerator(
        mixed_precision="no",
        cpu=device.type == "cpu",
        gradient_accumulation_steps=s.gradient_accumulation_steps,
        log_with=s.log_with,
        project_dir=str(out / "logs") if s.log_with else None,
    )
    if accelerator.num_processes != s.processes:
        raise InputError(
            f"student.processes is {s.processes}, but {accelerator.num_processes} processes run",
            key="student.processes",
            fix="run the train stage through `aipc-env distill` (it starts `accelerate launch` with student.processes processes)",
        )
    if accelerator.num_processes > 1:
        device = accelerator.device
    main = accelerator.is_main_process
    if not main:
        log = _silent
    path = model_dir(cfg, log=log)
    mkey = model_key(path)
    trajs = load_trajectories(cfg, mkey)
    stride = cfg.student_stride
    n_steps = len(cfg.teacher_grid) // stride
    h, w = cfg.height // 32 * 32, cfg.width // 32 * 32
    shapes_one = [[(1, h // 16, w // 16)]]
    set_seed(cfg.seed)
    model = load_transformer(path, device, dtype, base=s.base)
    params = add_lora(model, cfg)
    if s.gradient_checkpointing:
        model.enable_gradient_checkpointing()
    model.train()
    opt: torch.optim.Optimizer
    if s.optimizer == "adam8bit":
        from bitsandbytes.optim.adam import Adam8bit

        opt = Adam8bit(params, lr=s.learning_rate)
    else:
        opt = torch.optim.AdamW(params, lr=s.learning_rate, weight_decay=0.0)
    sched = get_scheduler("constant", opt)
    model, opt = prepare_student(accelerator, model, opt)
    n_lora = check_lora_before_prepare(accelerator.unwrap_model(model), opt)
    bare = accelerator.unwrap_model(model)
    fingerprint = _fingerprint(cfg, mkey)
    step, rows, checks = 0, [], []
    resumed = None
    resumed = find_resume(out, s.resume, key="student.resume")
    if resumed is not None:
        state = restore_checkpoint(resumed, accelerator.unwrap_model(model), opt, sched, device)
        if state.fingerprint != fingerprint:
            raise InputError(
                f"cannot resume from {resumed}: it was trained with other student settings, model or grid",
                key="student.resume",
                fix="restore those settings, or remove student.resume (or use a new output_dir) to start over",
            )
        step = state.step
        log_path = out / "train_log.jsonl"
        if log_path.is_file():
            rows = [r for r in map(loads_json, log_path.read_text().splitlines()) if r["step"] <= step]
        log(f"train: resumed from {resumed} at step {step}")
    probe_picks = [(i, k) for i in range(min(len(trajs), 8)) for k in range(n_steps)]
    probe = [make_batch(trajs, [p], stride, shapes_one, device, dtype) for p in probe_picks]
    vel_off = velocity_mse(bare, probe, adapter=False)
    objective_start = objective(bare, probe, s.loss_weighting)
    best_vel = velocity_mse(bare, probe, adapter=True)
    checks.append({"step": step, "velocity_mse_on": best_vel, "velocity_mse_off": vel_off})
    log(
        f"train: {len(trajs)} trajectories, {n_steps} student steps each, {n_lora} LoRA tensors "
        f"({sum(p.numel() for p in params)} parameters), base {s.base}, device {device}, loss {s.loss_weighting}; "
        f"velocity MSE adapter off {vel_off:.5g}; {s.batch_size} pairs per step over {accelerator.num_processes} "
        f"process(es) x {s.gradient_accumulation_steps} accumulation step(s)"
    )
    if s.log_with:
        accelerator.init_trackers(
            "distill",
            config={
                "rank": s.rank,
                "alpha": s.alpha,
                "lr": s.learning_rate,
                "batch_size": s.batch_size,
                "loss_weighting": s.loss_weighting,
                "processes": s.processes,
                "gradient_accumulation_steps": s.gradient_accumulation_steps,
            },
        )
    micro = s.batch_size // (accelerator.num_processes * s.gradient_accumulation_steps)
    last_good = checkpoint_dirs(out)[-1] if checkpoint_dirs(out) else None
    t0 = time.perf_counter()

    def diverged(reason: str) -> TrainingDiverged:
        if main:
            _plot(rows, checks, out / "loss.png")
        err = TrainingDiverged(
            f"stopped at step {step}: {reason}; last good checkpoint: {last_good or 'none yet'}",
            fix="lower student.learning_rate (a 3e-4 run diverged in the recorded project; try 1e-4 or 5e-5) "
            "and resume from the last good checkpoint (student.resume)",
        )
        err.metrics = {
            "steps": step,
            "diverged_at": step,
            "reason": reason,
            "last_good_checkpoint": str(last_good) if last_good else None,
            "checks": checks,
        }
        return err

    with _log_file(out / "train_log.jsonl", main) as fh:
        for r in rows:
            fh.write(json.dumps(r) + "\n")
        while step < s.max_train_steps:
            g = torch.Generator().manual_seed(cfg.seed * 1_000_003 + step)
            picks = _picks(g, len(trajs), n_steps, s.batch_size)  # the same on every process
            kind = "offline"
            on_policy = (
                s.on_policy and step >= s.on_policy.start_step and float(torch.rand(1, generator=g)) < s.on_policy.fraction
            )
            total = torch.zeros((), device=device)
            errs = []
            for a in range(s.gradient_accumulation_steps):
                chunk = a * accelerator.num_processes + accelerator.process_index
                mine = picks[chunk * micro : (chunk + 1) * micro]
                if on_policy:
                    kind = "on-policy"
                    starts, ends = _on_policy(bare, trajs, mine, stride, shapes_one, device, dtype)
                    batch = make_batch(trajs, mine, stride, shapes_one, device, dtype, starts=starts, ends=ends)
                else:
                    batch = make_batch(trajs, mine, stride, shapes_one, device, dtype)
                with accelerator.accumulate(model):
                    with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
                        loss, err = step_loss(model, batch, s.loss_weighting)
                    accelerator.backward(loss)
                total += loss.detach().float() / s.gradient_accumulation_steps
                errs.append(err.float())
            errors = _in_pick_order(
                accelerator.gather(torch.cat(errs)), accelerator.num_processes, s.gradient_accumulation_steps, micro
            )
            if s.max_grad_norm:
                accelerator.clip_grad_norm_(params, s.max_grad_norm)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            step += 1
            value = float(accelerator.reduce(total, reduction="mean"))
            row = {"step": step, "loss": value, "kind": kind, "pairs": picks, "velocity_errors": errors}
            spike = _spike(rows, picks, errors, s.divergence.window, s.divergence.spike_factor)
            rows.append(row)
            fh.write(json.dumps(row) + "\n")
            fh.flush()
            if s.log_with:
                accelerator.log({"loss": value}, step=step)
            if not math.isfinite(value):
                raise diverged(f"the loss is {value}")
            if spike:
                raise diverged(spike)
            save_now = step % s.checkpointing_steps == 0 and step < s.max_train_steps
            if step % s.divergence.velocity_every == 0 or save_now or step == s.max_train_steps:
                vel = velocity_mse(bare, probe, adapter=True)
                checks.append({"step": step, "velocity_mse_on": vel, "velocity_mse_off": vel_off})
                if s.log_with:
                    accelerator.log({"velocity_mse_on": vel, "velocity_mse_off": vel_off}, step=step)
                log(f"train: step {step}/{s.max_train_steps} loss {value:.5g} velocity MSE on {vel:.5g} / off {vel_off:.5g}")
                if vel > best_vel * s.divergence.velocity_tolerance:
                    raise diverged(
                        f"the velocity MSE on the training pairs worsened to {vel:.4g} (best "
                        f"{best_vel:.4g}, tolerance x{s.divergence.velocity_tolerance:g})"
                    )
                best_vel = min(best_vel, vel)
            if save_now:
                state = CheckpointState(
                    step=step,
                    smoothed_loss=value,
                    lora_rank=s.rank,
                    lora_alpha=s.alpha,
                    target_modules=s.target_modules,
                    model=mkey,
                    fingerprint=fingerprint,
                )
                if main:
                    last_good = save_checkpoint(out, state, bare, opt, sched, limit=s.checkpoints_total_limit)
                    log(f"train: checkpoint {last_good}")
                accelerator.wait_for_everyone()
    student = bare
    objective_end = objective(student, probe, s.loss_weighting)
    vel_on = velocity_mse(student, probe, adapter=True)
    run = RunFolder(out)
    lora_file = run.lora_file
    if main:
        lora_file = publish(student, run.lora_dir, metadata="no-lora-metadata" not in inject)
        check_lora_metadata(run.lora_dir, rank=s.rank, alpha=s.alpha)
        _plot(rows, checks, out / "loss.png")
    if s.log_with:
        accelerator.end_training()
    accelerator.wait_for_everyone()
    metrics = {
        "steps": step,
        "resumed_from": str(resumed) if resumed else None,
        "trajectories": len(trajs),
        "loss_weighting": s.loss_weighting,
        "base": s.base,
        "device": str(device),
        "objective_start": objective_start,
        "objective_end": objective_end,
        "lowered_loss": objective_end < objective_start,
        "velocity_mse_on": vel_on,
        "velocity_mse_off": vel_off,
        "lora": str(lora_file),
        "lora_rank": s.rank,
        "lora_alpha": s.alpha,
        "seconds": round(time.perf_counter() - t0, 3),
        "on_policy_steps": sum(1 for r in rows if r["kind"] == "on-policy"),
        "checks": checks,
        "loss_plot": str(out / "loss.png"),
        "last_checkpoint": str(last_good) if last_good else None,
        "processes": accelerator.num_processes,
        "gradient_accumulation_steps": s.gradient_accumulation_steps,
        "batch_size": s.batch_size,
    }
    try:
        check_training_outcome(
            objective_start=objective_start,
            objective_end=objective_end,
            velocity_on=vel_on,
            velocity_off=vel_off,
            tolerance=s.divergence.velocity_tolerance,
        )
    except (ObjectiveRose, VelocityDiverged) as err:
        err.metrics = metrics
        raise
    return metrics


def _in_pick_order(gathered: torch.Tensor, world: int, accum: int, micro: int) -> list[float]:
    """Per-pair errors gathered as [rank][accumulation step][micro] back in the order of the step's picks (chunk
    a * world + rank)."""
    values = gathered.view(world, accum, micro).cpu().tolist()
    return [values[rank][a][i] for a in range(accum) for rank in range(world) for i in range(micro)]


def _spike(
    rows: list[dict[str, Any]], picks: list[tuple[int, int]], errors: list[float], window: int, factor: float
) -> str | None:
    """A loss spike, judged per student step k: a pair's velocity error above `factor` x the median of the last
    `window` errors of the same k. (Errors of different k differ by orders of magnitude on a non-uniform grid:
    (0.70 / 0.046)^2 = 230x under endpoint weighting, so one history for all k calls every large-k pair a spike.)"""
    for (_, k), err in zip(picks, errors):
        history = [e for r in rows for (_, kk), e in zip(r["pairs"], r.get("velocity_errors", [])) if kk == k]
        history = history[-window:]
        if len(history) >= window and err > factor * statistics.median(history):
            return (
                f"loss spike at student step k={k}: velocity error {err:.4g} > {factor:g} x the median "
                f"{statistics.median(history):.4g} of its last {len(history)}"
            )
        if not math.isfinite(err):
            return f"the velocity error at student step k={k} is {err}"
    return None


def require_tracker(name: str | None) -> None:
    from accelerate.utils import is_tensorboard_available

    if name == "tensorboard" and not is_tensorboard_available():
        raise InputError(
            "student.log_with is tensorboard, but the tensorboard package is not in the training env",
            key="student.log_with",
            fix="pip install tensorboard in the training env, or remove student.log_with",
        )


def _silent(message: str) -> None:
    pass


class _Discard:
    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


def _log_file(path: Path, main: bool) -> AbstractContextManager[IO[str] | _Discard]:
    """The training log, written by the main process only."""
    import contextlib

    return path.open("w", encoding="utf-8") if main else contextlib.nullcontext(_Discard())
