"""The qflux env: a venv with the clone's requirements as `patch-requirements` makes them, plus the pair's torch
from this machine's torch source (the XPU build on an Intel GPU machine; the CPU build elsewhere). Built once per
requirements digest into the aipc-env cache, with uv. Used to run the clone's own loader and the smoke run."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

from aipc_env.errors import AipcError, ExitCode
from aipc_env.matrix import Pair

__all__ = ["qflux_requirements", "ensure_qflux_env", "env_python"]

STAMP = ".aipc-qflux-env"


def qflux_requirements(clone: Path, pair: Pair, torch_requirement: str, *, torchvision: bool) -> str:
    """The clone's requirements.txt after patch-requirements, with the XPU torch block replaced by the torch this
    machine installs (its source arguments are given to the installer, not written here)."""
    from aipc_env.fileio import decode_text
    from aipc_env.trainenv.requirements import edit_requirements

    path = Path(clone) / "requirements.txt"
    text = decode_text(path.read_bytes(), path, "requirements.txt")
    edited = edit_requirements(text, pair=pair, xpu_index="https://download.pytorch.org/whl/xpu").text
    keep = [line for line in edited.splitlines()
            if not line.startswith(("--extra-index-url", "torch==", "torchvision=="))]
    build = torch_requirement.rsplit("+", 1)[-1]
    keep.append(f"{torch_requirement}  # aipc-env: this machine's torch source")
    if torchvision and pair.torchvision:
        keep.append(f"torchvision=={pair.torchvision}+{build}")
    return "\n".join(keep) + "\n"


def env_python(prefix: Path) -> Path:
    return prefix / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")


def ensure_qflux_env(clone: Path, pair: Pair, *, root: Path | None = None, log=print) -> Path:
    """The qflux env's interpreter, building the env when its requirements changed."""
    import os

    from aipc_env.lock.tools import find_uv
    from aipc_env.paths import cache_dir
    from aipc_env.procs import run_logged
    from aipc_env.trainenv.torch_source import detect

    source = detect(pair.newest_torch)
    wheels = os.environ.get("AIPC_ENV_TORCH_WHEELS")
    torchvision = not wheels or any(Path(wheels).glob("torchvision-*.whl"))
    text = qflux_requirements(clone, pair, source.requirement, torchvision=torchvision)
    digest = hashlib.sha256((text + " ".join(source.args) + sys.version).encode()).hexdigest()[:16]
    prefix = (root or cache_dir() / "qflux-envs") / digest
    python = env_python(prefix)
    if (prefix / STAMP).is_file() and python.is_file():
        return python
    prefix.mkdir(parents=True, exist_ok=True)
    req = prefix / "requirements-qflux.txt"
    req.write_text(text, encoding="utf-8")
    uv = find_uv()
    log(f"qflux env: building {prefix} ({source.describe()})")
    logfile = prefix / "build.log"
    fix = "check the network (PyPI) and the torch source (AIPC_ENV_TORCH_WHEELS / AIPC_ENV_TORCH_INDEX); log " \
          f"{logfile}"
    try:
        run_logged([uv, "venv", "--allow-existing", "-q", "-p", sys.executable, str(prefix)], logfile, echo=False,
                   fix=fix)
        run_logged([uv, "pip", "install", "--python", str(python), "-r", str(req), *source.args], logfile,
                   echo=False, fix=fix)
    except AipcError as exc:
        raise AipcError(f"the qflux env could not be built: {exc.message}", path=req, exit_code=ExitCode.PROBLEMS,
                        fix=exc.fix) from None
    (prefix / STAMP).write_text(digest)
    return python
