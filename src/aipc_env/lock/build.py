"""Lock a pair (`nox -s lock`) and build/check a training env from its lock (`nox -s env`)."""

from __future__ import annotations

import datetime as _dt
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from aipc_env.errors import AipcError, InputError
from aipc_env.facts.gather import GatherOptions, _training_env, env_python
from aipc_env.fileio import atomic_write_text, read_json, write_json
from aipc_env.lock import specs
from aipc_env.lock.drift import DriftItem, Manifest, compute_drift, locked_packages
from aipc_env.lock.lockfile import (LOCK_HEADER, LockMeta, check_pylock, conda_lock_path, meta_path,
                                    pylock_path, read_pylock)
from aipc_env.lock.tools import (CondaTool, conda_create_argv, conda_lock_argv, conda_render_argv, find_uv,
                                 run_logged, uv_compile_argv, uv_install_argv, uv_venv_argv)
from aipc_env.matrix import Matrix, Pair
from aipc_env.platforms import PLATFORMS, Platform

__all__ = ["Indexes", "lock_pair", "EnvRequest", "EnvResult", "build_env", "check_env", "choose_pair",
           "MANIFEST_NAME"]

MANIFEST_NAME = "aipc-env-manifest.json"


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _tool_version(argv: list[str]) -> str:
    import subprocess

    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout.strip().split()[-1]
    except Exception:  # noqa: BLE001 - a version string is informative only
        return "unknown"


@dataclass(frozen=True)
class Indexes:
    pypi_url: str = specs.PYPI_URL
    xpu_index_url: str = specs.XPU_INDEX_URL


def _compile(uv: str, pair: Pair, reqs: list[str], platform: Platform, python: str, indexes: Indexes,
             work: Path, log: Path) -> Path:
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
            out = _compile(uv, pair, reqs, platform, python, indexes, work / "in", log)
            problems += check_pylock(read_pylock(out), out, pair, platform)
            shutil.move(str(out), pylock_path(work, platform))
        if problems:
            raise AipcError("the resolved lock does not match the matrix row:\n  " + "\n  ".join(problems),
                            fix="check the indexes and environments/matrix.yaml; nothing was written")
        tools = {"uv": _tool_version([uv, "--version"])}
        if conda_layer:
            conda_lock = shutil.which("conda-lock")
            if not conda_lock:
                raise AipcError("conda-lock is not installed", fix="pip install conda-lock, or pass --pip-only")
            env_file = work / "in" / "environment.yml"
            env_file.write_text(specs.conda_environment(pair, python), encoding="utf-8")
            run_logged(conda_lock_argv(conda_lock, env_file, conda_lock_path(work), list(platforms)), log)
            tools["conda-lock"] = _tool_version([conda_lock, "--version"])
        shutil.rmtree(work / "in")
        meta = LockMeta(pair=pair.id, matrix_row_hash=specs.row_hash(pair), python=python, platforms=list(platforms),
                        pypi_url=indexes.pypi_url, xpu_index_url=indexes.xpu_index_url, tools=tools,
                        created_at=_now())
        write_json(meta_path(work), meta.model_dump(mode="json"))
        if lock_dir.exists():
            shutil.rmtree(lock_dir)
        shutil.move(tmp, lock_dir)
        Path(tmp).mkdir()  # let TemporaryDirectory clean up an empty folder
    return lock_dir


def choose_pair(matrix: Matrix, platform: Platform, pair_id: str | None, toolkits: list[str]) -> tuple[Pair, str]:
    """The pair to build: given; else the newest matching an installed oneAPI toolkit; else the newest."""
    if pair_id:
        return matrix.get(pair_id), "--pair"
    for release in sorted(toolkits, key=lambda v: tuple(int(x) for x in v.split(".")), reverse=True):
        usable = [p for p in matrix.for_toolkit(release) if p.certainty == "confirmed" and p.supports(platform)]
        if usable:
            return usable[0], f"matches the installed oneAPI {release}"
    return matrix.newest(platform), "newest supported pair"


@dataclass
class EnvRequest:
    pair: Pair
    prefix: Path
    platform: Platform
    lock_root: Path
    log: Path
    indexes: Indexes = field(default_factory=Indexes)
    base_python: str | None = None
    """Build the interpreter layer as a venv from this Python instead of conda (Linux boxes without conda)."""
    conda_tool: CondaTool | None = None
    unlocked: bool = False
    common: list[str] | None = None
    """The common pip layer (default: environments/pip-layer.txt)."""


@dataclass
class EnvResult:
    prefix: Path
    python: Path
    changed: bool
    drift_before: list[DriftItem]
    seconds: float
    lockfile: Path


def _installed(prefix: Path) -> tuple[dict[str, str], str]:
    env = _training_env(GatherOptions(env_prefix=prefix), 60.0)
    if env.error:
        raise AipcError(env.error, path=prefix)
    return env.distributions, env.python_version or ""


def _read_manifest(prefix: Path) -> Manifest | None:
    path = prefix / MANIFEST_NAME
    if not path.is_file():
        return None
    try:
        return Manifest.model_validate(read_json(path))
    except Exception:  # noqa: BLE001 - a damaged manifest only loses the hash comparison
        return None


def check_env(prefix: Path, lockfile: Path, platform: Platform) -> list[DriftItem]:
    """Compare an env with its lock without changing anything."""
    if not env_python(prefix).is_file():
        raise InputError(f"no env at {prefix}", key="--prefix", fix="build it: nox -s env")
    installed, python = _installed(prefix)
    return compute_drift(read_pylock(lockfile), installed, _read_manifest(prefix), platform, python)


def _conda_layer(req: EnvRequest, lockfile_conda: Path | None, python: str) -> None:
    if req.base_python:
        run_logged(uv_venv_argv(find_uv(), req.prefix, req.base_python), req.log)
        return
    tool = req.conda_tool
    if tool is None:
        from aipc_env.lock.tools import MINIFORGE_HINT

        raise AipcError("no conda, mamba or micromamba found to create the interpreter layer", fix=MINIFORGE_HINT)
    if req.unlocked or lockfile_conda is None:
        run_logged(conda_create_argv(tool, req.prefix, python=python), req.log)
    elif tool.name == "conda-lock":
        run_logged(conda_create_argv(tool, req.prefix, lockfile=lockfile_conda), req.log)
    else:
        conda_lock = shutil.which("conda-lock")
        if not conda_lock:
            raise AipcError("rendering the conda lock needs conda-lock", fix="pip install conda-lock")
        with tempfile.TemporaryDirectory() as tmp:
            run_logged(conda_render_argv(conda_lock, lockfile_conda, req.platform, Path(tmp)), req.log)
            explicit = Path(tmp) / f"conda-{req.platform}.explicit.txt"
            run_logged(conda_create_argv(tool, req.prefix, explicit=explicit), req.log)


def _record_unlocked(req: EnvRequest, python: str) -> Path:
    """--unlocked: resolve from the specs for this machine and keep the result as this pair's lock."""
    uv = find_uv()
    lock_dir = req.lock_root / req.pair.id
    with tempfile.TemporaryDirectory() as tmp:
        out = _compile(uv, req.pair, specs.pip_layer(req.pair, req.common), req.platform, python, req.indexes, Path(tmp), req.log)
        problems = check_pylock(read_pylock(out), out, req.pair, req.platform)
        if problems:
            raise AipcError("the resolved packages do not match the matrix row:\n  " + "\n  ".join(problems))
        lock_dir.mkdir(parents=True, exist_ok=True)
        target = pylock_path(lock_dir, req.platform)
        atomic_write_text(target, out.read_text(encoding="utf-8"))
    meta = LockMeta(pair=req.pair.id, matrix_row_hash=specs.row_hash(req.pair), python=python,
                    platforms=[req.platform], pypi_url=req.indexes.pypi_url, xpu_index_url=req.indexes.xpu_index_url,
                    tools={"uv": _tool_version([uv, "--version"])}, created_at=_now(),
                    source="env --unlocked (recorded on a golden machine)")
    write_json(meta_path(lock_dir), meta.model_dump(mode="json"))
    return target


def build_env(req: EnvRequest) -> EnvResult:
    start = time.perf_counter()
    lock_dir = req.lock_root / req.pair.id
    lockfile = pylock_path(lock_dir, req.platform)
    python_version = specs.pair_python(req.pair)
    if req.base_python:
        import subprocess

        python_version = subprocess.run([req.base_python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                                        capture_output=True, text=True, check=True).stdout.strip()
    if not req.unlocked and not lockfile.is_file():
        raise AipcError(f"no lockfile for {req.pair.id} on {req.platform} ({lockfile})",
                        fix=f"produce it on a connected machine: nox -s lock -- --pair {req.pair.id}; or build "
                        f"from the specs and record this machine's lock: nox -s env -- --pair {req.pair.id} --unlocked")
    if not req.unlocked:
        if meta_path(lock_dir).is_file():
            from aipc_env.lock.lockfile import read_meta

            locked_for = read_meta(lock_dir).python
            if locked_for != python_version:
                raise AipcError(f"the {req.pair.id} lock is for Python {locked_for}, the env's interpreter is "
                                f"{python_version}", path=lockfile,
                                fix=f"use a Python {locked_for} interpreter, or re-lock: nox -s lock -- --pair "
                                f"{req.pair.id} --python {python_version}")
        problems = check_pylock(read_pylock(lockfile), lockfile, req.pair, req.platform)
        if problems:
            raise AipcError("the lockfile does not match the matrix row:\n  " + "\n  ".join(problems),
                            path=lockfile, fix="re-lock: nox -s lock -- --pair " + req.pair.id)
        if req.prefix.exists() and env_python(req.prefix).is_file():
            drift = check_env(req.prefix, lockfile, req.platform)
            if not drift:
                _record(req, lockfile, keep_existing=True)
                return EnvResult(req.prefix, env_python(req.prefix), False, [], time.perf_counter() - start, lockfile)
        else:
            drift = []
    else:
        drift = []
    if not env_python(req.prefix).is_file():
        conda_lock = conda_lock_path(lock_dir)
        _conda_layer(req, conda_lock if conda_lock.is_file() else None, python_version)
    if req.unlocked:
        lockfile = _record_unlocked(req, python_version)
    python = env_python(req.prefix)
    run_logged(uv_install_argv(find_uv(), python, lockfile), req.log)
    lock = read_pylock(lockfile)
    manifest = Manifest(pair=req.pair.id, platform=req.platform, lockfile=str(lockfile), installed_at=_now(),
                        packages={n: {"version": v, "sha256": s}
                                  for n, (v, s) in locked_packages(lock, req.platform, python_version).items()})
    write_json(req.prefix / MANIFEST_NAME, manifest.model_dump(mode="json"))
    _record(req, lockfile)
    return EnvResult(req.prefix, python, True, drift, time.perf_counter() - start, lockfile)


def _record(req: EnvRequest, lockfile: Path, keep_existing: bool = False) -> None:
    """Record the env for doctor/verify/train. A no-op re-run keeps the build time (kernel-cache staleness)."""
    from aipc_env.state import EnvRecord, read_env_record, write_env_record

    old = read_env_record()
    if keep_existing and old and old.prefix == str(req.prefix) and old.pair == req.pair.id:
        return
    write_env_record(EnvRecord(prefix=str(req.prefix), python=str(env_python(req.prefix)), pair=req.pair.id,
                               platform=req.platform, built_at=_now(), lockfile=str(lockfile)))

