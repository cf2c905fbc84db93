"""Where aipc-env keeps its data: the matrix, manifest and locks (a checkout, or the copy the installed wheel
ships) and per-user state."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

__all__ = [
    "DataHome",
    "cache_dir",
    "checkout_root",
    "data_dir",
    "data_home",
    "environments_dir",
    "lockfiles_dir",
    "log_path",
    "matrix_path",
    "package_root",
    "project_root",
    "state_dir",
]

_MARKER = Path("environments") / "matrix.yaml"
DataSource = Literal["AIPC_ENV_HOME", "checkout", "shipped"]


@dataclass(frozen=True)
class DataHome:
    """Where the matrix, the wheel manifest, the layer specs and the shipped locks are read from."""

    root: Path
    """The folder holding environments/ and lockfiles/."""
    source: DataSource

    def describe(self) -> str:
        return {
            "AIPC_ENV_HOME": f"AIPC_ENV_HOME={self.root}",
            "checkout": f"the aipc-env checkout {self.root}",
            "shipped": f"the copy shipped with the tool ({self.root})",
        }[self.source]


def _is_checkout(folder: Path) -> bool:
    """A clone of aipc-env: its matrix, and a pyproject.toml naming the project."""
    if not (folder / _MARKER).is_file():
        return False
    try:
        head = (folder / "pyproject.toml").read_text(encoding="utf-8", errors="replace")[:4000]
    except OSError:
        return False
    return 'name = "aipc-env"' in head


def data_home() -> DataHome:
    """The one lookup of aipc-env's data, first match wins (a command's explicit flag, e.g. --matrix or
    --lock-root, is applied by the command before this): $AIPC_ENV_HOME; a checkout found from the current folder
    upward; the checkout this package runs from (an editable install); the copy the installed wheel ships."""
    override = os.environ.get("AIPC_ENV_HOME")
    if override:
        return DataHome(Path(override), "AIPC_ENV_HOME")
    try:
        here = Path.cwd().resolve()
    except OSError:  # the current folder was deleted
        here = None
    for folder in [here, *here.parents] if here else []:
        if _is_checkout(folder):
            return DataHome(folder, "checkout")
    package = Path(__file__).resolve().parent
    for folder in package.parents:
        if _is_checkout(folder):
            return DataHome(folder, "checkout")
    return DataHome(package, "shipped")


def project_root() -> Path:
    """The folder aipc-env's data is read from (see data_home)."""
    return data_home().root


def checkout_root() -> Path | None:
    """A source checkout of aipc-env (to build its wheel from), or None for an installed tool's shipped copy."""
    home = data_home()
    return home.root if home.source != "shipped" and (home.root / "pyproject.toml").is_file() else None


def matrix_path() -> Path:
    """environments/matrix.yaml of the data home."""
    return project_root() / _MARKER


def environments_dir() -> Path:
    """The folder of the matrix, the wheel manifest and the layer specs."""
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
    """lockfiles/ of the data home (one folder per pair)."""
    return project_root() / "lockfiles"


def log_path(name: str) -> Path:
    """A new log of a step aipc-env runs itself (lock, env, bundle, container): <cache>/logs/<name>-<time>.log."""
    import datetime as _dt

    return cache_dir() / "logs" / f"{name}-{_dt.datetime.now():%Y%m%d-%H%M%S}.log"
