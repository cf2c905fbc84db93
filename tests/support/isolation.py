"""The one way a test gives a process its own per-user folders: `isolated_env` builds the environment of every
subprocess that starts aipc-env with an environment of its own (the tool itself, nox, pipx, the README's commands,
Ansible hosts, Wine, container engines); `tool_dirs` names aipc-env's own folders under a base folder (conftest.py
sets them for the whole run and for each test). The guard that the real folders stay unchanged is
tests/support/user_folders.py."""

from __future__ import annotations

import os
from pathlib import Path

TOOL_DIRS = {"AIPC_ENV_DATA_DIR": "data", "AIPC_ENV_STATE_DIR": "state", "AIPC_ENV_CACHE_DIR": "cache"}
"""The variables src/aipc_env/paths.py reads before the per-user defaults (aipc-env has no config folder)."""

MACHINE_SETTINGS = ("AIPC_ENV_TORCH_WHEELS", "AIPC_ENV_TORCH_INDEX")
"""aipc-env variables that say where torch comes from on this machine, not where a user's files go: a clean HOME
keeps them."""

FOREIGN_PREFIXES = ("AIPC_ENV_", "VIRTUAL_ENV", "PYTHON", "XDG_", "NOX", "CONDA", "UV_", "PIPX_")
"""What a user's fresh login would not have: aipc-env's variables (the suite's isolation among them), the test
env's virtualenv and Python settings, nox's, conda's, uv's and pipx's, and every XDG base folder (so the defaults of
aipc-env, pip, uv and pipx fall under the clean HOME)."""


def tool_dirs(base: Path) -> dict[str, str]:
    """aipc-env's data, state and cache folders under `base` (base/data, base/state, base/cache)."""
    return {name: str(base / sub) for name, sub in TOOL_DIRS.items()}


def isolated_env(base: Path, *, clean_home: bool = False, drop: tuple[str, ...] = (), **extra: str | None) -> dict[str, str]:
    """The environment for a subprocess that starts aipc-env, with every per-user folder of the tool under `base`.

    Default: this process's environment with aipc-env's data, state and cache folders set to base/data,
    base/state and base/cache (the rest, pip's and uv's caches and configuration among it, stays the machine's).
    `clean_home`: a user's fresh login instead: HOME is base/home (made here), no XDG_* variable, none of
    FOREIGN_PREFIXES but MACHINE_SETTINGS; the tool then finds its folders where it would for that user
    (base/home/.local/share/aipc-env, ...). `drop`: more variable-name prefixes to leave out. `extra`: variables to
    set last (None leaves one out), e.g. PATH or the run's shared UV_CACHE_DIR/PIP_CACHE_DIR (`warm_caches`)."""

    def kept(name: str) -> bool:
        if drop and name.startswith(drop):
            return False
        return not (clean_home and name.startswith(FOREIGN_PREFIXES)) or name in MACHINE_SETTINGS

    env = {k: v for k, v in os.environ.items() if kept(k)}
    if clean_home:
        home = base / "home"
        home.mkdir(parents=True, exist_ok=True)
        env["HOME"] = str(home)
    else:
        env.update(tool_dirs(base))
    for name, value in extra.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env
