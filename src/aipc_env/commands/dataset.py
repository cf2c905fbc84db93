"""`aipc-env dataset validate PATH`: the runbook's verdict JSON; exit 0 valid, 1 invalid, 2 bad input."""

from __future__ import annotations

import argparse
from pathlib import Path

from aipc_env.commands.options import JSON, Subparsers
from aipc_env.commands.result import Result
from aipc_env.errors import ExitCode

__all__ = ["add_parser", "run"]


def _side(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of pixels") from None
    if value < 16 or value % 16:
        raise argparse.ArgumentTypeError(f"{value}: each side must be a multiple of 16, at least 16")
    return value


def _heldout(text: str) -> int:
    from aipc_env.dataset.split import HELDOUT_MAX, HELDOUT_MIN

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of samples") from None
    if not HELDOUT_MIN <= value <= HELDOUT_MAX:
        raise argparse.ArgumentTypeError(f"{value}: hold out {HELDOUT_MIN} to {HELDOUT_MAX} samples")
    return value


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "dataset",
        help="validate a training dataset (local dir, parquet dir, CSV)",
        description="Dataset tools. `validate` prints the runbook's verdict JSON.",
    )
    inner = p.add_subparsers(dest="dataset_command", metavar="ACTION", required=True)
    v = inner.add_parser(
        "validate",
        parents=[JSON],
        help="print the verdict JSON; exit 0 valid, 1 invalid",
        description="Check a dataset against the runbook's rules (§3). The verdict JSON is printed "
        "in every case (--json is accepted for symmetry). Exit 0 valid, 1 invalid, 2 bad input.",
    )
    v.add_argument("path", type=Path, help="a dataset folder, a parquet folder (data/train-*.parquet) or a CSV")
    v.add_argument(
        "--target-size",
        type=_side,
        nargs=2,
        metavar=("H", "W"),
        default=[384, 672],
        help="training size, height then width; smaller images are reported "
        "(default 384 672: 384 high, 672 wide; multiples of 16)",
    )
    v.add_argument(
        "--engine",
        choices=["builtin", "qflux"],
        default="builtin",
        help="qflux: also warn about what qwen-image-finetune's own loader mishandles (upper-case "
        "extensions, BOM prompts, mixed control extensions, CSV-relative paths, local parquet)",
    )
    v.add_argument(
        "--heldout",
        type=_heldout,
        metavar="N",
        help="also check the held-out split of N samples (data.heldout_count; at least 3): which samples, each "
        "complete, and enough left to train on",
    )
    v.set_defaults(run=run)


def run(args: argparse.Namespace) -> Result:
    from aipc_env.dataset.scan import scan_dataset
    from aipc_env.dataset.validate import validate_scan

    scan = scan_dataset(args.path)
    verdict = validate_scan(scan, tuple(args.target_size), args.heldout)
    if args.engine == "qflux":
        from aipc_env.dataset.qflux import qflux_warnings

        verdict = verdict.model_copy(update={"warnings": verdict.warnings + qflux_warnings(scan)})
    return Result(verdict, code=ExitCode.OK if verdict.valid else ExitCode.PROBLEMS, always_json=True)
