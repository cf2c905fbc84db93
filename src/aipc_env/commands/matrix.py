"""`aipc-env matrix`: show the compatibility matrix (validates it on the way)."""

from __future__ import annotations

import argparse

from aipc_env.commands.options import JSON, MATRIX, console_for, print_json
from aipc_env.errors import ExitCode

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("matrix", parents=[JSON, MATRIX], help="show the torch+xpu / oneAPI compatibility matrix",
                       description="Validate and show environments/matrix.yaml: one row per supported pair.")
    p.add_argument("-v", "--verbose", action="store_true", help="also show each row's source and notes")
    p.set_defaults(run=run)


def _python_range(spec: str) -> str:
    """'>=3.10,<3.14' -> '3.10-3.13' (short enough for 80 columns)."""
    import re

    low = re.search(r">=\s*3\.(\d+)", spec)
    high = re.search(r"<\s*3\.(\d+)", spec)
    if low and high:
        return f"3.{low.group(1)}-3.{int(high.group(1)) - 1}"
    if low:
        return f"3.{low.group(1)}+"
    return spec


def run(args: argparse.Namespace) -> int:
    from rich.table import Table

    from aipc_env.matrix import load_matrix

    matrix = load_matrix(args.matrix)
    if args.json:
        print_json(matrix)
        return ExitCode.OK
    console = console_for()
    table = Table("pair", "torch", "oneAPI", "Triton package", "ver.", "Python", "Win", "bnb≥", box=None,
                  pad_edge=False, padding=(0, 1, 0, 0), header_style="bold")
    for p in matrix.pairs:
        table.add_row(p.id + ("*" if p.certainty != "confirmed" else ""), ",".join(p.torch), p.oneapi,
                      p.triton.name, p.triton.version, _python_range(p.python),
                      {"full": "yes", "eager-only": "eager", "none": "no"}[p.windows], p.bitsandbytes_min)
    console.print(table)
    if args.verbose:
        for p in matrix.pairs:
            console.print(f"{p.id}: {p.source}" + (f"\n  note: {p.notes}" if p.notes else ""))
    else:
        console.print("* provisional row (one weak source); -v: sources, --json: everything")
    return ExitCode.OK
