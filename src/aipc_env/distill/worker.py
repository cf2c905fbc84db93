"""The distill stage worker, run inside the training env by the generated launcher:
`python -m aipc_env.distill.worker --config C --stages g0,trajectories,train,g2,g3,report [--inject FAULT]`.
Each stage writes its verdict and prints its summary; the run stops at the first failed stage. Exit code: 0 all
passed, 1 a stage failed, 2 bad input, 3 an internal error."""

from __future__ import annotations

import argparse
import os
import sys
import time

from aipc_env.errors import AipcError, ExitCode

__all__ = ["main", "run_stage"]


def run_stage(cfg, stage: str, inject: frozenset[str], log=print):
    from aipc_env.distill.lessons import LessonError
    from aipc_env.distill.verdict import ErrorInfo, Verdict
    from aipc_env.formats import timestamp

    t0 = time.perf_counter()
    checks, metrics, mode, error, device, dtype = [], {}, None, None, None, None
    try:
        from aipc_env.distill.models import device_and_dtype

        dev, dt = device_and_dtype(cfg)
        device, dtype = str(dev), str(dt).replace("torch.", "")
        if stage == "g0":
            from aipc_env.distill.gates import gate_g0

            checks, metrics = gate_g0(cfg, log=log, inject=inject)
        elif stage == "g2":
            from aipc_env.distill.gates import gate_g2

            checks, metrics = gate_g2(cfg, log=log, inject=inject)
        elif stage == "g3":
            from aipc_env.distill.gates import gate_g3

            checks, metrics, mode = gate_g3(cfg, log=log, inject=inject)
        elif stage == "trajectories":
            from aipc_env.distill.trajectories import run_trajectories

            metrics = run_trajectories(cfg, log=log, inject=inject)
        elif stage == "train":
            from aipc_env.distill.student import run_student

            metrics = run_student(cfg, log=log, inject=inject)
    except LessonError as exc:
        error = ErrorInfo(name=exc.name, message=exc.message, fix=exc.fix)
        metrics = getattr(exc, "metrics", metrics)
    except AipcError as exc:
        error = ErrorInfo(name="input", message=exc.render().removeprefix("error: ").split("\n")[0], fix=exc.fix)
    status = "pass" if error is None and all(c.ok for c in checks) else "fail"
    notes = []
    if stage == "g3" and mode == "plumbing":
        notes.append("tiny random weights: G3 is a plumbing check here (artifacts, finite outputs); student vs naive "
                     "is reported, not gated. The quality gate needs the real model, a GPU or XPU, and LPIPS weights")
    if stage == "g3" and metrics.get("metric") == "psnr":
        notes.append("distance measured as PSNR/MSE: no LPIPS weights configured (eval.lpips_weights)")
    return Verdict(stage=stage, status=status, mode=mode, model=cfg.model, device=device, dtype=dtype,
                   when=timestamp(), seconds=round(time.perf_counter() - t0, 3), checks=checks, metrics=metrics,
                   notes=notes, error=error, injected=sorted(inject))


def _quiet() -> None:
    import logging
    import warnings

    from aipc_env.train.compat import quiet_bitsandbytes_notices

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
    parser = argparse.ArgumentParser(prog="aipc_env.distill.worker")
    parser.add_argument("--config", required=True)
    parser.add_argument("--stages", required=True, help="comma-separated: g0,trajectories,train,g2,g3,report")
    parser.add_argument("--inject", action="append", default=[])
    args = parser.parse_args(argv)
    try:
        from aipc_env.distill.config import load_distill_config

        cfg = load_distill_config(args.config)
        stages = [s for s in args.stages.split(",") if s]
        _quiet()
        from aipc_env.distill.verdict import summary, write_verdict

        inject = frozenset(args.inject)
        for stage in stages:
            if stage == "report":
                from aipc_env.distill.report import build_report

                text, path = build_report(cfg)
                print(text, flush=True)
                print(f"distill: report {path}", flush=True)
                continue
            verdict = run_stage(cfg, stage, inject, log=lambda m: print(m, flush=True))
            path = write_verdict(cfg.out, verdict)
            print(summary(verdict), flush=True)
            print(f"distill: verdict {path}", flush=True)
            if not verdict.passed:
                return ExitCode.PROBLEMS if verdict.error is None or verdict.error.name != "input" \
                    else ExitCode.USAGE
        return ExitCode.OK
    except AipcError as exc:
        print(exc.render(), file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return ExitCode.INTERRUPTED
    except Exception as exc:  # noqa: BLE001 - one line for the user, the traceback into the run's log
        import traceback

        log = os.environ.get("AIPC_LOG_FILE")
        if log:
            with open(log, "a", encoding="utf-8") as fh:
                fh.write(traceback.format_exc())
        else:
            traceback.print_exc()
        print(f"aipc-env: internal error in distill: {type(exc).__name__}: {exc}"
              + (f" (traceback in {log})" if log else ""), file=sys.stderr)
        return ExitCode.INTERNAL


if __name__ == "__main__":
    sys.exit(main())
