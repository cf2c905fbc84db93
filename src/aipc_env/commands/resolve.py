"""`aipc-env resolve --pip-list FILE`: which pair a pasted `pip list` / `pip freeze` shows."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("resolve", help="resolve which torch+xpu / oneAPI pair a package list shows",
                       description="Read `pip list` or `pip freeze` output and print the pair as JSON. "
                       "Exit 0: one pair, consistent; 1: mixed, unknown, ambiguous or not XPU; 2: bad input.")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--pip-list", type=Path, metavar="FILE", help="saved output of `pip list` or `pip freeze`")
    src.add_argument("--toolkit", metavar="RELEASE", help="list the pairs matching a oneAPI release (e.g. 2025.3)")
    p.add_argument("--platform", choices=["win-64", "linux-64"], default=None,
                   help="platform the list comes from (default: this machine's)")
    p.add_argument("--torch-version-xpu", default=None, help="torch.version.xpu from that env, if known")
    p.add_argument("--matrix", type=Path, metavar="FILE")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from aipc_env.matrix import load_matrix
    from aipc_env.piplist import read_pip_list
    from aipc_env.platforms import current_platform
    from aipc_env.resolve import resolve_pair, triton_packages

    matrix = load_matrix(args.matrix)
    if args.toolkit:
        pairs = matrix.for_toolkit(args.toolkit)
        print(json.dumps({"toolkit": args.toolkit, "pairs": [p.id for p in pairs],
                          "torch": {p.id: p.torch for p in pairs}}, indent=2))
        return 0 if pairs else 1
    platform = args.platform or current_platform()
    installed = read_pip_list(args.pip_list)
    res = resolve_pair(installed, matrix, platform, torch_version_xpu=args.torch_version_xpu)
    out = {"platform": platform, **res.model_dump(), "summary": res.summary,
           "triton_packages": triton_packages(installed)}
    if res.pair:
        pair = matrix.by_id[res.pair]
        out["oneapi"] = pair.oneapi
        out["certainty"] = pair.certainty
    print(json.dumps(out, indent=2))
    single_triton = len(out["triton_packages"]) <= 1
    return 0 if res.status in ("exact", "partial") and res.torch_is_xpu and single_triton else 1
