"""Lock a pair (`nox -s lock`, admin, connected machine): resolve its pip layer with uv into a PEP 751 pylock per
platform and its conda layer with conda-lock, check the result against the matrix row, then move it into place."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from packaging.specifiers import SpecifierSet

from aipc_env.core.fileio import atomic_write_text, respect_umask
from aipc_env.core.formats import VersionedModel, timestamp, write_model
from aipc_env.core.net import reachable
from aipc_env.core.platforms import PLATFORMS, Platform
from aipc_env.core.procs import ProbeFailed, run_capture, run_logged
from aipc_env.errors import AipcError, ExitCode
from aipc_env.lock import specs
from aipc_env.lock.conda_layer import CONDA_SOURCES_NAME, public_layer_status
from aipc_env.lock.lockfile import (
    LOCK_HEADER,
    LockMeta,
    check_pylock,
    conda_lock_path,
    meta_path,
    provenance_of,
    pylock_path,
    read_pylock,
)
from aipc_env.lock.offline import (
    merge_pylock,
    plan_offline,
    pypi_requirements,
    read_universal,
    stub_wheels,
    uv_universal_argv,
    uv_universal_project,
)
from aipc_env.lock.requires import IndexReader, lock_closure, record_metadata
from aipc_env.lock.tools import conda_lock_argv, find_uv, uv_compile_argv
from aipc_env.lock.wheels import WheelManifest, load_wheel_manifest
from aipc_env.matrix import Pair

__all__ = ["Indexes", "LockReport", "LockSource", "compile_pylock", "lock_pair", "tool_version"]


def tool_version(argv: list[str]) -> str:
    """The first version number a tool's `--version` prints (informative only)."""
    import re

    try:
        found = re.search(r"\d+(?:\.\d+)+", run_capture(argv, timeout=30).stdout)
    except ProbeFailed:
        return "unknown"
    return found.group(0) if found else "unknown"


@dataclass(frozen=True)
class Indexes:
    pypi_url: str = specs.PYPI_URL
    xpu_index_url: str = specs.XPU_INDEX_URL


def compile_pylock(
    uv: str, pair: Pair, reqs: list[str], platform: Platform, python: str, indexes: Indexes, work: Path, log: Path
) -> Path:
    """Resolve requirements for one platform with uv (run from the project folder, see lock/tools.py)."""
    project = work / platform / "pyproject.toml"
    project.parent.mkdir(parents=True, exist_ok=True)
    project.write_text(
        specs.uv_project(reqs, pypi_url=indexes.pypi_url, xpu_index_url=indexes.xpu_index_url, python=python), encoding="utf-8"
    )
    out = work / f"pylock.{platform}.toml"
    run_logged(
        uv_compile_argv(uv, project, out, python=python, platform=platform, default_index=indexes.pypi_url),
        log,
        cwd=project.parent,
        echo=False,
    )
    out.write_text(
        LOCK_HEADER.format(pair=pair.id) + with_environment(out.read_text(encoding="utf-8"), platform), encoding="utf-8"
    )
    return out


def with_environment(text: str, platform: Platform) -> str:
    """A pylock's text with its PEP 751 `environments` set to the platform's marker (uv writes none for a lock of
    one target platform), placed after `lock-version`."""
    import tomli_w

    from aipc_env.core.fileio import parse_toml
    from aipc_env.core.platforms import lock_environment

    data = parse_toml(text, Path("pylock.toml"), "lock")
    data.pop("environments", None)
    first = {k: data.pop(k) for k in ("lock-version",) if k in data}
    return tomli_w.dumps({**first, "environments": [lock_environment(platform)], **data})


LockSource = Literal["auto", "index", "manifest"]
CONDA_CHANNEL_PROBE = "https://conda.anaconda.org/conda-forge/noarch/repodata.json"


def lock_pair(
    pair: Pair,
    lock_root: Path,
    *,
    indexes: Indexes,
    python: str | None = None,
    platforms: tuple[Platform, ...] = PLATFORMS,
    conda_layer: bool = True,
    log: Path,
    common: list[str] | None = None,
    source: LockSource = "auto",
    say: Callable[[str], None] = print,
    manifest: WheelManifest | None = None,
    pythons: SpecifierSet | None = None,
    readers: dict[str, IndexReader] | None = None,
) -> Path:
    """Resolve the pair into lockfiles/<pair>/. Everything is made in a temporary folder, each package's core
    metadata recorded from its index, checked against the matrix row and closed over every Python and platform,
    and only then moved into place: a failed lock leaves the old one untouched. `source`: `index` resolves
    torch/Triton from the PyTorch XPU index, `manifest` takes them from environments/xpu-wheels.yaml, `auto` asks
    the index and falls back to the manifest when it cannot be reached. `pythons`: what an env may have (default:
    the pair's range)."""
    uv = find_uv()
    manifest = manifest or load_wheel_manifest()
    readers = readers or {}
    for url in (indexes.pypi_url, indexes.xpu_index_url):
        readers.setdefault(url, IndexReader.default(url))
    if source == "auto":
        source = "index" if reachable(indexes.xpu_index_url.rstrip("/") + "/torch/") else "manifest"
        if source == "manifest":
            say(
                f"  the PyTorch XPU index ({indexes.xpu_index_url}) cannot be reached: torch, torchvision and Triton "
                "come from environments/xpu-wheels.yaml (hashes from public lockfiles; `aipc-env lock verify` "
                "re-checks them on a connected machine)"
            )
    lock_dir = lock_root / pair.id
    lock_root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{pair.id}-", dir=lock_root) as tmp:
        work = Path(tmp)
        (work / "in").mkdir()
        if source == "manifest":
            meta_extra = _lock_from_manifest(
                uv,
                pair,
                work,
                indexes=indexes,
                python=python,
                platforms=platforms,
                common=common,
                log=log,
                manifest=manifest,
                pythons=pythons,
                readers=readers,
            )
            python = meta_extra.pop("python")
        else:
            python = python or specs.pair_python(pair)
            reqs = specs.pip_layer(pair, common)
            for platform in platforms:
                out = compile_pylock(uv, pair, reqs, platform, python, indexes, work / "in", log)
                _mark_index_provenance(out, pair, indexes, readers)
                shutil.move(str(out), pylock_path(work, platform))
            meta_extra = {"torch": pair.newest_torch, "pythons": [python], "provenance": {"index": 0}}
        problems: list[str] = []
        counts: dict[str, int] = {}
        for platform in platforms:
            path = pylock_path(work, platform)
            lock = read_pylock(path)
            problems += check_pylock(lock, path, pair, platform)
            problems += lock_closure(lock, path, platform, meta_extra["pythons"], manifest)
            for pkg in lock.packages:
                kind = provenance_of(pkg)["provenance"]
                counts[kind] = counts.get(kind, 0) + 1
        if problems:
            shown = [p.replace(str(work), str(lock_dir)) for p in problems[:20]]
            raise AipcError(
                f"the resolved lock of {pair.id} does not hold ({len(problems)} problem(s)):\n  " + "\n  ".join(shown),
                exit_code=ExitCode.PROBLEMS,
                fix="check the indexes, environments/matrix.yaml and the metadata in "
                "environments/xpu-wheels.yaml; nothing was written",
            )
        meta_extra["provenance"] = counts
        tools = {"uv": tool_version([uv, "--version"])}
        conda_status: dict[str, str] = {"status": "skipped", "reason": "--pip-only"}
        if conda_layer:
            conda_status = _conda_layer(
                pair, python, work, list(platforms), log, tools, say, lock_dir, meta_extra.get("pythons") or [python]
            )
        shutil.rmtree(work / "in")
        meta = LockMeta(
            pair=pair.id,
            matrix_row_hash=specs.row_hash(pair),
            python=python,
            platforms=list(platforms),
            pypi_url=indexes.pypi_url,
            xpu_index_url=indexes.xpu_index_url,
            tools=tools,
            created_at=timestamp(),
            xpu_source=source,
            conda_layer=conda_status,
            **meta_extra,
        )
        write_model(meta_path(work), meta)
        respect_umask(work)  # TemporaryDirectory made it 0700
        if lock_dir.exists():
            shutil.rmtree(lock_dir)
        shutil.move(tmp, lock_dir)
        Path(tmp).mkdir()  # let TemporaryDirectory clean up an empty folder
    return lock_dir


def _mark_index_provenance(path: Path, pair: Pair, indexes: Indexes, readers: dict[str, IndexReader]) -> None:
    """Record in each package of a live lock that uv hashed it against the index it resolved from, and its core
    metadata as that index serves it."""

    import tomli_w
    from packaging.utils import canonicalize_name

    from aipc_env.core.fileio import parse_toml, read_text

    data = parse_toml(read_text(path, "lock"), path, "lock")
    for pkg in data.get("packages", []):
        xpu = canonicalize_name(pkg["name"]) in specs.EXPLICIT_XPU_NAMES
        pkg["tool"] = {"aipc-env": {"provenance": "index", "index": indexes.xpu_index_url if xpu else indexes.pypi_url}}
    _record(data, readers, pair)
    atomic_write_text(path, LOCK_HEADER.format(pair=pair.id) + tomli_w.dumps(data))


def _record(data: dict[str, Any], readers: dict[str, IndexReader], pair: Pair) -> None:
    problems = record_metadata(data, readers)
    if problems:
        raise AipcError(
            f"the core metadata of {len(problems)} locked package(s) of {pair.id} could not be read:\n  "
            + "\n  ".join(problems[:10]),
            exit_code=ExitCode.PROBLEMS,
            fix="check that the index serves PEP 658 metadata or wheels (a mirror may lag); nothing was written",
        )


def _conda_layer(
    pair: Pair,
    python: str,
    work: Path,
    platforms: list[str],
    log: Path,
    tools: dict[str, str],
    say: Callable[[str], None],
    lock_dir: Path,
    pythons: list[str],
) -> dict[str, str]:
    """Lock the conda layer with conda-lock, or record why it was not: no conda-lock, or the channels cannot be
    reached (a conda lock is never invented; a layer the lock folder already holds, assembled from public records,
    is carried over)."""
    conda_lock = shutil.which("conda-lock")
    if not conda_lock:
        raise AipcError("conda-lock is not installed", fix="pip install conda-lock, or pass --pip-only")
    if not reachable(CONDA_CHANNEL_PROBE):
        carried = public_layer_status(lock_dir, python, pythons)
        if carried is not None:
            for name in (conda_lock_path(lock_dir).name, CONDA_SOURCES_NAME):
                shutil.copy2(lock_dir / name, work / name)
            say(
                f"  the conda channels ({CONDA_CHANNEL_PROBE}) cannot be reached: the conda layer assembled from "
                f"public records (Python {carried['python']}) is carried over"
            )
            return carried
        say(
            f"  the conda channels ({CONDA_CHANNEL_PROBE}) cannot be reached: no conda layer; lock-meta.json says so "
            "and `lock check` reports it"
        )
        return {"status": "unavailable", "reason": f"the conda channels could not be reached ({CONDA_CHANNEL_PROBE})"}
    env_file = work / "in" / "environment.yml"
    env_file.write_text(specs.conda_environment(pair, python), encoding="utf-8")
    run_logged(conda_lock_argv(conda_lock, env_file, conda_lock_path(work), platforms), log)
    tools["conda-lock"] = tool_version([conda_lock, "--version"])
    return {"status": "locked", "reason": ""}


def _lock_from_manifest(
    uv: str,
    pair: Pair,
    work: Path,
    *,
    indexes: Indexes,
    python: str | None,
    platforms: tuple[Platform, ...],
    common: list[str] | None,
    log: Path,
    manifest: WheelManifest,
    pythons: SpecifierSet | None,
    readers: dict[str, IndexReader],
) -> dict[str, Any]:
    """The pylocks of `pair` with torch/torchvision/Triton from the manifest (see lock/offline.py)."""
    import tomli_w

    plan = plan_offline(pair, manifest, platforms, python, pythons)
    project = work / "in" / "universal" / "pyproject.toml"
    project.parent.mkdir(parents=True)
    stubs = stub_wheels(work / "in" / "stubs", pair, plan.torch, manifest, platforms)
    project.write_text(
        uv_universal_project(
            pypi_requirements(pair, plan.torch, common), pypi_url=indexes.pypi_url, pythons=plan.pythons, stubs=stubs
        ),
        encoding="utf-8",
    )
    universal = work / "in" / "pylock.universal.toml"
    run_logged(
        uv_universal_argv(uv, project, universal, pythons=plan.pythons, default_index=indexes.pypi_url),
        log,
        cwd=project.parent,
        echo=False,
    )
    resolved = read_universal(universal)
    for platform in platforms:
        data = merge_pylock(resolved, platform, plan.pythons, plan.artifacts[platform], pair, indexes.pypi_url)
        _record(data, readers, pair)
        atomic_write_text(pylock_path(work, platform), LOCK_HEADER.format(pair=pair.id) + tomli_w.dumps(data))
    return {"python": plan.default_python, "torch": plan.torch, "pythons": plan.pythons, "uncovered_pythons": plan.uncovered}


class LockReport(VersionedModel):
    """`aipc-env lock --json`: the lock folders written."""

    FORMAT: ClassVar[str] = "lock report"
    schema_version: Literal[1] = 1
    written: list[str]
    log: str
    failed: dict[str, str] = {}
    """Pairs that could not be locked (all confirmed pairs were asked for), and why."""
