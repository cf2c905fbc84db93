"""`aipc-env patch-requirements PATH`: make a qwen-image-finetune requirements.txt installable on XPU."""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("patch-requirements", help="comment out CUDA-only packages, pin bitsandbytes, report "
                       "pins that contradict the lock (idempotent, with a backup)")
    p.add_argument("path", type=Path)
    p.add_argument("--pair", metavar="ID", help="pair whose minimum bitsandbytes and lock apply (default: recorded)")
    p.add_argument("--dry-run", action="store_true", help="print the unified diff; change nothing")
    p.add_argument("--lock-root", type=Path)
    p.add_argument("--matrix", type=Path, metavar="FILE")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from aipc_env.lock.lockfile import pylock_path, read_pylock
    from aipc_env.lock.requirements import apply_edits
    from aipc_env.matrix import load_matrix
    from aipc_env.paths import project_root
    from aipc_env.platforms import current_platform
    from aipc_env.state import read_env_record

    matrix = load_matrix(args.matrix)
    record = read_env_record()
    pair = matrix.get(args.pair) if args.pair else (matrix.by_id.get(record.pair) if record and record.pair else None)
    pair = pair or matrix.newest(current_platform())
    lock = pylock_path((args.lock_root or project_root() / "lockfiles") / pair.id, current_platform())
    locked = {p.key: p.version or "" for p in read_pylock(lock).packages} if lock.is_file() else None
    result, diff = apply_edits(args.path, bnb_min=pair.bitsandbytes_min, locked=locked, dry_run=args.dry_run)
    if args.dry_run and diff:
        print(diff, end="")
    for e in result.edits:
        print(f"{'would edit' if args.dry_run else 'edited'} {e}")
    if not result.changed:
        print(f"{args.path}: nothing to change")
    elif not args.dry_run:
        print(f"{args.path}: written; original kept as {args.path.name}.aipc-backup")
    if locked is None:
        print(f"note: no lock for {pair.id} here ({lock}); pins were not compared with a lock")
    for r in result.report:
        print(f"warning: {r}")
    return 0
