"""`aipc-env lock [--pair ID ...]` (admin, connected machine) and `aipc-env lock check`."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

__all__ = ["add_parser", "run"]


def _index_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pypi-url", default=os.environ.get("AIPC_ENV_PYPI_URL"),
                   help="PyPI (or a mirror) simple index URL [env AIPC_ENV_PYPI_URL]")
    p.add_argument("--xpu-index-url", default=os.environ.get("AIPC_ENV_XPU_INDEX_URL"),
                   help="PyTorch XPU index URL, used only for torch/torchvision/Triton [env AIPC_ENV_XPU_INDEX_URL]")
    p.add_argument("--lock-root", type=Path, default=None, help="lockfiles folder (default: lockfiles/)")
    p.add_argument("--pip-layer", type=Path, metavar="FILE",
                   help="common pip requirements (default: environments/pip-layer.txt)")
    p.add_argument("--matrix", type=Path, metavar="FILE")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("lock", help="resolve pairs into hash-pinned lockfiles; `lock check` validates them")
    p.add_argument("action", nargs="?", choices=["check"], help="check: validate the lockfiles, change nothing")
    p.add_argument("--pair", action="append", metavar="ID", help="pair(s) to lock (default: every confirmed pair)")
    p.add_argument("--pip-only", action="store_true", help="skip the conda layer (conda-lock needs the channels)")
    p.add_argument("--python", metavar="X.Y", help="Python of the env (default: 3.12, or the newest the pair allows)")
    _index_args(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from aipc_env.lock.build import Indexes, lock_pair
    from aipc_env.lock.lockfile import check_pair_lock
    from aipc_env.lock.specs import PYPI_URL, XPU_INDEX_URL, common_requirements
    from aipc_env.matrix import load_matrix
    from aipc_env.paths import cache_dir, project_root

    matrix = load_matrix(args.matrix)
    root = args.lock_root or project_root() / "lockfiles"
    if args.action == "check":
        dirs = [root / p for p in args.pair] if args.pair else sorted(d for d in root.iterdir()
                                                                      if d.is_dir() and not d.name.startswith("."))
        if not dirs:
            print(f"no lockfiles in {root}: produce them on a connected machine with `nox -s lock`")
            return 1
        bad = 0
        for d in dirs:
            problems = check_pair_lock(d, matrix)
            print(f"{'✗' if problems else '✓'} {d.name}" + "".join(f"\n    {p}" for p in problems))
            bad += bool(problems)
        return 1 if bad else 0
    indexes = Indexes(args.pypi_url or PYPI_URL, args.xpu_index_url or XPU_INDEX_URL)
    pairs = [matrix.get(p) for p in args.pair] if args.pair else [p for p in matrix.pairs if p.certainty == "confirmed"]
    log = cache_dir() / "logs" / "lock.log"
    for pair in pairs:
        print(f"locking {pair.id} (torch {pair.newest_torch}+xpu, oneAPI {pair.oneapi}) ...", flush=True)
        out = lock_pair(pair, root, indexes=indexes, conda_layer=not args.pip_only, log=log, python=args.python,
                        common=common_requirements(args.pip_layer) if args.pip_layer else None)
        print(f"  wrote {out}")
    return 0
