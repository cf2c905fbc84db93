"""`aipc-env monitor`: sample system and device memory into a CSV, and plot it."""

from __future__ import annotations

import argparse

from aipc_env.commands.options import JSON, Subparsers
from aipc_env.commands.result import Result

__all__ = ["add_parser", "run"]


def add_parser(sub: Subparsers) -> None:
    from aipc_env.workers.monitor import add_arguments

    p = sub.add_parser(
        "monitor",
        parents=[JSON],
        help="sample system and device memory into a CSV (+ PNG plot)",
        description="Sample system (and XPU/CUDA) memory until stopped (Ctrl-C), --duration or --pid "
        "exits; write a CSV and a PNG plot next to it.",
    )
    add_arguments(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> Result:
    from aipc_env.train.results import MonitorReport
    from aipc_env.workers.monitor import run_monitor

    n = run_monitor(args.out, interval=args.interval, duration=args.duration, pid=args.pid, device=args.device)
    png = args.out.with_suffix(".png")
    report = MonitorReport(samples=n, csv=str(args.out), plot=str(png) if png.is_file() else None)
    return Result(report, lambda: print(f"{n} samples in {args.out}; plot {report.plot}"))
