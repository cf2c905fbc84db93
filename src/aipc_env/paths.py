"""Where aipc-env keeps its data: the project checkout (matrix, lockfiles, launchers) and per-user state."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["project_root", "package_root", "matrix_path", "state_dir", "cache_dir", "data_dir"]

_MARKER = Path("environments") / "matrix.yaml"


def project_root() -> Path:
    """The aipc-env checkout: $AIPC_ENV_HOME, else the first parent of this package holding the matrix."""
    override = os.environ.get("AIPC_ENV_HOME")
    if override:
        return Path(override)
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / _MARKER).is_file():
            return parent
    return Path.cwd()


def matrix_path() -> Path:
    return project_root() / _MARKER


def state_dir() -> Path:
    """Per-user state (built env, last verification). $AIPC_ENV_STATE_DIR overrides (tests, fleets)."""
    override = os.environ.get("AIPC_ENV_STATE_DIR")
    if override:
        return Path(override)
    import platformdirs

    return Path(platformdirs.user_state_dir("aipc-env", appauthor=False))


def cache_dir() -> Path:
    override = os.environ.get("AIPC_ENV_CACHE_DIR")
    if override:
        return Path(override)
    import platformdirs

    return Path(platformdirs.user_cache_dir("aipc-env", appauthor=False))


def data_dir() -> Path:
    """Per-user data (runs of the built-in default). $AIPC_ENV_DATA_DIR overrides."""
    override = os.environ.get("AIPC_ENV_DATA_DIR")
    if override:
        return Path(override)
    import platformdirs

    return Path(platformdirs.user_data_dir("aipc-env", appauthor=False))


def package_root() -> Path:
    """The folder that holds the aipc_env package (put on PYTHONPATH of runs, so the training env imports this
    very aipc-env without installing it)."""
    return Path(__file__).resolve().parent.parent
