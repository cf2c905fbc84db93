"""What a model folder is, from its identity, never its path: a real model, the tiny random pipeline, or the trained
tiny teacher. A tiny pipeline built here (wherever it was saved) carries its mark file; the trained teacher's mark
records its training. Torch-free: the config check reads it."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from aipc_env.core.fileio import read_json
from aipc_env.core.runfolder import TINY_MARK
from aipc_env.errors import InputError

__all__ = ["is_tiny_random", "is_tiny_trained", "read_mark", "tiny_kind"]


def read_mark(path: Path) -> dict[str, Any] | None:
    """The tiny mark's content; {} when the mark is there but unreadable (still a tiny model); None without one."""
    mark = Path(path) / TINY_MARK
    if not mark.is_file():
        return None
    try:
        data = read_json(mark, "tiny model mark")
    except InputError:
        return {}
    return data if isinstance(data, dict) else {}


def tiny_kind(path: Path) -> Literal["random", "trained"] | None:
    """None for a real model; an unreadable mark, or one without a training record, counts as random (nothing is
    judged on it)."""
    mark = read_mark(path)
    if mark is None:
        return None
    return "trained" if isinstance(mark.get("trained"), dict) else "random"


def is_tiny_random(path: Path) -> bool:
    return tiny_kind(path) == "random"


def is_tiny_trained(path: Path) -> bool:
    return tiny_kind(path) == "trained"
