"""`aipc-env lock [--pair ID]` (admin), `aipc-env lock check` and `aipc-env lock verify` (connected machine)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from aipc_env.commands.options import INDEXES, JSON, LOCK_ROOT, MATRIX, PAIR, Subparsers, lock_root, python_minor
from aipc_env.commands.result import Result, progress
from aipc_env.errors import ExitCode

if TYPE_CHECKING:
    from aipc_env.lock.verify import LockVerifyReport
    from aipc_env.matrix import Matrix


__all__ = ["add_parser", "run"]


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "lock",
        parents=[JSON, PAIR, LOCK_ROOT, INDEXES, MATRIX],
        help="resolve pairs into hash-pinned lockfiles; `lock check` validates them; `lock verify` "
        "re-hashes what came from public lockfiles",
        description="(Admin) resolve each pair's pip layer with uv into lockfiles/<pair>/pylock."
        "<platform>.toml and its conda layer with conda-lock. torch, torchvision and Triton come from "
        "the PyTorch XPU index, or, when it cannot be reached, from environments/xpu-wheels.yaml "
        "(hashes read from public lockfiles; every package records its provenance). `lock check` "
        "validates the lockfiles offline; `lock verify` (connected machine) fetches every artifact not "
        "hashed against the live index and compares. Without --pair: every confirmed pair (check and "
        "verify: every lock folder).",
    )
    p.add_argument(
        "action",
        nargs="?",
        choices=["check", "verify"],
        help="check: validate the lockfiles, change nothing; verify: re-hash the public-lockfile artifacts",
    )
    p.add_argument("--pip-only", action="store_true", help="skip the conda layer (conda-lock needs the channels)")
    p.add_argument(
        "--python",
        type=python_minor,
        metavar="X.Y",
        help="Python the env is built with (default: 3.12, or the newest the pair allows)",
    )
    source = p.add_mutually_exclusive_group()
    source.add_argument(
        "--from-index",
        dest="source",
        action="store_const",
        const="index",
        help="resolve torch/Triton against the PyTorch XPU index (fail if it cannot be reached)",
    )
    source.add_argument(
        "--from-manifest",
        dest="source",
        action="store_const",
        const="manifest",
        help="take torch/torchvision/Triton from environments/xpu-wheels.yaml even when the index can be reached",
    )
    p.set_defaults(source="auto")
    p.add_argument(
        "--mirror", metavar="URL", help="verify: fetch the artifacts from this mirror (URL/<file>) instead of their locked URLs"
    )
    p.set_defaults(run=run)


def _lock_dirs(args: argparse.Namespace, root: Path) -> list[Path]:
    from aipc_env.errors import InputError

    if not root.is_dir():
        raise InputError(
            "the lockfiles folder does not exist" if not root.exists() else "is a file, not a folder",
            path=root,
            key="--lock-root",
            fix="pass a lockfiles/ folder (an aipc-env checkout's, or the one "
            "the installed tool ships: `aipc-env --version` says which is used)",
        )
    if args.pair:
        from aipc_env.core.specs import check_file_name

        try:
            check_file_name(args.pair, what="pair id")
        except ValueError as exc:
            raise InputError(
                str(exc),
                key="--pair",
                fix="give a pair id of environments/matrix.yaml, e.g. xpu-2.12 (`aipc-env matrix` lists them)",
            ) from None
        if not (root / args.pair).is_dir():
            raise InputError(
                f"no lock folder for {args.pair}",
                path=root / args.pair,
                key="--pair",
                fix=f"make it: nox -s lock -- --pair {args.pair}",
            )
        return [root / args.pair]
    return sorted(d for d in root.iterdir() if d.is_dir() and not d.name.startswith((".", "__")))


def _check(args: argparse.Namespace, matrix: Matrix, root: Path) -> Result:
    from aipc_env.lock.check import check_pair_lock, default_readers, inferred_metadata
    from aipc_env.lock.lockfile import LockCheckReport, PairLockStatus, lock_notes, meta_path, read_meta

    dirs = _lock_dirs(args, root)
    statuses = []
    readers = default_readers()  # only for locks that predate recorded metadata
    for d in dirs:
        notes = lock_notes(read_meta(d)) if meta_path(d).is_file() else []
        inferred = inferred_metadata(d)
        if inferred:
            notes.append(
                f"{len(inferred)} package(s) stand on inferred metadata (no source shows their wheel's own "
                f"Requires-Dist; the env build reads the real one before installing): {'; '.join(inferred)}"
            )
        statuses.append(
            PairLockStatus(
                pair=d.name, problems=check_pair_lock(d, matrix, readers=readers), notes=notes, inferred_metadata=inferred
            )
        )
    report = LockCheckReport(lock_root=str(root), pairs=statuses)

    def text() -> None:
        if not dirs:
            print(f"no lockfiles in {root}: produce them with `nox -s lock`")
        for status in report.pairs:
            print(
                f"{'✗' if status.problems else '✓'} {status.pair}"
                + "".join(f"\n    {p}" for p in status.problems)
                + "".join(f"\n    note: {n}" for n in status.notes)
            )

    return Result(report, text, ExitCode.OK if report.clean else ExitCode.PROBLEMS)


def _verify(args: argparse.Namespace, matrix: Matrix, root: Path) -> Result:
    from aipc_env.lock.verify import LockVerifyReports, verify_lock

    reports = [verify_lock(d, matrix.get(d.name), mirror=args.mirror) for d in _lock_dirs(args, root)]
    code = ExitCode.OK if all(r.clean for r in reports) else ExitCode.PROBLEMS
    return Result(LockVerifyReports(reports=reports), lambda: _verify_text(reports), code)


def _verify_text(reports: list[LockVerifyReport]) -> None:
    for report in reports:
        counts = {k: sum(c.status == k for c in report.checked) for k in ("verified", "changed", "unverified")}
        print(
            f"{'✓' if report.clean else '✗'} {report.pair}: {counts['verified']} verified, {counts['changed']} "
            f"changed, {counts['unverified']} unverified"
        )
        for c in report.checked:
            if c.status == "changed":
                print(f"    CHANGED {c.file}: the lock has sha256 {c.locked_sha256}, {c.url} serves {c.fetched_sha256}")
            elif c.status == "unverified":
                print(f"    unverified {c.file} ({c.url}): {c.reason}")
        for problem in report.requires_dist:
            print(f"    Requires-Dist: {problem}")
        if not report.checked:
            print("    nothing to verify: every artifact was hashed against a live index")


def run(args: argparse.Namespace) -> Result:
    from aipc_env.errors import AipcError
    from aipc_env.lock.lock import Indexes, LockReport, lock_pair
    from aipc_env.lock.specs import PYPI_URL, XPU_INDEX_URL, common_requirements
    from aipc_env.matrix import load_matrix
    from aipc_env.paths import log_path

    matrix = load_matrix(args.matrix)
    root = lock_root(args)
    if args.action == "check":
        return _check(args, matrix, root)
    if args.action == "verify":
        return _verify(args, matrix, root)
    indexes = Indexes(args.pypi_url or PYPI_URL, args.xpu_index_url or XPU_INDEX_URL)
    pairs = [matrix.get(args.pair)] if args.pair else [p for p in matrix.pairs if p.certainty == "confirmed"]
    log = log_path("lock")
    written, failed = [], {}
    say = progress(args).say
    for pair in pairs:
        say(f"locking {pair.id} (oneAPI {pair.oneapi}) ...")
        try:
            out = lock_pair(
                pair,
                root,
                indexes=indexes,
                conda_layer=not args.pip_only,
                log=log,
                python=args.python,
                common=common_requirements(args.pip_layer) if args.pip_layer else None,
                source=args.source,
                say=say,
                pythons=matrix.env_pythons(pair),
            )
        except AipcError as exc:
            if args.pair:
                raise
            failed[pair.id] = exc.message  # the other pairs are still locked; this one keeps its old lock
            say(f"  not locked: {exc.message}")
            continue
        written.append(str(out))
        say(f"  wrote {out}")
    return Result(
        LockReport(written=written, log=str(log), failed=failed),
        lambda: print(f"not locked: {', '.join(failed)} (see above; their lock folders are unchanged)") if failed else None,
        ExitCode.PROBLEMS if failed else ExitCode.OK,
    )
