"""The one writer for outputs of several files (a playbook, a key pair, an export): all or nothing across Ctrl-C or a
power cut, never through a symlink, and, in a folder, only over files the tool wrote itself.

`commit_files` writes a journal naming every temp file and target, stages each file as a hidden temp file beside
its target (fsynced), marks the journal ready, renames, and removes the journal. Interrupted while staging: the old
files are intact and the next commit (or `recover`) deletes the temp files the journal names. Interrupted after
the journal is ready: the next commit (or `recover`) finishes the renames. A later run sees the old set or the new
set, never a mix.

`OutputFolder` adds ownership: a record (`.aipc-env-files.json`) of what the tool wrote there and each file's
sha256. A file that is there but not in the record (an admin's own site.yml), or one edited since the tool wrote
it, is replaced only with `force`; a symlink at any name, or a folder on the way that is a symlink, is refused (with
`force` the link itself is replaced, never its target).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
from pathlib import Path

from aipc_env.core.fileio import default_mode, parse_json, read_text
from aipc_env.core.interrupts import checkpoint
from aipc_env.errors import InputError

__all__ = ["JOURNAL_SUFFIX", "RECORD", "OutputFolder", "commit_files", "recover"]

RECORD = ".aipc-env-files.json"
JOURNAL_SUFFIX = ".aipc-env-commit.json"
_TMP = ".aipc-tmp-"
_MAX_STATE = 16 * 2**20
"""The largest journal or record read back (both are read from a folder someone else may write)."""
_PART = re.compile(r"^[^\x00-\x1f\x7f/\\:*?\"<>|]{1,200}$")


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):  # not every platform opens folders
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _write_journal(journal: Path, plan: dict) -> None:
    tmp = journal.with_name(f"{_TMP}{secrets.token_hex(4)}-journal")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(plan))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, journal)
    _fsync_dir(journal.parent)


def recover(journal: Path) -> list[str]:
    """Finish an interrupted commit (its journal says every staged file was complete: the renames are done) or undo
    one that stopped while staging (its temp files are removed). Returns what it did."""
    done = []
    if journal.is_file() and not journal.is_symlink():
        try:
            plan = parse_json(read_text(journal, "journal", max_bytes=_MAX_STATE), journal, "journal")
            renames = [(Path(a), Path(b)) for a, b in plan["renames"]]
            ready = plan["state"] == "ready"
        except (InputError, ValueError, KeyError, TypeError):
            raise InputError("an interrupted write left a journal that cannot be read", path=journal,
                             fix="delete it and the .aipc-tmp-* files beside the outputs, then run again") from None
        for tmp, final in renames:
            if tmp.exists() and not tmp.is_symlink():
                if ready:
                    os.replace(tmp, final)
                    done.append(f"finished writing {final} (an interrupted run)")
                else:
                    tmp.unlink()
                    done.append(f"removed {tmp.name}, left by an interrupted run")
        if ready and plan.get("record"):
            _write_record(Path(plan["record"]["path"]), plan["record"]["files"])
        journal.unlink()
    for stray in journal.parent.glob(f"{_TMP}*-journal"):  # a journal that was never renamed into place
        if stray.is_file() and not stray.is_symlink():
            stray.unlink()
    return done


def _stage(tmp: Path, data: bytes, mode: int | None) -> None:
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.chmod(tmp, mode if mode is not None else default_mode())


def commit_files(files: dict[Path, bytes], journal: Path, *, modes: dict[Path, int] | None = None,
                 record: dict | None = None) -> None:
    """Write every file or none (see the module doc). Targets must already have been checked by the caller."""
    recover(journal)
    token = secrets.token_hex(4)
    renames = [(final.with_name(f"{_TMP}{token}-{final.name}"[:255]), final) for final in files]
    plan = {"state": "staging", "renames": [[str(a), str(b)] for a, b in renames], "record": record}
    journal.parent.mkdir(parents=True, exist_ok=True)
    _write_journal(journal, plan)
    try:
        for tmp, final in renames:
            final.parent.mkdir(parents=True, exist_ok=True)
            _stage(tmp, files[final], (modes or {}).get(final))
            checkpoint("outputs:staged-one")
        _write_journal(journal, {**plan, "state": "ready"})
    except BaseException:
        with contextlib.suppress(OSError, InputError):
            recover(journal)  # a Ctrl-C while staging: the temp files go, the old files stay
        raise
    checkpoint("outputs:journal-ready")
    for i, (tmp, final) in enumerate(renames):
        os.replace(tmp, final)
        if i == 0:
            checkpoint("outputs:renamed-one")
    if record:
        _write_record(Path(record["path"]), record["files"])
    journal.unlink()


def _write_record(path: Path, files: dict[str, str]) -> None:
    tmp = path.with_name(f"{_TMP}{secrets.token_hex(4)}-record")
    tmp.write_text(json.dumps({"written_by": "aipc-env", "files": files}, indent=1, sort_keys=True) + "\n",
                   encoding="utf-8")
    os.replace(tmp, path)


class OutputFolder:
    """A folder of generated files (see the module doc). `names` are relative POSIX paths (`group_vars/all.yml`)."""

    def __init__(self, root: Path, *, force: bool = False) -> None:
        self.root = Path(root)
        self.force = force
        if self.root.is_symlink() or (self.root.exists() and not self.root.is_dir()):
            raise InputError("the output folder is a link or a file", path=self.root,
                             fix="give a real folder (a new one is created)")

    @property
    def journal(self) -> Path:
        return self.root / f"{RECORD}{JOURNAL_SUFFIX}"

    def recorded(self) -> dict[str, str]:
        path = self.root / RECORD
        if not path.is_file() or path.is_symlink():
            return {}
        try:
            files = parse_json(read_text(path, "record", max_bytes=_MAX_STATE), path, "record")["files"]
            return {str(k): str(v) for k, v in files.items()}
        except (InputError, KeyError, TypeError, AttributeError):
            return {}  # unreadable: nothing counts as ours

    def target(self, name: str) -> Path:
        parts = name.split("/")  # as written: "a//b" and "./a" are not plain names either
        if not name or len(parts) > 8 or any(p in ("", ".", "..") or not _PART.match(p) for p in parts):
            raise InputError(f"{name!r} is not a plain file name inside the output folder", path=self.root)
        path = self.root
        for part in parts[:-1]:
            path = path / part
            if path.is_symlink() or (path.exists() and not path.is_dir()):
                raise InputError("is a link or a file where the output needs a folder: nothing is written through "
                                 "it", path=path, fix="move it away, or choose another output folder")
        return path / parts[-1]

    def check(self, names: list[str]) -> dict[str, Path]:
        """Every target, refused unless it is new, or the tool's own and unedited (or `force`)."""
        if self.root.is_dir():
            recover(self.journal)
        ours = self.recorded()
        targets, refused = {}, []
        for name in names:
            path = self.target(name)
            targets[name] = path
            if path.is_symlink():
                if not self.force:
                    refused.append((path, "is a link: nothing is written through it"))
                continue
            if path.exists() and not path.is_file():
                refused.append((path, "is not a regular file"))
            elif path.is_file() and not self.force:
                if name not in ours:
                    refused.append((path, "is not a file aipc-env wrote here"))
                elif hashlib.sha256(path.read_bytes()).hexdigest() != ours[name]:
                    refused.append((path, "was edited since aipc-env wrote it"))
        if refused:
            path, why = refused[0]
            more = f" (and {len(refused) - 1} more)" if len(refused) > 1 else ""
            raise InputError(f"{why}{more}; it was left as it is", path=path,
                             fix="move it away, choose another output folder, or pass --force to replace it")
        return targets

    def write(self, files: dict[str, bytes], *, modes: dict[str, int] | None = None) -> list[Path]:
        """Check, then commit every file or none, and record them as the tool's."""
        targets = self.check(list(files))
        self.root.mkdir(parents=True, exist_ok=True)
        ours = self.recorded()
        ours.update({name: hashlib.sha256(data).hexdigest() for name, data in files.items()})
        for path in targets.values():
            if path.is_symlink():  # --force: the link itself goes, its target is never touched
                path.unlink()
        commit_files({targets[n]: d for n, d in files.items()}, self.journal,
                     modes={targets[n]: m for n, m in (modes or {}).items()},
                     record={"path": str(self.root / RECORD), "files": ours})
        return [targets[n] for n in files]
