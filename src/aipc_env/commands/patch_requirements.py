"""`aipc-env patch-requirements PATH`: make a qwen-image-finetune requirements.txt installable on XPU."""

from __future__ import annotations

import argparse
from pathlib import Path

from aipc_env.commands.options import ENV, JSON, LOCK_ROOT, MATRIX, PAIR, Subparsers, lock_root
from aipc_env.commands.result import Result

__all__ = ["add_parser", "run"]


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "patch-requirements",
        parents=[JSON, PAIR, ENV, LOCK_ROOT, MATRIX],
        help="make a qwen-image-finetune requirements.txt installable on XPU (idempotent, backup)",
        description="Comment out CUDA-only packages, raise bitsandbytes to the pair's minimum, relax pins "
        "that contradict the pair's torch, pin torch/torchvision to the pair's XPU builds with the XPU "
        "index line, and report conflicts with aipc-env's pip layer (and the lock, if any). The file "
        "keeps its mode, owner, symlink and each line's ending; the original is kept once as "
        "<file>.aipc-backup; a read-only file is refused; a second run changes nothing.",
    )
    p.add_argument("path", type=Path, help="the requirements.txt of a qwen-image-finetune clone")
    p.add_argument("--dry-run", action="store_true", help="print the unified diff; change nothing")
    p.add_argument(
        "--xpu-index-url",
        metavar="URL",
        help="the PyTorch XPU index (or a mirror) the torch pins name (default: https://download.pytorch.org/whl/xpu)",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> Result:
    from aipc_env.core.platforms import current_platform
    from aipc_env.lock.lockfile import pylock_path, read_pylock
    from aipc_env.lock.specs import XPU_INDEX_URL, common_requirements
    from aipc_env.matrix import load_matrix
    from aipc_env.trainenv.requirements import RequirementsReport, apply_edits
    from aipc_env.trainenv.select import decide
    from aipc_env.trainenv.situation import situation_for, the_env

    matrix = load_matrix(args.matrix)
    platform = current_platform()
    choice = decide(situation_for("build", matrix, platform, pair_flag=args.pair, env=the_env(args.env)), "build").pair
    pair = choice.pair
    assert pair is not None
    lock = pylock_path(lock_root(args) / pair.id, platform)
    locked = {p.key: p.version or "" for p in read_pylock(lock).packages} if lock.is_file() else None
    result, diff, backup = apply_edits(
        args.path,
        pair=pair,
        xpu_index=args.xpu_index_url or XPU_INDEX_URL,
        pip_layer=common_requirements(),
        locked=locked,
        dry_run=args.dry_run,
    )
    notes = [] if locked is not None else [f"no lock for {pair.id} here ({lock}); pins were not compared with a lock"]

    def text() -> None:
        if args.dry_run and diff:
            print(diff, end="")
        for e in result.edits:
            print(f"{'would edit' if args.dry_run else 'edited'} {e}")
        if not result.changed:
            print(f"{args.path}: nothing to change")
        elif not args.dry_run:
            print(f"{args.path}: written; original kept as {backup}")
        for note in notes:
            print(f"note: {note}")
        for r in result.report:
            print(f"warning: {r}")

    return Result(
        RequirementsReport(
            path=str(args.path),
            pair=pair.id,
            pair_why=choice.why,
            dry_run=args.dry_run,
            changed=result.changed,
            edits=result.edits,
            warnings=result.report,
            notes=notes,
            backup=str(backup) if backup else None,
            diff=diff if args.dry_run else None,
        ),
        text,
    )
