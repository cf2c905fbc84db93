"""Build, repair and check a training env from its pair's lock (`nox -s env`).

Never a half-built prefix: a fresh build that fails is removed again; a repair of an existing env first takes a
hard-link snapshot of its site-packages (cheap, no copy of the data) and puts it back when the repair fails.
uv also verifies every artifact's sha256 before it changes anything.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal

from packaging.utils import canonicalize_name

from aipc_env.core.fileio import atomic_write_text, parse_json
from aipc_env.core.formats import VersionedModel, load_versioned, timestamp, write_model
from aipc_env.core.interrupts import checkpoint
from aipc_env.core.invocation import command
from aipc_env.core.platforms import Platform
from aipc_env.core.procs import ProbeFailed, run_capture, run_logged
from aipc_env.errors import AipcError, InputError
from aipc_env.facts.gather import inspect_env, modified_files
from aipc_env.lock import specs
from aipc_env.lock.conda_layer import layer_for
from aipc_env.lock.lock import Indexes, compile_pylock, tool_version
from aipc_env.lock.lockfile import (
    LockMeta,
    check_pylock,
    meta_path,
    pylock_path,
    read_meta,
    read_pylock,
)
from aipc_env.lock.tools import (
    MINIFORGE_HINT,
    CondaTool,
    conda_create_argv,
    conda_render_argv,
    find_uv,
    uv_install_argv,
    uv_venv_argv,
)
from aipc_env.matrix import Pair
from aipc_env.trainenv.drift import DriftItem, Manifest, ManifestPackage, compute_drift, locked_packages
from aipc_env.trainenv.envs import env_python
from aipc_env.trainenv.layers import CondaOwned, conda_owned, kept_for_conda, pip_layer_lock, pip_layer_of
from aipc_env.trainenv.record import EnvRecord, read_env_record, write_env_record

if TYPE_CHECKING:
    from aipc_env.lock.coremeta import CoreMetadata
    from aipc_env.lock.lockfile import PylockArtifact, PylockPackage

__all__ = [
    "MANIFEST_NAME",
    "EnvBuildReport",
    "EnvRequest",
    "EnvResult",
    "build_env",
    "check_env",
    "env_python_version",
    "install_offline",
    "install_pip_layer",
    "lock_pythons",
]

MANIFEST_NAME = "aipc-env-manifest.json"


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
    python: str | None = None
    """The env's Python minor (X.Y) for a conda interpreter layer: one the lock covers (default: the lock's own).
    With base_python the interpreter's own version decides."""
    conda_tool: CondaTool | None = None
    unlocked: bool = False
    common: list[str] | None = None
    """The common pip layer (default: environments/pip-layer.txt)."""
    accept_metadata_drift: bool = False
    """Build even when an XPU wheel's real METADATA differs from what the lock stands on (recorded)."""
    read_metadata: Callable[[PylockPackage, PylockArtifact], CoreMetadata] | None = None
    """How a locked wheel's METADATA is read (default: from its URL; tests pass their own index's reader)."""


@dataclass
class EnvResult:
    prefix: Path
    python: Path
    changed: bool
    drift_before: list[DriftItem]
    seconds: float
    lockfile: Path


def _read_manifest(prefix: Path) -> Manifest | None:
    path = prefix / MANIFEST_NAME
    return load_versioned(Manifest, path) if path.is_file() else None


def check_env(
    prefix: Path, lockfile: Path, platform: Platform, *, deep: bool = True, interpreter: bool = False
) -> list[DriftItem]:
    """Compare an env with its lock without changing anything. `deep` also hashes the installed files of every
    locked distribution against their RECORD; `interpreter` also compares its Python with the lock's conda layer
    (where the layer covers that Python)."""
    python = env_python(prefix)
    if not python.is_file():
        raise InputError(f"no env at {prefix}", key="--prefix", fix=f"build it: {command('env')}")
    env = inspect_env(prefix, python, timeout=60.0)
    if env.error:
        raise AipcError(env.error, path=prefix)
    lock = pip_layer_of(read_pylock(lockfile), conda_owned(prefix))  # conda's distributions are the conda layer's
    modified = None
    if deep:
        names = set(locked_packages(lock, platform, env.python_version or specs.DEFAULT_PYTHON))
        modified = modified_files(env.site_packages, names)
    drift = compute_drift(lock, env.distributions, _read_manifest(prefix), platform, env.python_version or "", modified)
    if interpreter and env.python_version:
        from aipc_env.lock.conda_layer import interpreter_drift

        differs = interpreter_drift(lockfile.parent, platform, env.python_version)
        if differs:
            drift.append(DriftItem(kind="interpreter", name="python", locked=differs[0], installed=differs[1]))
    return drift


def _interpreter_layer(req: EnvRequest, lockfile_conda: Path | None, python: str) -> None:
    if req.base_python:
        run_logged(uv_venv_argv(find_uv(), req.prefix, req.base_python), req.log)
        return
    tool = req.conda_tool
    if tool is None:
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
            # conda-lock's own failure is a Python traceback: it goes to the log, the screen gets the named error
            run_logged(
                conda_render_argv(conda_lock, lockfile_conda, req.platform, Path(tmp)),
                req.log,
                echo=False,
                fix=f"conda-lock could not render {lockfile_conda} (its output is in the log): check it with "
                "`aipc-env lock check`, or re-assemble the conda layer (`python scripts/assemble_conda_layer.py` in a checkout)",
            )
            explicit = Path(tmp) / f"conda-{req.platform}.explicit.txt"
            run_logged(conda_create_argv(tool, req.prefix, explicit=explicit), req.log)


def _record_unlocked(req: EnvRequest, python: str) -> Path:
    """--unlocked: resolve from the specs for this machine and keep the result as this pair's lock."""
    uv = find_uv()
    lock_dir = req.lock_root / req.pair.id
    with tempfile.TemporaryDirectory() as tmp:
        out = compile_pylock(
            uv, req.pair, specs.pip_layer(req.pair, req.common), req.platform, python, req.indexes, Path(tmp), req.log
        )
        problems = check_pylock(read_pylock(out), out, req.pair, req.platform)
        if problems:
            raise AipcError("the resolved packages do not match the matrix row:\n  " + "\n  ".join(problems))
        lock_dir.mkdir(parents=True, exist_ok=True)
        target = pylock_path(lock_dir, req.platform)
        atomic_write_text(target, out.read_text(encoding="utf-8"))
    meta = LockMeta(
        pair=req.pair.id,
        matrix_row_hash=specs.row_hash(req.pair),
        python=python,
        platforms=[req.platform],
        pypi_url=req.indexes.pypi_url,
        xpu_index_url=req.indexes.xpu_index_url,
        tools={"uv": tool_version([uv, "--version"])},
        created_at=timestamp(),
        source="env --unlocked (recorded on a golden machine)",
    )
    write_model(meta_path(lock_dir), meta)
    return target


def _python_version(base_python: str) -> str:
    try:
        out = run_capture([base_python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], timeout=60)
    except ProbeFailed as exc:
        raise InputError(f"cannot run the base Python: {exc}", key="--base-python") from None
    return out.stdout.strip()


def lock_pythons(lock_dir: Path) -> list[str]:
    """The Python minors a lock folder's pylocks cover (lock-meta `pythons`, else its one `python`; empty: no
    lock-meta, nothing to check against)."""
    if not meta_path(lock_dir).is_file():
        return []
    meta = read_meta(lock_dir)
    return list(meta.pythons) or [meta.python]


def env_python_version(req: EnvRequest) -> str:
    """The env's Python minor: the base interpreter's own, else the one asked for, else the lock's, else the pair's."""
    if req.base_python:
        return _python_version(req.base_python)
    if req.python:
        return req.python
    lock_dir = req.lock_root / req.pair.id
    return read_meta(lock_dir).python if meta_path(lock_dir).is_file() else specs.pair_python(req.pair)


def _validate_lock(req: EnvRequest, lockfile: Path, python_version: str) -> None:
    lock_dir = lockfile.parent
    if not lockfile.is_file():
        raise AipcError(
            f"no lockfile for {req.pair.id} on {req.platform} ({lockfile})",
            fix=f"produce it on a connected machine: nox -s lock -- --pair {req.pair.id}; or build "
            f"from the specs and record this machine's lock: nox -s env -- --pair {req.pair.id} --unlocked",
        )
    covered = lock_pythons(lock_dir)
    if covered and python_version not in covered:
        raise AipcError(
            f"the {req.pair.id} lock covers Python {', '.join(covered)}, the env's interpreter is {python_version}",
            path=lockfile,
            fix=f"use a Python {' or '.join(covered)} interpreter, or re-lock: nox -s lock -- --pair "
            f"{req.pair.id} --python {python_version}",
        )
    problems = check_pylock(read_pylock(lockfile, req.platform), lockfile, req.pair, req.platform)
    if problems:
        raise AipcError(
            "the lockfile does not match the matrix row:\n  " + "\n  ".join(problems),
            path=lockfile,
            fix="re-lock: nox -s lock -- --pair " + req.pair.id,
        )


def building_mark(prefix: Path) -> Path:
    """Beside a prefix while aipc-env creates it (not inside: venv and conda refuse a folder that is not empty): a
    prefix whose mark is still there after a crash is aipc-env's own half-built env, which the next run removes."""
    return prefix.with_name(f".{prefix.name}.aipc-env-building")


SNAPSHOT_SUFFIX = ".aipc-snapshot"


def _snapshots(prefix: Path) -> list[Path]:
    return [
        p
        for pattern in ("lib/python*/.*" + SNAPSHOT_SUFFIX, "Lib/.*" + SNAPSHOT_SUFFIX)
        for p in prefix.glob(pattern)
        if p.is_dir()
    ]


def recover_interrupted(prefix: Path) -> list[str]:
    """Finish what an interrupted run (a crash, a power cut: no handler ran) left: a half-built new prefix is
    removed; a repair's site-packages snapshot is put back, so the env is as it was before that repair (the drift
    check that follows repairs it properly). Returns what was done."""
    done: list[str] = []
    mark = building_mark(prefix)
    if mark.exists():
        if prefix.exists():
            shutil.rmtree(prefix)
        mark.unlink()
        return [f"removed the half-built env {prefix} an interrupted build left"]
    for snap in _snapshots(prefix):
        site = snap.with_name(snap.name[1 : -len(SNAPSHOT_SUFFIX)])
        if site.exists():
            shutil.rmtree(site)
        os.replace(snap, site)
        done.append(f"restored {site} from the snapshot an interrupted repair left")
    return done


def _tell(log: Path, lines: list[str]) -> None:
    for line in lines:
        print(f"aipc-env: {line}", file=sys.stderr)
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("a", encoding="utf-8") as fh:
            fh.write(line + "\n")


@contextlib.contextmanager
def _rollback(prefix: Path) -> Iterator[None]:
    """Undo a failed or interrupted build: remove a prefix that did not exist; restore a hard-link snapshot of an
    existing env's site-packages (the pip layer is all a repair touches). What a killed process cannot undo here,
    recover_interrupted undoes on the next run."""
    existed = prefix.exists()
    snapshots: list[tuple[Path, Path]] = []
    if not existed:
        prefix.parent.mkdir(parents=True, exist_ok=True)
        building_mark(prefix).write_text(
            f"aipc-env is building {prefix.name}; a new run removes it if it stopped\n", encoding="utf-8"
        )
    elif env_python(prefix).is_file():
        env = inspect_env(prefix, env_python(prefix), timeout=60.0)
        for site in env.site_packages:
            site_path = Path(site)
            if site_path.is_dir() and prefix.resolve() in site_path.resolve().parents:
                snap = site_path.with_name(f".{site_path.name}{SNAPSHOT_SUFFIX}")
                partial = snap.with_name(snap.name + ".partial")
                shutil.rmtree(partial, ignore_errors=True)
                shutil.copytree(site_path, partial, symlinks=True, copy_function=_link_or_copy)
                os.replace(partial, snap)  # a snapshot exists only once it is complete
                snapshots.append((site_path, snap))
        checkpoint("env:after-snapshot")
    try:
        yield
        checkpoint("env:before-commit")
    except BaseException:
        if not existed:
            shutil.rmtree(prefix, ignore_errors=True)
            building_mark(prefix).unlink(missing_ok=True)
        for site_path, snap in snapshots:
            shutil.rmtree(site_path, ignore_errors=True)
            checkpoint("env:rollback-after-remove")
            os.replace(snap, site_path)
        raise
    else:
        if not existed:
            building_mark(prefix).unlink()
        for _, snap in snapshots:
            shutil.rmtree(snap, ignore_errors=True)


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def build_env(req: EnvRequest) -> EnvResult:
    start = time.perf_counter()
    lock_dir = req.lock_root / req.pair.id
    lockfile = pylock_path(lock_dir, req.platform)
    python_version = env_python_version(req)
    _tell(req.log, recover_interrupted(req.prefix))
    drift: list[DriftItem] = []
    if not req.unlocked:
        _validate_lock(req, lockfile, python_version)
        if env_python(req.prefix).is_file():
            drift = check_env(req.prefix, lockfile, req.platform)
            if not drift:
                _record(req, lockfile, keep_existing=True)
                return EnvResult(req.prefix, env_python(req.prefix), False, [], time.perf_counter() - start, lockfile)
    elif req.prefix.exists() and any(req.prefix.iterdir()) and not env_python(req.prefix).is_file():
        raise InputError(
            "the prefix exists and is not an env", path=req.prefix, key="--prefix", fix="choose an empty or new folder"
        )
    accepted = [] if req.unlocked else _check_wheel_metadata(req, lockfile, python_version)
    with _rollback(req.prefix):
        if not env_python(req.prefix).is_file():
            layer, why = layer_for(lock_dir, req.platform, python_version) if not req.base_python else (None, "")
            if why:
                _tell(req.log, [why])
            _interpreter_layer(req, layer, python_version)
            checkpoint("env:after-interpreter")
        if req.unlocked:
            lockfile = _record_unlocked(req, python_version)
        python = env_python(req.prefix)
        owned = install_pip_layer(req.prefix, python, lockfile, req.platform, python_version, req.log, drift)
        checkpoint("env:after-install")
        lock = pip_layer_of(read_pylock(lockfile), owned)
        manifest = Manifest(
            pair=req.pair.id,
            platform=req.platform,
            lockfile=str(lockfile),
            installed_at=timestamp(),
            packages={
                n: ManifestPackage(version=v, sha256=s)
                for n, (v, s) in locked_packages(lock, req.platform, python_version).items()
            },
        )
        write_model(req.prefix / MANIFEST_NAME, manifest)
    _record(req, lockfile, accepted=accepted)
    return EnvResult(req.prefix, python, True, drift, time.perf_counter() - start, lockfile)


def install_pip_layer(
    prefix: Path, python: Path, lockfile: Path, platform: Platform, python_version: str, log: Path, drift: list[DriftItem]
) -> dict[str, CondaOwned]:
    """Install the pip layer as the build does: `uv pip sync` of the lock where conda owns none of its packages, else
    the lock without conda's distributions installed (`uv pip install`) and what neither layer holds removed; conda's
    files are never removed or replaced. Returns conda's distributions."""
    from aipc_env.lock.wheels import load_wheel_manifest

    uv = find_uv()
    owned = conda_owned(prefix)
    _tell(log, kept_for_conda(read_pylock(lockfile), platform, python_version, load_wheel_manifest(), owned))
    with tempfile.TemporaryDirectory() as tmp:
        layer = pip_layer_lock(lockfile, owned, Path(tmp) / "pylock.pip-layer.toml")
        argv = uv_install_argv(uv, python, layer, exact=layer == lockfile)
        for name in (d.name for d in drift if d.kind == "modified"):
            argv += ["--reinstall-package", name]
        run_logged(argv, log)
    if owned:
        locked = set(locked_packages(read_pylock(lockfile), platform, python_version))
        listed = run_capture([uv, "pip", "list", "--format", "json", "--python", str(python)], timeout=120).stdout
        extra = sorted(
            n
            for n in (canonicalize_name(d["name"]) for d in parse_json(listed, "uv pip list", "uv pip list output"))
            if n not in locked and n not in owned
        )
        if extra:
            run_logged([uv, "pip", "uninstall", "--python", str(python), *extra], log)
    return owned


def _check_wheel_metadata(req: EnvRequest, lockfile: Path, python: str) -> list[str]:
    """Read the real METADATA of the XPU wheels the lock installs here and close the lock over it, before anything is
    installed: a difference stops the build (both values named), unless --accept-metadata-drift, when it is told,
    logged and returned for the env record."""
    from aipc_env.lock.simple_index import MetadataCache
    from aipc_env.lock.wheelcheck import check_xpu_metadata, read_wheel_metadata
    from aipc_env.lock.wheels import load_wheel_manifest
    from aipc_env.paths import cache_dir

    read = req.read_metadata or read_wheel_metadata(MetadataCache(cache_dir() / "core-metadata"))
    problems = check_xpu_metadata(read_pylock(lockfile), req.platform, python, load_wheel_manifest(), read).problems
    if not problems:
        return []
    if req.accept_metadata_drift:
        _tell(req.log, [f"accepted (--accept-metadata-drift): {p}" for p in problems])
        return problems
    raise AipcError(
        f"the real METADATA of the {req.pair.id} XPU wheels differs from what the lock stands on; "
        "nothing was installed:\n  " + "\n  ".join(problems),
        path=lockfile,
        fix="if the index changed the wheels, correct environments/xpu-wheels.yaml with the source and "
        f"re-lock (nox -s lock -- --pair {req.pair.id}); to build anyway: nox -s env -- --pair "
        f"{req.pair.id} --accept-metadata-drift (recorded in the env record)",
    )


def _record(req: EnvRequest, lockfile: Path, keep_existing: bool = False, accepted: list[str] | None = None) -> None:
    """Record the env for doctor/verify/train. A no-op re-run keeps the build time (kernel-cache staleness)."""
    old = read_env_record()
    if keep_existing and old and old.prefix == str(req.prefix) and old.pair == req.pair.id:
        return
    write_env_record(
        EnvRecord(
            prefix=str(req.prefix),
            python=str(env_python(req.prefix)),
            pair=req.pair.id,
            platform=req.platform,
            built_at=timestamp(),
            lockfile=str(lockfile),
            accepted_metadata_drift=accepted or [],
        )
    )


class EnvBuildReport(VersionedModel):
    """`aipc-env env --json` (a build or a repair)."""

    FORMAT: ClassVar[str] = "env build report"
    schema_version: Literal[1] = 1
    pair: str
    why: str
    prefix: str
    lockfile: str
    changed: bool
    repaired: list[DriftItem]
    seconds: float
    log: str


def install_offline(
    wheels: Path, requirements: Path, lockfile: Path, *, pair: str, platform: Platform, prefix: Path, base_python: str, log: Path
) -> EnvResult:
    """Build the env from a folder of hash-pinned wheels with no network (an offline bundle, after
    fleet.bundle_check.verify_bundle proved it intact): the interpreter layer is a venv of `base_python`, the pip
    layer `requirements` (every line hash-pinned), the record `lockfile`'s packages."""
    from aipc_env.matrix import load_matrix

    start = time.perf_counter()
    _tell(log, recover_interrupted(prefix))
    if env_python(prefix).is_file():
        raise InputError(
            "an env already exists here; a bundle installs into a new prefix",
            path=prefix,
            key="--prefix",
            fix="choose a new --prefix, or check it: aipc-env env --check --bundle DIR",
        )
    uv = find_uv()
    with _rollback(prefix):
        run_logged([uv, "venv", "--offline", "--python", base_python, str(prefix)], log)
        python = env_python(prefix)
        run_logged(
            [
                uv,
                "pip",
                "install",
                "--offline",
                "--no-index",
                "--find-links",
                str(wheels),
                "--require-hashes",
                "--no-deps",
                "--link-mode",
                "copy",
                "--python",
                str(python),
                "-r",
                str(requirements),
            ],
            log,
        )
        version = _python_version(str(python))
        lock = read_pylock(lockfile)
        packages = {n: ManifestPackage(version=v, sha256=s) for n, (v, s) in locked_packages(lock, platform, version).items()}
        write_model(
            prefix / MANIFEST_NAME,
            Manifest(pair=pair, platform=platform, lockfile=str(lockfile), installed_at=timestamp(), packages=packages),
        )
    known = load_matrix().by_id.get(pair)
    write_env_record(
        EnvRecord(
            prefix=str(prefix),
            python=str(env_python(prefix)),
            pair=known.id if known else None,
            platform=platform,
            built_at=timestamp(),
            lockfile=str(lockfile),
        )
    )
    return EnvResult(prefix, env_python(prefix), True, [], time.perf_counter() - start, lockfile)
