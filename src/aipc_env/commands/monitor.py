"""`aipc-env monitor`: sample system and device memory into a CSV, and plot it (the sampling runs in the training
env: workers/monitor.py, which reads device memory through torch)."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from aipc_env.commands.options import JSON, Subparsers
from aipc_env.commands.result import Result, progress

__all__ = ["add_parser", "run"]


def _seconds(text: str) -> float:
    """A finite, positive number of seconds (at least 0.05: a smaller interval would busy-loop)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value < 0.05:
        raise argparse.ArgumentTypeError(f"{text!r}: give a finite number of seconds, at least 0.05")
    return value


def _pid(text: str) -> int:
    from aipc_env.core.procs import pid_alive

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a process id") from None
    if value <= 0 or not pid_alive(value):
        raise argparse.ArgumentTypeError(f"no running process has id {value}")
    return value


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "monitor",
        parents=[JSON],
        help="sample system and device memory into a CSV (+ PNG plot)",
        description="Sample system (and XPU/CUDA) memory until stopped (Ctrl-C), --duration or --pid "
        "exits; write a CSV and a PNG plot next to it.",
    )
    p.add_argument("--out", type=Path, required=True, help="CSV to write (a PNG plot goes next to it)")
    p.add_argument("--interval", type=_seconds, default=1.0, help="seconds between samples (default 1, min 0.05)")
    p.add_argument("--duration", type=_seconds, help="stop after this many seconds (default: until stopped)")
    p.add_argument("--pid", type=_pid, help="stop when this (running) process exits")
    p.add_argument(
        "--device",
        choices=["auto", "xpu", "cuda", "none"],
        default="auto",
        help="which device memory to read (default: XPU, then CUDA; none: system memory only)",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> Result:
    from aipc_env.launch.hops import MonitorRun
    from aipc_env.launch.worker_call import call_worker
    from aipc_env.train.results import MonitorReport

    def hop(result: Path) -> MonitorRun:
        return MonitorRun(
            out=str(args.out), interval=args.interval, duration=args.duration, pid=args.pid, device=args.device, result=result
        )

    report = call_worker(hop, MonitorReport, what="monitor", say=progress(args).say)
    return Result(report, lambda: print(f"{report.samples} samples in {args.out}; plot {report.plot}"))
