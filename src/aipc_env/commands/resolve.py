"""`aipc-env resolve --pip-list FILE`: which pair a pasted `pip list` / `pip freeze` shows."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from aipc_env.commands.options import JSON, MATRIX, PLATFORM, Subparsers, platform_of
from aipc_env.commands.result import Result, progress
from aipc_env.errors import ExitCode

if TYPE_CHECKING:
    from aipc_env.matrix.resolve import ResolveReport


__all__ = ["add_parser", "run"]


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "resolve",
        parents=[JSON, PLATFORM, MATRIX],
        help="resolve which torch+xpu / oneAPI pair a package list shows",
        description="Read `pip list` or `pip freeze` output and say which pair it shows, what does not "
        "fit and how to fix it. The platform is --platform, else what the list shows (wheel tags, "
        "paths, one platform's packages or pins), else this machine's (said). --json for machines. "
        "Exit 0: one pair, consistent; 1: mixed, unknown, ambiguous or not XPU; 2: bad input.",
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument(
        "--pip-list", type=Path, metavar="FILE", help="saved output of `pip list` or `pip freeze` (UTF-8, UTF-16 or cp1252)"
    )
    src.add_argument("--toolkit", metavar="RELEASE", help="list the pairs matching a oneAPI release (e.g. 2025.3)")
    p.add_argument(
        "--torch-version-xpu", default=None, metavar="DATE", help="torch.version.xpu from that env, if known (e.g. 20250101)"
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> Result:
    from aipc_env.matrix import load_matrix
    from aipc_env.matrix.piplist import platform_of_list, read_list_text, read_pip_list
    from aipc_env.matrix.resolve import ToolkitReport, resolve_report

    matrix = load_matrix(args.matrix)
    if args.toolkit:
        pairs = matrix.for_toolkit(args.toolkit)
        toolkit = ToolkitReport(toolkit=args.toolkit, pairs=[p.id for p in pairs], torch={p.id: p.torch for p in pairs})
        return Result(toolkit, code=ExitCode.OK if pairs else ExitCode.PROBLEMS, always_json=True)
    text, encoding = read_list_text(args.pip_list)
    if encoding != "utf-8":
        progress(args).note(f"aipc-env: read {args.pip_list} as {encoding}")
    installed = read_pip_list(args.pip_list, text)
    if args.platform:
        platform, why = args.platform, "given with --platform"
    else:
        found, why = platform_of_list(text, installed, matrix)
        platform = found or platform_of(args)
        if found is None:
            why = f"assumed: this machine's ({why}; pass --platform win-64 or linux-64)"
    report = resolve_report(installed, matrix, platform, torch_version_xpu=args.torch_version_xpu, platform_source=why)
    return Result(report, lambda: _render(report), ExitCode.OK if report.consistent else ExitCode.PROBLEMS)


def _render(report: ResolveReport) -> None:
    res = report.resolution
    mark = "✓" if report.consistent else "✗"
    print(f"{mark} {report.summary}")
    for m in res.mismatches:
        owners = f"; {m.installed} belongs to {', '.join(m.belongs_to)}" if m.belongs_to else ""
        print(f"    {m.name} {m.installed}: {res.pair} pins {' or '.join(m.expected)}{owners}")
    if len(report.triton_packages) > 1:
        print(f"    Triton: {', '.join(f'{k} {v}' for k, v in report.triton_packages.items())} (exactly one may be installed)")
    if report.oneapi:
        print(f"    oneAPI {report.oneapi} (the toolkit to activate for {res.pair}; row {report.certainty})")
    print(f"    platform: {report.platform} ({report.platform_source})")
    if report.fix:
        print(f"    fix: {report.fix}")
