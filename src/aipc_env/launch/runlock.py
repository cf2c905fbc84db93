"""One run per output folder: a lock file that names its owner and survives a crash (a lock whose process is gone
is stale and taken over)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path

from aipc_env.core.formats import timestamp
from aipc_env.core.procs import pid_alive
from aipc_env.errors import ExitCode, InputError

__all__ = ["LOCK_NAME", "run_lock"]

LOCK_NAME = ".aipc-run.lock"


def _owner(path: Path) -> dict | None:
    from aipc_env.core.fileio import parse_json, read_text
    from aipc_env.errors import InputError

    try:
        data = parse_json(read_text(path, "run lock", max_bytes=1 << 16), path, "run lock")
        return data if isinstance(data, dict) else None
    except InputError:
        return None


@contextlib.contextmanager
def run_lock(folder: Path, command: str) -> Iterator[Path]:
    """Hold <folder>/.aipc-run.lock while a run writes into folder; refuse when another live run holds it."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK_NAME
    me = {"pid": os.getpid(), "host": socket.gethostname(), "started": timestamp(), "command": command}
    for _ in range(3):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            owner = _owner(path)
            live = owner is not None and (owner.get("host") != me["host"] or pid_alive(int(owner.get("pid", 0))))
            if live:
                where = f"pid {owner['pid']}" + (f" on {owner['host']}" if owner["host"] != me["host"] else "")
                raise InputError(
                    f"another run is writing into this folder ({where}, started {owner.get('started')})",
                    path=folder,
                    key="output_dir",
                    exit_code=ExitCode.USAGE,
                    fix=f"wait for it or stop it, or choose another output_dir; if no run is going, delete {path}",
                ) from None
            with contextlib.suppress(FileNotFoundError):
                path.unlink()  # stale: its process is gone
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(me, fh)
        break
    else:  # pragma: no cover - another process kept re-creating it
        raise InputError("could not take the run lock", path=path)
    try:
        yield path
    finally:
        if (_owner(path) or {}).get("pid") == me["pid"]:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
