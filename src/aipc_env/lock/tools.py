"""The exact command lines aipc-env runs for uv and the conda flavours (pure builders). Tests assert the command
lines; aipc_env.core.procs.run_logged executes them."""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from aipc_env.errors import AipcError

__all__ = [
    "MINIFORGE_HINT",
    "CondaTool",
    "conda_create_argv",
    "conda_lock_argv",
    "conda_render_argv",
    "find_conda_tool",
    "find_uv",
    "uv_compile_argv",
    "uv_install_argv",
    "uv_venv_argv",
]

MINIFORGE_HINT = "install Miniforge (https://conda-forge.org/download/) and open a new terminal"
CONDA_FLAVOURS = ("conda-lock", "micromamba", "mamba", "conda")


@dataclass(frozen=True)
class CondaTool:
    name: str
    path: str


def find_uv() -> str:
    found = shutil.which("uv") or shutil.which("uv", path=str(Path(sys.executable).parent))
    if not found:
        raise AipcError("uv is not installed", fix="pip install uv (nox sessions install it for you)")
    return found


def find_conda_tool(prefer: str | None = None) -> CondaTool | None:
    names = [prefer] if prefer else CONDA_FLAVOURS
    for name in names:
        path = shutil.which(name)
        if path:
            return CondaTool(name, path)
    return None


def uv_compile_argv(uv: str, project: Path, out: Path, *, python: str, platform: str, default_index: str) -> list[str]:
    """Run from the project's folder: uv applies a pyproject's [tool.uv] index settings only from the current
    folder, so the default index is also passed explicitly (else it falls back to pypi.org)."""
    uv_platform = {"win-64": "x86_64-pc-windows-msvc", "linux-64": "x86_64-unknown-linux-gnu"}[platform]
    return [
        uv,
        "pip",
        "compile",
        str(project),
        "--format",
        "pylock.toml",
        "-o",
        str(out),
        "--python-version",
        python,
        "--python-platform",
        uv_platform,
        "--default-index",
        default_index,
        "--no-header",
        "--quiet",
    ]


def uv_install_argv(uv: str, python: Path, lock: Path, *, exact: bool = True) -> list[str]:
    """Install the pip layer from a pylock: every artifact's sha256 is checked; `sync` removes extras. Files are
    copied, not hard-linked from uv's cache: an in-place edit in the env must not reach the cache, or a repair
    would put the edited file back."""
    verb = "sync" if exact else "install"
    argv = [uv, "pip", verb, "--preview-features", "pylock", "--link-mode", "copy", "--python", str(python)]
    return argv + ([str(lock)] if exact else ["-r", str(lock)])


def uv_venv_argv(uv: str, prefix: Path, base_python: str) -> list[str]:
    return [uv, "venv", "--python", base_python, "--seed", str(prefix)]


def conda_render_argv(conda_lock: str, lockfile: Path, platform: str, out_dir: Path) -> list[str]:
    """Offline: the explicit (@EXPLICIT, hashed URLs) list of one platform from a conda-lock file."""
    return [
        conda_lock,
        "render",
        "--kind",
        "explicit",
        "-p",
        platform,
        "--filename-template",
        str(out_dir / "conda-{platform}.explicit.txt"),
        str(lockfile),
    ]


def conda_create_argv(
    tool: CondaTool, prefix: Path, *, lockfile: Path | None = None, explicit: Path | None = None, python: str | None = None
) -> list[str]:
    """Create the conda layer at prefix: from the lock (conda-lock install, or an explicit list for the
    others) or, unlocked, from the channel specs."""
    if tool.name == "conda-lock":
        if lockfile is None:
            raise AipcError("conda-lock needs a lockfile")
        return [tool.path, "install", "--prefix", str(prefix), str(lockfile)]
    if explicit is not None:  # the same for conda, mamba and micromamba
        return [tool.path, "create", "--yes", "--prefix", str(prefix), "--file", str(explicit)]
    if python is None:
        raise AipcError("an unlocked conda layer needs a Python version")
    return [
        tool.path,
        "create",
        "--yes",
        "--prefix",
        str(prefix),
        "--override-channels",
        "-c",
        "conda-forge",
        f"python={python}",
        "pip",
    ]


def conda_lock_argv(conda_lock: str, env_file: Path, out: Path, platforms: list[str]) -> list[str]:
    argv = [conda_lock, "lock", "--file", str(env_file), "--lockfile", str(out)]
    for p in platforms:
        argv += ["-p", p]
    return argv
