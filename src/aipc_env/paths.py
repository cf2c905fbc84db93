"""Where aipc-env keeps its data: the project checkout (matrix, lockfiles, launchers) and per-user state."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_dir", "data_dir", "environments_dir", "lockfiles_dir", "log_path", "matrix_path", "package_root",
           "project_root", "state_dir"]

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
    """environments/matrix.yaml of the checkout; in an installed wheel (bundle, image) the copy it ships."""
    path = project_root() / _MARKER
    if path.is_file() or os.environ.get("AIPC_ENV_HOME"):
        return path
    from importlib import resources

    shipped = Path(str(resources.files("aipc_env.environments").joinpath("matrix.yaml")))
    return shipped if shipped.is_file() else path


def environments_dir() -> Path:
    """The folder of the matrix and the layer specs (checkout or shipped copy)."""
    return matrix_path().parent


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


def lockfiles_dir() -> Path:
    """The checkout's lockfiles/ (one folder per pair)."""
    return project_root() / "lockfiles"


def log_path(name: str) -> Path:
    """A new log of a step aipc-env runs itself (lock, env, bundle, container): <cache>/logs/<name>-<time>.log."""
    import datetime as _dt

    return cache_dir() / "logs" / f"{name}-{_dt.datetime.now():%Y%m%d-%H%M%S}.log"
