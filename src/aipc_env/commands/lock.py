"""`aipc-env lock [--pair ID ...]` (admin, connected machine) and `aipc-env lock check`."""

from __future__ import annotations

import argparse

from aipc_env.commands.options import INDEXES, JSON, LOCK_ROOT, MATRIX, PAIR, lock_root, print_json
from aipc_env.errors import ExitCode

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("lock", parents=[JSON, PAIR, LOCK_ROOT, INDEXES, MATRIX],
                       help="resolve pairs into hash-pinned lockfiles; `lock check` validates them",
                       description="(Admin, connected machine) resolve each pair's pip layer with uv into "
                       "lockfiles/<pair>/pylock.<platform>.toml (torch and Triton only from the PyTorch XPU index) "
                       "and its conda layer with conda-lock. `lock check` validates the lockfiles offline. Without --pair: every "
                       "confirmed pair (check: every lock folder).")
    p.add_argument("action", nargs="?", choices=["check"], help="check: validate the lockfiles, change nothing")
    p.add_argument("--pip-only", action="store_true", help="skip the conda layer (conda-lock needs the channels)")
    p.add_argument("--python", metavar="X.Y", help="Python of the env (default: 3.12, or the newest the pair allows)")
    p.set_defaults(run=run)


def _check(args: argparse.Namespace, matrix, root) -> int:
    from aipc_env.errors import InputError
    from aipc_env.lock.lockfile import LockCheckReport, PairLockStatus, check_pair_lock

    if not root.is_dir():
        raise InputError("the lockfiles folder does not exist" if not root.exists() else "is a file, not a folder",
                         path=root, key="--lock-root", fix="pass the lockfiles/ folder of an aipc-env checkout")
    dirs = [root / args.pair] if args.pair else sorted(d for d in root.iterdir()
                                                                  if d.is_dir() and not d.name.startswith("."))
    report = LockCheckReport(lock_root=str(root),
                             pairs=[PairLockStatus(pair=d.name, problems=check_pair_lock(d, matrix)) for d in dirs])
    if args.json:
        print_json(report)
    elif not dirs:
        print(f"no lockfiles in {root}: produce them on a connected machine with `nox -s lock`")
    else:
        for status in report.pairs:
            print(f"{'✗' if status.problems else '✓'} {status.pair}" + "".join(f"\n    {p}" for p in status.problems))
    return ExitCode.OK if report.clean else ExitCode.PROBLEMS


def run(args: argparse.Namespace) -> int:
    from aipc_env.lock.lock import Indexes, LockReport, lock_pair
    from aipc_env.lock.specs import PYPI_URL, XPU_INDEX_URL, common_requirements
    from aipc_env.matrix import load_matrix
    from aipc_env.paths import log_path

    matrix = load_matrix(args.matrix)
    root = lock_root(args)
    if args.action == "check":
        return _check(args, matrix, root)
    indexes = Indexes(args.pypi_url or PYPI_URL, args.xpu_index_url or XPU_INDEX_URL)
    pairs = [matrix.get(args.pair)] if args.pair else [p for p in matrix.pairs if p.certainty == "confirmed"]
    log = log_path("lock")
    written = []
    for pair in pairs:
        if not args.json:
            print(f"locking {pair.id} (torch {pair.newest_torch}+xpu, oneAPI {pair.oneapi}) ...", flush=True)
        out = lock_pair(pair, root, indexes=indexes, conda_layer=not args.pip_only, log=log, python=args.python,
                        common=common_requirements(args.pip_layer) if args.pip_layer else None)
        written.append(str(out))
        if not args.json:
            print(f"  wrote {out}")
    if args.json:
        print_json(LockReport(written=written, log=str(log)))
    return ExitCode.OK
