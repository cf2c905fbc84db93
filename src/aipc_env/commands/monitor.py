"""`aipc-env monitor`: sample system and device memory into a CSV, and plot it."""

from __future__ import annotations

import argparse

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    from aipc_env.monitor import add_arguments

    p = sub.add_parser("monitor", help="sample system and device memory into a CSV (+ PNG plot)")
    add_arguments(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from aipc_env.monitor import run_monitor

    n = run_monitor(args.out, interval=args.interval, duration=args.duration, pid=args.pid, device=args.device)
    print(f"{n} samples in {args.out}; plot {args.out.with_suffix('.png')}")
    return 0
