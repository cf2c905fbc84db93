"""`aipc-env matrix`: show the compatibility matrix (validates it on the way)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("matrix", help="show the torch+xpu / oneAPI compatibility matrix")
    p.add_argument("--json", action="store_true")
    p.add_argument("--matrix", type=Path, metavar="FILE")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from rich.table import Table

    from aipc_env.matrix import load_matrix
    from aipc_env.render import console_for

    matrix = load_matrix(args.matrix)
    if args.json:
        print(json.dumps(matrix.model_dump(mode="json"), indent=2))
        return 0
    table = Table("pair", "torch", "oneAPI", "Triton", "Python", "Windows", "bnb ≥", "certainty")
    for p in matrix.pairs:
        table.add_row(p.id, ", ".join(p.torch), p.oneapi, f"{p.triton.name} {p.triton.version}", p.python,
                      p.windows, p.bitsandbytes_min, p.certainty)
    console_for().print(table)
    return 0
