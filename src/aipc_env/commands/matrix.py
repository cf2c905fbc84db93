"""`aipc-env matrix`: show the compatibility matrix (validates it on the way)."""

from __future__ import annotations

import argparse

from aipc_env.commands.options import JSON, MATRIX, console_for, print_json

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("matrix", parents=[JSON, MATRIX], help="show the torch+xpu / oneAPI compatibility matrix",
                       description="Validate and show environments/matrix.yaml: one row per supported pair.")
    p.add_argument("-v", "--verbose", action="store_true", help="also show each row's source and notes")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from rich.table import Table

    from aipc_env.matrix import load_matrix

    matrix = load_matrix(args.matrix)
    if args.json:
        print_json(matrix)
        return 0
    console = console_for()
    table = Table("pair", "torch", "oneAPI", "Triton", "Py", "Win", "bnb≥", "sure", box=None, pad_edge=False,
                  header_style="bold")
    for p in matrix.pairs:
        table.add_row(p.id, ", ".join(p.torch), p.oneapi, f"{p.triton.name.replace('pytorch-', '')} "
                      f"{p.triton.version}", p.python.replace(">=", "≥").replace(",<", " <"),
                      {"full": "yes", "eager-only": "eager", "none": "no"}[p.windows], p.bitsandbytes_min,
                      "yes" if p.certainty == "confirmed" else "prov.")
    console.print(table)
    if args.verbose:
        for p in matrix.pairs:
            console.print(f"{p.id}: {p.source}" + (f"\n  note: {p.notes}" if p.notes else ""))
    else:
        console.print("prov. = provisional row (one weak source); -v shows each row's source")
    return 0
