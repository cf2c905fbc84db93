"""What a command returns and the one renderer that prints it (called by the CLI after the command): `--json` prints
the result's versioned model on stdout and nothing else; otherwise its text for people. Commands never print JSON and
never ask whether `--json` was given: progress lines go through `progress(args)`, which sends them to stderr when
stdout is JSON."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar, Literal, TextIO

from pydantic import BaseModel

from aipc_env.core.formats import VersionedModel
from aipc_env.errors import ExitCode

__all__ = ["ErrorDocument", "FilesWritten", "Progress", "Result", "error_document", "progress", "render", "render_error"]


class ErrorDocument(VersionedModel):
    """What a command prints on stdout under `--json` when it fails: a refusal (bad input, exit 2), an interrupt or
    an internal error, as data a fleet script can read. The process exits with `code`; the same words go to stderr
    for people."""

    FORMAT: ClassVar[str] = "error document"
    schema_version: Literal[1] = 1
    error: Literal[True] = True
    code: int
    """The exit code (aipc_env.errors.ExitCode)."""
    code_name: str
    """Its name: USAGE, PROBLEMS, INTERNAL, CANNOT_START, INTERRUPTED."""
    message: str
    file: str | None = None
    """The file the error is about, when there is one."""
    key: str | None = None
    """The key (or argument) in that file or on the command line."""
    fix: str | None = None
    """What to do about it."""


class FilesWritten(VersionedModel):
    """What a command that writes files prints under `--json` (distill init, fleet ansible, adapt --revert and
    --dry-run): the files, what it did to each, and what to do next."""

    FORMAT: ClassVar[str] = "files written"
    schema_version: Literal[1] = 1
    files: list[str]
    dry_run: bool = False
    """Nothing was written: the files it would write."""
    changes: dict[str, list[str]] = {}
    """Per file, what is (or would be) changed in it, where the command says."""
    resumed: bool = False
    """An interrupted earlier run had written them; this one finished or confirmed them."""
    next: str | None = None
    """The next step, in words."""


def error_document(
    code: int, message: str, *, file: str | None = None, key: str | None = None, fix: str | None = None
) -> ErrorDocument:
    name = ExitCode(code).name if code in ExitCode._value2member_map_ else str(code)
    return ErrorDocument(
        code=int(code),
        code_name=name,
        message=utf8_text(message),
        file=None if file is None else utf8_text(file),
        key=None if key is None else utf8_text(key),
        fix=None if fix is None else utf8_text(fix),
    )


def utf8_text(text: str) -> str:
    """Text that is valid UTF-8: an argument or path that was not (Python carries its bytes as lone surrogates) shows
    its bytes escaped (`\\xff`), so a JSON document naming it can still be written."""
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a surrogate surrogateescape does not make (U+D800..U+DC7F)
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def render_error(doc: ErrorDocument) -> None:
    """Print an error document on stdout (under --json; the text for people went to stderr)."""
    try:
        sys.stdout.write(doc.model_dump_json(indent=2) + "\n")
        sys.stdout.flush()
    except (OSError, ValueError):
        pass  # stdout is gone: the exit code and stderr still say it


@dataclass(frozen=True)
class Result:
    """A command's outcome: `data` (what --json prints: a versioned format of docs/schemas/, or the documented
    format of another tool, e.g. a WinGet configuration), `text` (prints it for people; None: nothing more to say)
    and the exit code."""

    data: BaseModel
    text: Callable[[], None] | None = None
    code: int = ExitCode.OK
    always_json: bool = False
    """The data is the output for people too (a verdict read by people and scripts alike)."""


def _as_json(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "json", False))


def render(result: Result, args: argparse.Namespace) -> int:
    if _as_json(args) or result.always_json:
        if not isinstance(result.data, BaseModel):  # pragma: no cover - a programming error, caught by the types
            raise TypeError(f"a command's --json output must be a model, not {type(result.data).__name__}")
        sys.stdout.write(result.data.model_dump_json(indent=2) + "\n")
    elif result.text is not None:
        from contextlib import redirect_stdout

        from aipc_env.core.terminal import EscapingStream

        with redirect_stdout(EscapingStream(sys.stdout)):
            result.text()  # values from outside (a pasted version, a file name) never drive the terminal
    sys.stdout.flush()
    return int(result.code)


@dataclass
class Progress:
    """A command's one message channel. `say`: progress for people (stdout; stderr when stdout is JSON); `note`:
    what people should see beside the result (always stderr: the env chosen, a recovered file); `warn`: warnings
    (stderr). `--quiet` silences say and note, never warn. Every message is kept in `said`, silenced or not, so a
    test reads them as data. `stream` is also where a launcher's own output goes (None: stdout)."""

    stream: TextIO | None
    """None: stdout (resolved at print time, so a test's captured stdout is honoured)."""
    silent: bool = False
    said: list[tuple[str, str]] = field(default_factory=list)
    """(kind, text) of every message: say, note or warn."""

    def _emit(self, kind: str, text: str, stream: TextIO) -> None:
        from aipc_env.core.terminal import visible

        self.said.append((kind, text))
        if kind == "warn" or not self.silent:
            print(visible(text), file=stream, flush=True)

    def say(self, text: str) -> None:
        self._emit("say", text, self.stream or sys.stdout)

    def note(self, text: str) -> None:
        self._emit("note", text, sys.stderr)

    def warn(self, text: str) -> None:
        self._emit("warn", text, sys.stderr)


def progress(args: argparse.Namespace) -> Progress:
    """The command's channel, one per parsed command line (messages accumulate in it)."""
    made = getattr(args, "_progress", None)
    if not isinstance(made, Progress):
        made = Progress(sys.stderr if _as_json(args) else None, silent=bool(getattr(args, "quiet", False)))
        args._progress = made
    return made
