"""The qflux env: a venv with the clone's requirements as `patch-requirements` makes them, plus the pair's torch
from this machine's torch source (the XPU build on an Intel GPU machine; the CPU build elsewhere). Built once per
requirements digest into the aipc-env cache, with uv, by the run service. Used to run the clone's own loader and
the smoke run."""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Callable
from pathlib import Path

from aipc_env.errors import AipcError, ExitCode
from aipc_env.matrix import Pair
from aipc_env.trainenv.envs import env_python
from aipc_env.trainenv.record import EnvRecord
from aipc_env.trainenv.torch_source import torch_source_fix, uv_environment

__all__ = ["ensure_qflux_env", "qflux_requirements", "record_path"]

STAMP = ".aipc-qflux-env"
RECORD = ".aipc-env.json"


def qflux_requirements(clone: Path, pair: Pair, torch_requirement: str, *, torchvision: bool) -> str:
    """The clone's requirements.txt after patch-requirements, with the XPU torch block replaced by the torch this
    machine installs (its source arguments are given to the installer, not written here)."""
    from aipc_env.core.fileio import decode_text
    from aipc_env.trainenv.requirements import edit_requirements

    path = Path(clone) / "requirements.txt"
    text = decode_text(path.read_bytes(), path, "requirements.txt")
    edited = edit_requirements(text, pair=pair, xpu_index="https://download.pytorch.org/whl/xpu").text
    keep = [line for line in edited.splitlines() if not line.startswith(("--extra-index-url", "torch==", "torchvision=="))]
    build = torch_requirement.rsplit("+", 1)[-1]
    keep.append(f"{torch_requirement}  # aipc-env: this machine's torch source")
    if torchvision and pair.newest_torchvision:
        keep.append(f"torchvision=={pair.torchvision_version(pair.newest_torch, build)}")
    return "\n".join(keep) + "\n"


def record_path(prefix: Path) -> Path:
    return prefix / RECORD


def ensure_qflux_env(
    clone: Path, pair: Pair, *, root: Path | None = None, log: Callable[[str], None] = print
) -> tuple[Path, EnvRecord]:
    """The qflux env (its prefix and record), built when its requirements changed. The record names the pair only
    when the env holds the pair's XPU torch (a CPU build is no XPU env: nothing to activate)."""
    import os

    from aipc_env.core.fileio import atomic_write_text
    from aipc_env.core.formats import load_versioned, timestamp, write_model
    from aipc_env.core.platforms import current_platform
    from aipc_env.core.procs import run_logged
    from aipc_env.lock.tools import find_uv
    from aipc_env.paths import cache_dir
    from aipc_env.trainenv.torch_source import detect

    source = detect(pair.newest_torch)
    wheels = os.environ.get("AIPC_ENV_TORCH_WHEELS")
    torchvision = not wheels or any(Path(wheels).glob("torchvision-*.whl"))
    text = qflux_requirements(clone, pair, source.requirement, torchvision=torchvision)
    digest = hashlib.sha256((text + " ".join(source.args) + sys.version).encode()).hexdigest()[:16]
    prefix = (root or cache_dir() / "qflux-envs") / digest
    python = env_python(prefix)
    if (prefix / STAMP).is_file() and python.is_file() and record_path(prefix).is_file():
        return prefix, load_versioned(EnvRecord, record_path(prefix))
    prefix.mkdir(parents=True, exist_ok=True)
    req = prefix / "requirements-qflux.txt"
    atomic_write_text(req, text)
    uv = find_uv()
    logfile = prefix / "build.log"
    count = sum(1 for line in text.splitlines() if line.strip() and not line.lstrip().startswith(("#", "-")))
    log(f"qflux env: building {prefix} for {pair.id} ({source.describe()})")
    log(
        f"qflux env: installing {count} requirements with uv (about 2 GB and a few minutes the first time; progress in {logfile})"
    )
    fix = torch_source_fix(logfile)
    try:
        run_logged(
            [uv, "venv", "--allow-existing", "-q", "-p", sys.executable, str(prefix)],
            logfile,
            echo=False,
            fix=fix,
            env=uv_environment(),
        )
        run_logged(
            [uv, "pip", "install", "--python", str(python), "-r", str(req), *source.args],
            logfile,
            echo=False,
            fix=fix,
            env=uv_environment(),
        )
    except AipcError as exc:
        raise AipcError(
            f"the qflux env could not be built: {exc.message}", path=req, exit_code=ExitCode.PROBLEMS, fix=exc.fix
        ) from None
    record = EnvRecord(
        prefix=str(prefix),
        python=str(python),
        pair=pair.id if source.build == "xpu" else None,
        platform=current_platform(),
        built_at=timestamp(),
    )
    write_model(record_path(prefix), record)
    atomic_write_text(prefix / STAMP, digest)
    log(f"qflux env: ready ({python})")
    return prefix, record
