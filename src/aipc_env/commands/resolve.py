"""`aipc-env resolve --pip-list FILE`: which pair a pasted `pip list` / `pip freeze` shows."""

from __future__ import annotations

import argparse
from pathlib import Path

from aipc_env.commands.options import JSON, MATRIX, PLATFORM, platform_of, print_json
from aipc_env.errors import ExitCode

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("resolve", parents=[JSON, PLATFORM, MATRIX],
                       help="resolve which torch+xpu / oneAPI pair a package list shows",
                       description="Read `pip list` or `pip freeze` output and print the pair as JSON (the output "
                       "is always JSON; --json is accepted for symmetry). Exit 0: one pair, consistent; 1: mixed, "
                       "unknown, ambiguous or not XPU; 2: bad input.")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--pip-list", type=Path, metavar="FILE", help="saved output of `pip list` or `pip freeze` "
                     "(UTF-8, UTF-16 or cp1252)")
    src.add_argument("--toolkit", metavar="RELEASE", help="list the pairs matching a oneAPI release (e.g. 2025.3)")
    p.add_argument("--torch-version-xpu", default=None, metavar="DATE",
                   help="torch.version.xpu from that env, if known (e.g. 20250101)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from aipc_env.matrix import load_matrix
    from aipc_env.matrix.piplist import read_pip_list
    from aipc_env.matrix.resolve import ToolkitReport, resolve_report

    matrix = load_matrix(args.matrix)
    if args.toolkit:
        pairs = matrix.for_toolkit(args.toolkit)
        print_json(ToolkitReport(toolkit=args.toolkit, pairs=[p.id for p in pairs], torch={p.id: p.torch for p in pairs}))
        return ExitCode.OK if pairs else ExitCode.PROBLEMS
    platform = platform_of(args)
    report = resolve_report(read_pip_list(args.pip_list), matrix, platform, torch_version_xpu=args.torch_version_xpu)
    print_json(report)
    return ExitCode.OK if report.consistent else ExitCode.PROBLEMS
