"""`aipc-env dataset validate PATH`: the runbook's verdict JSON; exit 0 valid, 1 invalid, 2 bad input."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("dataset", help="validate a training dataset (local dir, parquet dir, CSV)")
    inner = p.add_subparsers(dest="dataset_command", metavar="ACTION", required=True)
    v = inner.add_parser("validate", help="print the verdict JSON; exit 0 valid, 1 invalid")
    v.add_argument("path", type=Path)
    v.add_argument("--target-size", type=int, nargs=2, metavar=("H", "W"), default=[384, 672],
                   help="training size; smaller images are reported (default 384 672)")
    v.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from aipc_env.dataset import validate_dataset

    verdict = validate_dataset(args.path, tuple(args.target_size))
    print(json.dumps(verdict.as_dict(), indent=2, ensure_ascii=False))
    return 0 if verdict.valid else 1
