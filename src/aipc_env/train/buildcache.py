"""Build a tiny model once and keep it in the per-user cache: the one home of the rule the built-in base
(aipc_env.workers.train.tinyedit) and the tiny teacher (aipc_env.workers.distill.tinytrained21) both follow.

- key: the folder's name carries its recipe's key (`recipe_key`), and a record beside the files holds the recipe;
- lock: one build at a time per folder, across processes (a lock file beside it; a second process waits, saying
  so every 10 s, then reuses what the first built);
- atomic publish: the build writes into a temporary folder that replaces the cached one only when it finished;
- reuse: the folder is the tool's own but read as untrusted: it is reused only when its record holds this recipe
  and the sha256 of every file below it (a link, an edited or an extra file is a rebuild, never a half model).

Torch-free: the build itself is the caller's.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from aipc_env.errors import InputError

__all__ = ["LOCK_WAIT_LINE_S", "build_once", "check_cache_folder", "folder_digests", "is_current", "recipe_key"]

LOCK_WAIT_LINE_S = 10.0
"""A process waiting for another's build says so this often."""


def recipe_key(recipe: Mapping[str, Any]) -> str:
    """A short, stable key of everything that shapes a build (12 hex digits of the sha256 of its sorted JSON)."""
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:12]


def folder_digests(folder: Path, *, record: str) -> dict[str, str] | None:
    """{relative posix path: sha256} of every file below folder but its record, or None where anything below it is
    neither a regular file nor a folder, or is a link: the whole folder is hashed."""
    digests = {}
    for path in sorted(Path(folder).rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if path.is_symlink():
            return None
        if path.is_dir():
            continue
        if not path.is_file():
            return None
        if rel != record:
            digests[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return digests


def check_cache_folder(folder: Path, what: str) -> Path:
    """Refuse, before any build, a cache folder that cannot be one (its parent a file or read-only; the folder a
    file or a link): found in a second, not after the build."""
    from aipc_env.core.fileio import check_writable

    folder = Path(folder)
    check_writable(folder.parent, what, folder=True)
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        raise InputError(
            f"{what} is a file or a link where its folder goes",
            path=folder,
            fix="move it away (aipc-env builds the folder again)",
        )
    return folder


def is_current(folder: Path, *, record: str, recipe: Mapping[str, Any]) -> bool:
    """Whether folder holds a finished build of recipe whose files are exactly the ones its record hashed."""
    from aipc_env.core.fileio import read_json

    path = Path(folder) / record
    if not path.is_file() or path.is_symlink():
        return False
    try:
        meta = read_json(path, "a cached build's record")
    except InputError:
        return False
    return (
        isinstance(meta, dict)
        and meta.get("recipe") == dict(recipe)
        and isinstance(files := meta.get("files"), dict)
        and bool(files)
        and folder_digests(folder, record=record) == files
    )


def build_once(
    folder: Path,
    *,
    record: str,
    recipe: Mapping[str, Any],
    build: Callable[[Path], object],
    what: str,
    log: Callable[[str], object] = print,
) -> bool:
    """Make folder a current build of recipe (see is_current): reused when it is one; else built by `build(tmp)`
    into a temporary folder, under a lock beside folder, and published whole with its record. True when it built."""
    from filelock import FileLock, Timeout

    from aipc_env.core.fileio import atomic_dir

    folder = check_cache_folder(folder, what)
    if is_current(folder, record=record, recipe=recipe):
        return False
    lock = FileLock(str(folder.with_name(f".{folder.name}.lock")))
    while True:
        try:
            lock.acquire(timeout=LOCK_WAIT_LINE_S)
            break
        except Timeout:
            log(f"{what}: waiting for another process that builds {folder}")
    try:
        if is_current(folder, record=record, recipe=recipe):  # built by the process we waited for
            return False
        if folder.exists():
            log(f"{what}: {folder} does not match its record (every file hashed); building it again")
        with atomic_dir(folder) as tmp:
            build(tmp)
            files = folder_digests(tmp, record=record)
            if not files:
                raise InputError(f"{what}: the build wrote no files, or a link", path=folder)
            (tmp / record).write_text(json.dumps({"recipe": dict(recipe), "files": files}, sort_keys=True), encoding="utf-8")
    finally:
        lock.release()
    return True
