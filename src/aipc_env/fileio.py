"""Atomic writes and careful reads: no half-written file is ever left behind."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import yaml

from aipc_env.errors import InputError

__all__ = ["atomic_write_text", "atomic_write_bytes", "read_yaml", "read_json", "write_json"]


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write to a temporary file in the same folder, fsync, then rename over the target."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def atomic_write_text(path: str | Path, text: str, *, newline: str = "\n") -> None:
    atomic_write_bytes(path, text.replace("\n", newline).encode("utf-8"))


def write_json(path: str | Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=False) + "\n")


def _read_text(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{what} not found", path=path, fix="check the path") from None
    except IsADirectoryError:
        raise InputError(f"{what} is a directory, expected a file", path=path) from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{what} is not UTF-8 text ({exc.reason} at byte {exc.start})", path=path) from None
    except OSError as exc:
        raise InputError(f"cannot read {what}: {exc.strerror}", path=path) from None


def read_yaml(path: str | Path, what: str = "YAML file") -> Any:
    path = Path(path)
    text = _read_text(path, what)
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise InputError(f"not valid YAML{where}: {problem}", path=path) from None


def read_json(path: str | Path, what: str = "JSON file") -> Any:
    path = Path(path)
    text = _read_text(path, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}", path=path) from None
