"""Lock a pair (`nox -s lock`, admin, connected machine): resolve its pip layer with uv into a PEP 751 pylock per
platform and its conda layer with conda-lock, check the result against the matrix row, then move it into place."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

from aipc_env.errors import AipcError
from aipc_env.formats import VersionedModel, timestamp, write_model
from aipc_env.lock import specs
from aipc_env.lock.lockfile import (
    LOCK_HEADER,
    LockMeta,
    check_pylock,
    conda_lock_path,
    meta_path,
    pylock_path,
    read_pylock,
)
from aipc_env.lock.tools import conda_lock_argv, find_uv, uv_compile_argv
from aipc_env.matrix import Pair
from aipc_env.platforms import PLATFORMS, Platform
from aipc_env.procs import ProbeFailed, run_capture, run_logged

__all__ = ["Indexes", "LockReport", "compile_pylock", "lock_pair", "tool_version"]


def tool_version(argv: list[str]) -> str:
    """The last word of a tool's `--version` (informative only)."""
    try:
        return run_capture(argv, timeout=30).stdout.strip().split()[-1]
    except (ProbeFailed, IndexError):
        return "unknown"


@dataclass(frozen=True)
class Indexes:
    pypi_url: str = specs.PYPI_URL
    xpu_index_url: str = specs.XPU_INDEX_URL


def compile_pylock(uv: str, pair: Pair, reqs: list[str], platform: Platform, python: str, indexes: Indexes,
                   work: Path, log: Path) -> Path:
    """Resolve requirements for one platform with uv (run from the project folder, see lock/tools.py)."""
    project = work / platform / "pyproject.toml"
    project.parent.mkdir(parents=True, exist_ok=True)
    project.write_text(specs.uv_project(reqs, pypi_url=indexes.pypi_url, xpu_index_url=indexes.xpu_index_url,
                                        python=python), encoding="utf-8")
    out = work / f"pylock.{platform}.toml"
    run_logged(uv_compile_argv(uv, project, out, python=python, platform=platform, default_index=indexes.pypi_url),
               log, cwd=project.parent, echo=False)
    out.write_text(LOCK_HEADER.format(pair=pair.id) + out.read_text(encoding="utf-8"), encoding="utf-8")
    return out


def lock_pair(pair: Pair, lock_root: Path, *, indexes: Indexes, python: str | None = None,
              platforms: tuple[Platform, ...] = PLATFORMS, conda_layer: bool = True, log: Path,
              common: list[str] | None = None) -> Path:
    """Resolve the pair into lockfiles/<pair>/. Everything is made in a temporary folder, checked against the
    matrix row, and only then moved into place: a failed lock leaves the old one untouched."""
    uv = find_uv()
    python = python or specs.pair_python(pair)
    reqs = specs.pip_layer(pair, common)
    lock_dir = lock_root / pair.id
    lock_root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{pair.id}-", dir=lock_root) as tmp:
        work = Path(tmp)
        problems: list[str] = []
        for platform in platforms:
            out = compile_pylock(uv, pair, reqs, platform, python, indexes, work / "in", log)
            problems += check_pylock(read_pylock(out), out, pair, platform)
            shutil.move(str(out), pylock_path(work, platform))
        if problems:
            raise AipcError("the resolved lock does not match the matrix row:\n  " + "\n  ".join(problems),
                            fix="check the indexes and environments/matrix.yaml; nothing was written")
        tools = {"uv": tool_version([uv, "--version"])}
        if conda_layer:
            conda_lock = shutil.which("conda-lock")
            if not conda_lock:
                raise AipcError("conda-lock is not installed", fix="pip install conda-lock, or pass --pip-only")
            env_file = work / "in" / "environment.yml"
            env_file.write_text(specs.conda_environment(pair, python), encoding="utf-8")
            run_logged(conda_lock_argv(conda_lock, env_file, conda_lock_path(work), list(platforms)), log)
            tools["conda-lock"] = tool_version([conda_lock, "--version"])
        shutil.rmtree(work / "in")
        meta = LockMeta(pair=pair.id, matrix_row_hash=specs.row_hash(pair), python=python, platforms=list(platforms),
                        pypi_url=indexes.pypi_url, xpu_index_url=indexes.xpu_index_url, tools=tools,
                        created_at=timestamp())
        write_model(meta_path(work), meta)
        if lock_dir.exists():
            shutil.rmtree(lock_dir)
        shutil.move(tmp, lock_dir)
        Path(tmp).mkdir()  # let TemporaryDirectory clean up an empty folder
    return lock_dir


class LockReport(VersionedModel):
    """`aipc-env lock --json`: the lock folders written."""

    FORMAT: ClassVar[str] = "lock report"
    schema_version: Literal[1] = 1
    written: list[str]
    log: str
