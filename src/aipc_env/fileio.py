"""Atomic writes and careful reads: no half-written file or folder is ever left behind, and a bad path or
encoding is a named input error, never a traceback."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from aipc_env.errors import InputError

__all__ = ["atomic_dir", "atomic_write_bytes", "atomic_write_text", "decode_text", "default_mode", "read_json",
           "read_text", "read_yaml", "respect_umask", "write_json"]

_BOMS = ((b"\xef\xbb\xbf", "utf-8-sig"), (b"\xff\xfe", "utf-16"), (b"\xfe\xff", "utf-16"))


def _check_target(path: Path) -> None:
    if path.is_dir():
        raise InputError("is a folder; expected a file name to write", path=path,
                         fix="pass a file path (e.g. add a file name to the folder)")
    parent = path.parent
    probe = parent
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        raise InputError(f"cannot write here: {probe} is a file, not a folder", path=path,
                         fix="choose a path inside a folder")


def default_mode(*, folder: bool = False) -> int:
    """What a new file (0666) or folder (0777) gets under the current umask."""
    umask = os.umask(0)
    os.umask(umask)
    return (0o777 if folder else 0o666) & ~umask


def respect_umask(path: str | Path) -> None:
    """Give files and folders that a library wrote through a private temp file (0600 / 0700, e.g. safetensors'
    save_file) the modes a plain open() would: the umask default. Recurses into folders."""
    path = Path(path)
    items = [path, *path.rglob("*")] if path.is_dir() else [path]
    for item in items:
        if item.is_symlink():
            continue
        with contextlib.suppress(OSError):
            os.chmod(item, default_mode(folder=item.is_dir()))


def atomic_write_bytes(path: str | Path, data: bytes, *, mode: int | None = None) -> None:
    """Write to a temporary file in the same folder, fsync, then rename over the target. The target keeps its
    permission bits (or gets `mode`, else the umask default) — never the temp file's 0600."""
    path = Path(path)
    if path.is_symlink():  # edit the file the link points at; the link stays a link
        path = Path(os.path.realpath(path))
    _check_target(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise InputError(f"cannot write: {exc.strerror}", path=path, fix="check the folder exists and is writable") \
            from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        try:
            old = path.stat()
        except FileNotFoundError:
            old = None
        if mode is None:
            mode = stat.S_IMODE(old.st_mode) if old is not None else default_mode()
        os.chmod(tmp, mode)
        if old is not None and hasattr(os, "chown"):
            with contextlib.suppress(OSError):  # keep the owner where we may (root editing a user's file)
                os.chown(tmp, old.st_uid, old.st_gid)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | Path, text: str, *, newline: str = "\n", mode: int | None = None) -> None:
    atomic_write_bytes(path, text.replace("\n", newline).encode("utf-8"), mode=mode)


def write_json(path: str | Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=False, ensure_ascii=False) + "\n")


@contextlib.contextmanager
def atomic_dir(dst: str | Path) -> Iterator[Path]:
    """Yield a hidden temporary folder beside dst; on success it replaces dst, on any error it is removed."""
    dst = Path(dst)
    if dst.exists() and not dst.is_dir():
        raise InputError("exists and is a file; expected a folder", path=dst, fix="choose another output folder")
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dst.name}-partial-", dir=dst.parent))
    try:
        yield tmp
        old = None
        if dst.exists():
            old = dst.with_name(f".{dst.name}-old-{os.getpid()}")
            os.replace(dst, old)
        respect_umask(tmp)  # mkdtemp made it 0700; libraries write some files 0600
        os.replace(tmp, dst)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def decode_text(raw: bytes, path: str | Path, what: str) -> str:
    """UTF-8 (with or without BOM) or UTF-16 with a BOM (what PowerShell 5.1's `>` writes)."""
    for bom, encoding in _BOMS:
        if raw.startswith(bom):
            try:
                return raw.decode(encoding)
            except UnicodeDecodeError as exc:
                raise InputError(f"{what} is not valid {encoding} text ({exc.reason} at byte {exc.start})",
                                 path=path) from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        hint = ("it looks like UTF-16 without a byte-order mark" if b"\x00" in raw[:200]
                else "it looks like a Windows ANSI code page (cp1252)")
        raise InputError(f"{what} is not UTF-8 text ({exc.reason} at byte {exc.start}; {hint})", path=path,
                         fix="save it as UTF-8 (in PowerShell: Get-Content F | Set-Content -Encoding utf8 F2)") \
            from None


def read_text(path: str | Path, what: str = "file") -> str:
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise InputError(f"{what} not found", path=path, fix="check the path") from None
    except IsADirectoryError:
        raise InputError(f"{what} is a folder, expected a file", path=path) from None
    except PermissionError:
        raise InputError(f"cannot read {what}: permission denied", path=path) from None
    except OSError as exc:
        raise InputError(f"cannot read {what}: {exc.strerror}", path=path) from None
    return decode_text(raw, path, what)


def read_yaml(path: str | Path, what: str = "YAML file") -> Any:
    import yaml

    path = Path(path)
    text = read_text(path, what)
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise InputError(f"not valid YAML{where}: {problem}", path=path) from None


def read_json(path: str | Path, what: str = "JSON file") -> Any:
    path = Path(path)
    text = read_text(path, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}", path=path) from None
