"""The one writer for outputs of several files (a playbook, a key pair, an export): all or nothing across Ctrl-C or a
power cut, never through a symlink, and, in a folder, only over files the tool wrote itself.

`commit_files` writes a journal naming every temp file and target, stages each file as a hidden temp file beside
its target (fsynced), marks the journal ready, renames, and removes the journal. Interrupted while staging: the old
files are intact and the next commit (or `recover`) deletes the temp files the journal names. Interrupted after
the journal is ready: the next commit (or `recover`) finishes the renames. A later run sees the old set or the new
set, never a mix.

The journal and the record are read back from a folder someone else may write, so nothing in them is trusted: each
is parsed through a model, and a journal may name only the targets of the command now running (a key pair's two
files, the folder's plain names), each temp file beside its target under the name the writer gives it, no link on
the way. A journal that says anything else is a named refusal that changes nothing.

`OutputFolder` adds ownership: a record (`.aipc-env-files.json`) of what the tool wrote there and each file's
sha256. A file that is there but not in the record (an admin's own site.yml), or one edited since the tool wrote
it, is replaced only with `force`; a symlink at any name, or a folder on the way that is a symlink, is refused (with
`force` the link itself is replaced, never its target). The record, the journal and every temp name are checked
before the first file is staged.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from aipc_env.core.fileio import default_mode, parse_json, read_text
from aipc_env.core.interrupts import checkpoint
from aipc_env.errors import InputError

__all__ = ["JOURNAL_SUFFIX", "RECORD", "OutputFolder", "commit_files", "recover"]

RECORD = ".aipc-env-files.json"
JOURNAL_SUFFIX = ".aipc-env-commit.json"
_TMP = ".aipc-tmp-"
_MAX_STATE = 16 * 2**20
"""The largest journal or record read back (both are read from a folder someone else may write)."""
_PART = re.compile(r"[^\x00-\x1f\x7f/\\:*?\"<>|]{1,200}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_TOKEN = re.compile(r"[0-9a-f]{8}")
_MAX_FILES = 10_000


class _Rename(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    token: str = Field(pattern=_TOKEN.pattern)
    final: str = Field(min_length=1, max_length=4096)


class _Journal(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    state: Literal["staging", "ready"]
    renames: list[_Rename] = Field(max_length=_MAX_FILES)
    record: dict[str, str] | None = Field(default=None, max_length=_MAX_FILES)


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    written_by: Literal["aipc-env"]
    files: dict[str, str] = Field(max_length=_MAX_FILES)


def _plain_name(name: str) -> bool:
    """A relative POSIX path of plain parts, as written: "a//b", "./a", "../a" and "" are not, nor the names of
    the writer's own state (the record, a journal, a temp file)."""
    parts = name.split("/")
    return (
        bool(name)
        and len(parts) <= 8
        and name != RECORD
        and all(
            p not in (".", "..") and _PART.fullmatch(p) and not p.startswith(_TMP) and not p.endswith(JOURNAL_SUFFIX)
            for p in parts
        )
    )


def _tmp_for(final: Path, token: str) -> Path:
    return final.with_name(f"{_TMP}{token}-{final.name}"[:255])


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):  # not every platform opens folders
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _write_new(path: Path, data: bytes, mode: int = 0o600) -> None:
    """A new file, never through a link and never over anything already there."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), mode)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def _write_journal(journal: Path, plan: Mapping[str, object]) -> None:
    tmp = journal.with_name(f"{_TMP}{secrets.token_hex(4)}-journal")
    _write_new(tmp, json.dumps(plan).encode("utf-8"))
    os.replace(tmp, journal)
    _fsync_dir(journal.parent)


def _refuse_journal(journal: Path, why: str) -> InputError:
    return InputError(
        f"an interrupted write left a journal that cannot be trusted ({why}); nothing was changed",
        path=journal,
        fix="if no aipc-env run is writing there, delete it and the .aipc-tmp-* files beside the outputs, then run again",
    )


def _not_a_regular_file(path: Path) -> bool:
    """There, and a link, a folder or anything but a regular file."""
    return path.is_symlink() or (path.exists() and not path.is_file())


def _read_journal(journal: Path, allowed: Callable[[Path], bool]) -> tuple[_Journal, list[tuple[Path, Path]]]:
    """The journal through its model; every target one the running command writes, every temp file beside it."""
    try:
        plan = _Journal.model_validate(parse_json(read_text(journal, "journal", max_bytes=_MAX_STATE), journal, "journal"))
    except (InputError, ValidationError) as exc:
        why = exc.message if isinstance(exc, InputError) else f"{exc.error_count()} field(s) of the wrong form"
        raise InputError(
            "an interrupted write left a journal that cannot be read",
            path=journal,
            fix=f"{why}; if no aipc-env run is writing there, delete it and the .aipc-tmp-* files beside "
            "the outputs, then run again",
        ) from None
    renames = []
    for entry in plan.renames:
        final = Path(entry.final)
        if not final.is_absolute() or ".." in final.parts or "\x00" in entry.final or not allowed(final):
            raise _refuse_journal(journal, f"it names {entry.final[:200]!r}, which this command does not write")
        tmp = _tmp_for(final, entry.token)
        for path in (final, tmp):
            if _not_a_regular_file(path):
                raise _refuse_journal(journal, f"{path} is a link or not a regular file")
        renames.append((tmp, final))
    if plan.record is not None:
        if not all(_plain_name(k) and _SHA256.fullmatch(v) for k, v in plan.record.items()):
            raise _refuse_journal(journal, "its record holds a name that is not plain or a hash that is not sha256")
        if _not_a_regular_file(journal.parent / RECORD):
            raise _refuse_journal(journal, f"{journal.parent / RECORD} is a link or not a regular file")
    return plan, renames


def _targets_only(targets: Iterable[Path]) -> Callable[[Path], bool]:
    wanted = {os.path.abspath(t) for t in targets}
    return lambda final: os.path.abspath(final) in wanted


def recover(journal: Path, targets: Iterable[Path] | Callable[[Path], bool] = ()) -> list[str]:
    """Finish an interrupted commit (its journal says every staged file was complete: the renames are done) or undo
    one that stopped while staging (its temp files are removed). Returns what it did. `targets` are the files the
    command now running writes (or a test of them): a journal naming anything else is refused before anything
    changes."""
    allowed = targets if callable(targets) else _targets_only(targets)
    done = []
    if journal.is_symlink() or (journal.exists() and not journal.is_file()):
        raise _refuse_journal(journal, "it is a link or not a regular file")
    if journal.is_file():
        plan, renames = _read_journal(journal, allowed)
        ready = plan.state == "ready"
        for tmp, final in renames:
            if tmp.is_file() and not tmp.is_symlink():
                if ready:
                    os.replace(tmp, final)
                    done.append(f"finished writing {final} (an interrupted run)")
                else:
                    tmp.unlink()
                    done.append(f"removed {tmp.name}, left by an interrupted run")
        if ready and plan.record is not None:
            _write_record(journal.parent / RECORD, plan.record)
        journal.unlink()
    if journal.parent.is_dir():
        for stray in journal.parent.glob(f"{_TMP}*-journal"):  # a journal that was never renamed into place
            if stray.is_file() and not stray.is_symlink():
                stray.unlink()
    return done


def _stage(tmp: Path, data: bytes, mode: int | None) -> None:
    _write_new(tmp, data)
    os.chmod(tmp, mode if mode is not None else default_mode())


def _check_before_staging(journal: Path, renames: list[tuple[Path, Path]], record: bool) -> None:
    """Everything about the places the commit will write, before the first byte is staged."""
    places = [journal, *([journal.parent / RECORD] if record else [])]
    for path in places:
        if _not_a_regular_file(path):
            raise InputError(
                "is a link or not a regular file where aipc-env keeps its own state; nothing was written",
                path=path,
                fix="move it away, then run again",
            )
    for tmp, final in renames:
        if final.exists() and not final.is_file() and not final.is_symlink():
            raise InputError("is not a regular file; nothing was written", path=final, fix="move it away")
        if tmp.exists() or tmp.is_symlink():
            raise InputError(
                "a temp file of this name is already there; nothing was written", path=tmp, fix="move it away, then run again"
            )


def commit_files(
    files: dict[Path, bytes],
    journal: Path,
    *,
    modes: dict[Path, int] | None = None,
    record: dict[str, str] | None = None,
    targets: Callable[[Path], bool] | None = None,
) -> None:
    """Write every file or none (see the module doc). Targets must already have been checked by the caller. `record`
    ({name: sha256}) is written as the folder's record (`RECORD` beside the journal) with the files. `targets`
    says which files an earlier run's journal may name (by default: these files)."""
    recover(journal, targets or list(files))
    token = secrets.token_hex(4)
    finals = [Path(os.path.abspath(final)) for final in files]
    renames = [(_tmp_for(final, token), final) for final in finals]
    data = dict(zip(finals, files.values(), strict=True))
    mode_of = {Path(os.path.abspath(p)): m for p, m in (modes or {}).items()}
    journal.parent.mkdir(parents=True, exist_ok=True)
    _check_before_staging(journal, renames, record is not None)
    plan = {"state": "staging", "renames": [{"token": token, "final": str(f)} for f in finals], "record": record}
    _write_journal(journal, plan)
    try:
        for tmp, final in renames:
            final.parent.mkdir(parents=True, exist_ok=True)
            _stage(tmp, data[final], mode_of.get(final))
            checkpoint("outputs:staged-one")
        _write_journal(journal, {**plan, "state": "ready"})
    except BaseException:
        with contextlib.suppress(OSError, InputError):
            recover(journal, finals)  # a Ctrl-C while staging: the temp files go, the old files stay
        raise
    checkpoint("outputs:journal-ready")
    for i, (tmp, final) in enumerate(renames):
        os.replace(tmp, final)
        if i == 0:
            checkpoint("outputs:renamed-one")
    if record is not None:
        _write_record(journal.parent / RECORD, record)
    journal.unlink()


def _write_record(path: Path, files: dict[str, str]) -> None:
    tmp = path.with_name(f"{_TMP}{secrets.token_hex(4)}-record")
    text = json.dumps({"written_by": "aipc-env", "files": files}, indent=1, sort_keys=True) + "\n"
    _write_new(tmp, text.encode("utf-8"), 0o644)
    os.chmod(tmp, default_mode())
    os.replace(tmp, path)


class OutputFolder:
    """A folder of generated files (see the module doc). `names` are relative POSIX paths (`group_vars/all.yml`)."""

    def __init__(self, root: Path, *, force: bool = False) -> None:
        self.root = Path(os.path.abspath(root))
        self.force = force
        if self.root.is_symlink() or (self.root.exists() and not self.root.is_dir()):
            raise InputError(
                "the output folder is a link or a file", path=self.root, fix="give a real folder (a new one is created)"
            )

    @property
    def journal(self) -> Path:
        return self.root / f"{RECORD}{JOURNAL_SUFFIX}"

    def recorded(self) -> dict[str, str]:
        """The record's table {name: sha256}; a record that is not the tool's (damaged, another shape, a name that is
        not plain) counts for nothing: no file is the tool's."""
        path = self.root / RECORD
        if _not_a_regular_file(path):
            raise InputError(
                "is a link or not a regular file where aipc-env keeps its record of the files it wrote; nothing was written",
                path=path,
                fix="move it away, then run again",
            )
        if not path.is_file():
            return {}
        try:
            record = _Record.model_validate(parse_json(read_text(path, "record", max_bytes=_MAX_STATE), path, "record"))
        except (InputError, ValidationError):
            return {}  # unreadable: nothing counts as ours
        if not all(_plain_name(k) and _SHA256.fullmatch(v) for k, v in record.files.items()):
            return {}
        return dict(record.files)

    def owns(self, final: Path) -> bool:
        """Whether `final` is a plain name inside this folder with no link on the way (a journal may name it)."""
        try:
            rel = Path(os.path.abspath(final)).relative_to(self.root).as_posix()
        except ValueError:
            return False
        if not _plain_name(rel):
            return False
        try:
            return self.target(rel) == final
        except InputError:
            return False

    def target(self, name: str) -> Path:
        if not isinstance(name, str) or not _plain_name(name):
            raise InputError(f"{name!r} is not a plain file name inside the output folder", path=self.root)
        parts = name.split("/")
        path = self.root
        for part in parts[:-1]:
            path = path / part
            if path.is_symlink() or (path.exists() and not path.is_dir()):
                raise InputError(
                    "is a link or a file where the output needs a folder: nothing is written through it",
                    path=path,
                    fix="move it away, or choose another output folder",
                )
        return path / parts[-1]

    def check(self, names: list[str]) -> dict[str, Path]:
        """Every target, refused unless it is new, or the tool's own and unedited (or `force`)."""
        targets = {name: self.target(name) for name in names}  # names first: a bad one changes nothing
        if self.root.is_dir():
            recover(self.journal, self.owns)
        ours = self.recorded()
        refused = []
        for name, path in targets.items():
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
            raise InputError(
                f"{why}{more}; it was left as it is",
                path=path,
                fix="move it away, choose another output folder, or pass --force to replace it",
            )
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
        commit_files(
            {targets[n]: d for n, d in files.items()},
            self.journal,
            modes={targets[n]: m for n, m in (modes or {}).items()},
            record=ours,
            targets=self.owns,
        )
        return [targets[n] for n in files]
