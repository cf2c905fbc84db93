"""One run per output folder: a lock file that names its owner and survives a crash (a lock whose process is gone
is stale and taken over)."""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel, ValidationError

from aipc_env.core.formats import timestamp
from aipc_env.core.procs import pid_alive
from aipc_env.errors import ExitCode, InputError

__all__ = ["LOCK_NAME", "RunLockOwner", "run_lock"]

LOCK_NAME = ".aipc-run.lock"


class RunLockOwner(BaseModel):
    """The run lock's content: who holds the folder (written by run_lock; read back as hostile input: a lock that
    does not parse as this is a stale one)."""

    pid: int
    host: str
    started: str | None = None
    command: str | None = None


def _owner(path: Path) -> RunLockOwner | None:
    from aipc_env.core.fileio import parse_json, read_text

    try:
        return RunLockOwner.model_validate(parse_json(read_text(path, "run lock", max_bytes=1 << 16), path, "run lock"))
    except (InputError, ValidationError):
        return None


@contextlib.contextmanager
def run_lock(folder: Path, command: str) -> Iterator[Path]:
    """Hold <folder>/.aipc-run.lock while a run writes into folder; refuse when another live run holds it."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK_NAME
    me = RunLockOwner(pid=os.getpid(), host=socket.gethostname(), started=timestamp(), command=command)
    for _ in range(3):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            owner = _owner(path)
            if owner is not None and (owner.host != me.host or pid_alive(owner.pid)):
                where = f"pid {owner.pid}" + (f" on {owner.host}" if owner.host != me.host else "")
                raise InputError(
                    f"another run is writing into this folder ({where}, started {owner.started})",
                    path=folder,
                    key="output_dir",
                    exit_code=ExitCode.USAGE,
                    fix=f"wait for it or stop it, or choose another output_dir; if no run is going, delete {path}",
                ) from None
            with contextlib.suppress(FileNotFoundError):
                path.unlink()  # stale: its process is gone
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(me.model_dump_json())
        break
    else:  # pragma: no cover - another process kept re-creating it
        raise InputError("could not take the run lock", path=path)
    try:
        yield path
    finally:
        owner = _owner(path)
        if owner is not None and owner.pid == me.pid:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
