"""`aipc-env matrix`: show the compatibility matrix (validates it on the way)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from aipc_env.commands.options import INDEXES, JSON, MATRIX, Subparsers, console_for, output_folder
from aipc_env.commands.result import Result, progress
from aipc_env.errors import ExitCode

if TYPE_CHECKING:
    from aipc_env.matrix import Matrix


__all__ = ["add_parser", "run"]


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "matrix",
        parents=[JSON, MATRIX, INDEXES],
        help="show the torch+xpu / oneAPI compatibility matrix; `matrix refresh` proposes what the XPU index has that it lacks",
        description="Validate and show environments/matrix.yaml: one row per supported pair. `matrix "
        "refresh` (admin, connected machine) reads the PyTorch XPU index (PEP 691 pages, PEP 658 "
        "metadata) and PyPI and writes candidate files (new rows, manifest entries and their sources) "
        "with their diff; it never edits environments/. Exit 1 when there is something to review.",
    )
    p.add_argument("action", nargs="?", choices=["refresh"], help="refresh: propose new rows and manifest entries")
    p.add_argument("-v", "--verbose", action="store_true", help="also show each row's source and notes")
    p.add_argument(
        "--out",
        type=output_folder,
        metavar="DIR",
        help="refresh: where the candidate files go (default: a new folder under the aipc-env cache)",
    )
    p.set_defaults(run=run)


def _python_range(spec: str) -> str:
    """'>=3.10,<3.14' -> '3.10-3.13' (short enough for 80 columns)."""
    import re

    low = re.search(r">=\s*3\.(\d+)", spec)
    high = re.search(r"<\s*3\.(\d+)", spec)
    if low and high:
        return f"3.{low.group(1)}-3.{int(high.group(1)) - 1}"
    if low:
        return f"3.{low.group(1)}+"
    return spec


def _refresh(args: argparse.Namespace, matrix: Matrix) -> Result:
    import sys

    from aipc_env.core.fileio import atomic_write_text, read_text
    from aipc_env.errors import InputError
    from aipc_env.lock.refresh import (
        RefreshReport,
        candidate_paths,
        check_candidates,
        manifest_text,
        matrix_text,
        plan_refresh,
        read_index,
        today,
        unified_diff,
    )
    from aipc_env.lock.specs import PYPI_URL, XPU_INDEX_URL
    from aipc_env.lock.wheels import load_wheel_manifest, manifest_path
    from aipc_env.paths import cache_dir, matrix_path

    xpu, pypi = args.xpu_index_url or XPU_INDEX_URL, args.pypi_url or PYPI_URL
    if not xpu.startswith("https://"):
        raise InputError(
            f"{xpu} is not an https:// URL",
            key="--xpu-index-url",
            fix="the manifest records only https:// URLs; pass the index (or its mirror) over HTTPS",
        )
    manifest = load_wheel_manifest()
    progress(args).note(f"reading {xpu} and {pypi} ...")
    wheels, pypi_torch, unreadable = read_index(xpu, pypi, manifest, cache_dir() / "core-metadata")
    plan = plan_refresh(matrix, manifest, wheels, pypi_torch, today())
    source_matrix, source_manifest = Path(args.matrix or matrix_path()), manifest_path()
    before = {
        source_matrix: read_text(source_matrix, "compatibility matrix"),
        source_manifest: read_text(source_manifest, "XPU wheel manifest"),
    }
    after = {
        source_matrix: matrix_text(before[source_matrix], plan),
        source_manifest: manifest_text(before[source_manifest], plan),
    }
    written: list[str] = []
    if not plan.empty:
        out = args.out or cache_dir() / "matrix-refresh" / today()
        out.mkdir(parents=True, exist_ok=True)
        for target, original in zip(candidate_paths(out), (source_matrix, source_manifest)):
            atomic_write_text(target, after[original])
            written.append(str(target))
        try:
            check_candidates(*candidate_paths(out))
        except InputError as exc:  # a candidate that would not load is aipc-env's bug, not a proposal
            raise AssertionError(f"the candidate does not load: {exc.message}") from None
    report = RefreshReport(
        xpu_index_url=xpu,
        new_rows=[r["id"] for r in plan.new_rows],
        updated_rows=list(plan.row_updates),
        new_wheels=len(plan.wheels),
        new_metadata=len(plan.metadata),
        notes=plan.notes,
        unreadable=unreadable,
        written=written,
    )

    def text() -> None:
        for path in (source_matrix, source_manifest):
            sys.stdout.write(unified_diff(before[path], after[path], str(path)))
        for note in plan.notes:
            print(f"note: {note}")
        for problem in unreadable:
            print(f"unreadable: {problem}")
        print(
            f"{len(plan.new_rows)} new row(s), {len(plan.row_updates)} updated row(s), {len(plan.wheels)} wheel(s) "
            f"and {len(plan.metadata)} metadata record(s) to review"
            + (
                f"; candidates in {Path(written[0]).parent} (review them, then copy what holds into environments/)"
                if written
                else ": the matrix and the manifest are up to date"
            )
        )

    return Result(report, text, ExitCode.PROBLEMS if unreadable or not plan.empty else ExitCode.OK)


def run(args: argparse.Namespace) -> Result:
    from aipc_env.matrix import load_matrix

    matrix = load_matrix(args.matrix)
    if args.action == "refresh":
        return _refresh(args, matrix)
    return Result(matrix, lambda: _table(matrix, args.verbose))


def _table(matrix: Matrix, verbose: bool) -> None:
    from rich.table import Table

    console = console_for()
    table = Table(
        "pair",
        "torch",
        "oneAPI",
        "Triton package",
        "ver.",
        "Python",
        "Win",
        "bnb≥",
        box=None,
        pad_edge=False,
        padding=(0, 1, 0, 0),
        header_style="bold",
    )
    for p in matrix.pairs:
        table.add_row(
            p.id + ("*" if p.certainty != "confirmed" else ""),
            ",".join(p.torch),
            p.oneapi,
            p.triton.name,
            p.triton.version,
            _python_range(p.python),
            {"full": "yes", "eager-only": "eager", "none": "no"}[p.windows],
            p.bitsandbytes_min,
        )
    console.print(table)
    if verbose:
        for p in matrix.pairs:
            console.print(f"{p.id}: {p.source}" + (f"\n  note: {p.notes}" if p.notes else ""))
    else:
        console.print("* provisional row (one weak source); -v: sources, --json: everything")
