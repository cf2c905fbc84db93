"""The distill stage worker, run inside the training env by the generated launcher:
`python -m aipc_env.workers.distill.worker --config C --stages g0,g2,trajectories,train,g3,report [--inject FAULT]
[--run-id ID]` (the train stage under `accelerate launch`, one or more processes). Each stage writes its verdict
(the main process only) and prints its summary; the run stops at the first failed stage, and a failed stage takes
the verdicts of the stages after it out (they were not reached: an earlier run's must not look current). Exit
code: 0 no stage failed, 1 a stage failed, 2 bad input, 3 an internal error."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from aipc_env.errors import AipcError, ExitCode, InputError
from aipc_env.launch.hops import DistillStages, run_worker

if TYPE_CHECKING:
    from aipc_env.core.heartbeat import Heartbeat
    from aipc_env.distill.config import DistillConfig
    from aipc_env.distill.verdict import Verdict

__all__ = ["main", "run_stage"]


def is_main_process() -> bool:
    """Rank 0 under `accelerate launch` (RANK is set by torch's launcher), or a plain single process."""
    return os.environ.get("RANK", "0") == "0"


def run_stage(
    cfg: DistillConfig,
    stage: str,
    inject: frozenset[str],
    log: Callable[[str], object] = print,
    *,
    run_id: str | None = None,
) -> Verdict:
    """Run one stage; its verdict records the grid and the hashes of its inputs."""
    from aipc_env.core.formats import timestamp
    from aipc_env.core.runfolder import RunFolder
    from aipc_env.distill.inputs import file_sha256, stage_inputs
    from aipc_env.distill.lesson_errors import LessonError
    from aipc_env.distill.verdict import STAGES, Check, ErrorInfo, Verdict, is_stage

    if not is_stage(stage):
        raise InputError(f"unknown distill stage {stage!r}", fix=f"use one of {', '.join(STAGES)} or report")
    t0 = time.perf_counter()
    checks: list[Check] = []
    metrics: dict[str, Any] = {}
    mode, error, device, dtype, dev, peak = None, None, None, None, None, None
    from aipc_env.distill.verdict import STAGE_TITLES
    from aipc_env.workers.distill.models import resolve_run

    log(f"distill: {STAGE_TITLES[stage]} ...")
    cfg, grid, model_key = resolve_run(cfg, log=log)
    inputs = stage_inputs(cfg, stage, model_key=model_key, grid=grid)
    try:
        from aipc_env.workers.distill.memory import reset_peak
        from aipc_env.workers.distill.models import device_and_dtype

        dev, dt = device_and_dtype(cfg)
        reset_peak(dev)
        device, dtype = str(dev), str(dt).replace("torch.", "")
        if stage == "g0":
            from aipc_env.workers.distill.gates import gate_g0

            checks, metrics = gate_g0(cfg, log=log, inject=inject)
        elif stage == "g2":
            from aipc_env.workers.distill.gates import gate_g2

            checks, metrics = gate_g2(cfg, log=log, inject=inject)
        elif stage == "g3":
            from aipc_env.workers.distill.gates import gate_g3

            checks, metrics, mode = gate_g3(cfg, log=log, inject=inject)
        elif stage == "trajectories":
            from aipc_env.workers.distill.trajectories import run_trajectories

            metrics = run_trajectories(cfg, log=log, inject=inject)
        elif stage == "train":
            from aipc_env.workers.distill.student import run_student

            metrics = run_student(cfg, log=log, inject=inject)
    except LessonError as exc:
        error = ErrorInfo(name=exc.name, message=exc.message, fix=exc.fix)
        metrics = getattr(exc, "metrics", metrics)
    except AipcError as exc:
        error = ErrorInfo(name="input", message=exc.render().removeprefix("error: ").split("\n")[0], fix=exc.fix)
    if dev is not None:
        from aipc_env.workers.distill.memory import peak_memory

        peak = peak_memory(dev)
    failed = error is not None or not all(c.ok for c in checks)
    status: Literal["pass", "fail", "ok"] = "fail" if failed else "ok" if mode == "plumbing" else "pass"
    notes = list(metrics.pop("notes", []))
    if stage == "g3" and mode == "plumbing":
        notes.append(
            "plumbing mode (" + metrics.get("mode_reason", "") + "): artifacts, a LoRA that changes the "
            "output, finite images; student vs naive is reported, not judged. Judging the student needs "
            "the real model, a GPU or XPU, and LPIPS weights (or, on a CPU, the trained tiny teacher: "
            "`aipc-env distill init --profile tiny-trained`)"
        )
    if stage == "g3" and metrics.get("metric") == "psnr":
        notes.append("distance measured as PSNR/MSE: no LPIPS weights configured (eval.lpips_weights)")
    if stage == "g3" and metrics.get("metric") == "latent_mse":
        notes.append(
            "judged on the latent MSE to teacher@8: the trained tiny teacher's data lives in latent space "
            "and its VAE is random (the pixel MSE is recorded beside it)"
        )
    if stage == "train" and inputs:
        inputs["lora"] = file_sha256(RunFolder(cfg.out).lora_file) or "none"
    return Verdict(
        stage=stage,
        status=status,
        mode=mode,
        model=cfg.model,
        device=device,
        dtype=dtype,
        when=timestamp(),
        seconds=round(time.perf_counter() - t0, 3),
        checks=checks,
        metrics=metrics,
        notes=notes,
        error=error,
        injected=sorted(inject),
        run_id=run_id,
        inputs=inputs,
        grid=grid.model_dump(),
        peak_memory=peak,
    )


def _quiet() -> None:
    import logging
    import warnings

    from aipc_env.workers.train.compat import quiet_bitsandbytes_notices

    quiet_bitsandbytes_notices()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    warnings.filterwarnings("ignore", category=FutureWarning)
    import diffusers
    import transformers

    diffusers.utils.logging.disable_progress_bar()
    diffusers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    logging.getLogger("accelerate").setLevel(logging.ERROR)


def main(argv: list[str] | None = None) -> int:
    args = DistillStages.parse(argv)
    return run_worker("distill", lambda: _stages(args))


def _stages(args: DistillStages) -> int:
    from aipc_env.core.heartbeat import Heartbeat

    say = (lambda m: print(m, flush=True)) if is_main_process() else (lambda m: None)
    with Heartbeat(say, "distill: still loading torch and diffusers") as beat:  # a stage is long single calls
        return _run_stages(args, beat)


def _run_stages(args: DistillStages, beat: Heartbeat) -> int:
    from aipc_env.distill.config import load_distill_config

    cfg = load_distill_config(args.config)
    stages = [s for s in args.stages.split(",") if s]
    if is_main_process():
        print(f"distill: {', '.join(stages)}: loading torch and diffusers ...", flush=True)
    _quiet()
    from aipc_env.distill.verdict import summary, take_out_after, write_verdict

    main_process = is_main_process()
    inject = frozenset(args.inject)
    for stage in stages:
        if stage == "report":
            from aipc_env.distill.report import build_report

            text, path = build_report(cfg)
            print(text, flush=True)
            print(f"distill: report {path}", flush=True)
            continue
        beat.waiting(f"distill: {stage} running")
        verdict = run_stage(cfg, stage, inject, log=beat.say, run_id=args.run_id)
        if main_process:
            path = write_verdict(cfg.out, verdict)
            print(summary(verdict), flush=True)
            print(f"distill: verdict {path}", flush=True)
        if not verdict.passed:
            if main_process:
                take_out_after(cfg.out, stage)
            return ExitCode.PROBLEMS if verdict.error is None or verdict.error.name != "input" else ExitCode.USAGE
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())
