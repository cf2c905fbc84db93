"""The exit-code table and the one error type for everything a user can cause. Standard library only (the
launch runner imports it inside any training env); pydantic errors are translated lazily."""

from __future__ import annotations

from enum import IntEnum
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from pydantic import ValidationError

__all__ = ["AipcError", "ExitCode", "InputError", "validation_message"]


class ExitCode(IntEnum):
    """Every `aipc-env` command exits with one of these."""

    OK = 0
    """Nothing failed."""
    PROBLEMS = 1
    """The command ran and found problems: a failed check, drift, a failed verification, step or training."""
    USAGE = 2
    """Bad usage or bad input: a malformed file, a missing path, a refused edit."""
    INTERNAL = 3
    """A bug in aipc-env (the traceback is shown with --debug)."""
    CANNOT_START = 127
    """A phase's program could not be started (a shell's "command not found")."""
    INTERRUPTED = 130
    """Stopped with Ctrl-C."""


class AipcError(Exception):
    """A problem the user can fix: says what, where (file and key) and how."""

    exit_code: int = ExitCode.USAGE

    def __init__(
        self,
        message: str,
        *,
        path: str | Path | None = None,
        key: str | None = None,
        fix: str | None = None,
        exit_code: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.path = str(path) if path is not None else None
        self.key = key
        self.fix = fix
        if exit_code is not None:
            self.exit_code = exit_code

    def render(self) -> str:
        where = ""
        if self.path:
            where = self.path + (f": {self.key}" if self.key else "") + ": "
        elif self.key:
            where = f"{self.key}: "
        text = f"error: {where}{self.message}"
        if self.fix:
            text += f"\n  fix: {self.fix}"
        return text


class InputError(AipcError):
    """A file or argument given by the user is missing or malformed."""


def _loc_to_key(loc: tuple[object, ...], prefix: str = "") -> str:
    key = prefix
    for part in loc:
        if isinstance(part, int):
            key += f"[{part}]"
        else:
            key += ("." if key else "") + str(part)
    return key or "(top level)"


def validation_message(exc: ValidationError, path: str | Path, *, prefix: str = "", fix: str | None = None) -> InputError:
    """Turn a pydantic error into an InputError naming the file and every bad key."""
    lines = []
    first_key = None
    for err in exc.errors():
        key = _loc_to_key(tuple(err["loc"]), prefix)
        first_key = first_key or key
        got = err.get("input")
        shown = "" if err["type"] in ("missing", "extra_forbidden") else f" (got {_short(got)})"
        msg = (
            "unknown key; remove it or check its spelling"
            if err["type"] == "extra_forbidden"
            else str(err["msg"]).removeprefix("Value error, ")
        )
        lines.append(f"{key}: {msg}{shown}")
    detail = lines[0] if len(lines) == 1 else "\n    " + "\n    ".join(lines)
    error = InputError(f"invalid file: {detail}", path=path, key=None, fix=fix)
    error.first_key = first_key  # type: ignore[attr-defined]  # the first offending key travels on the ValidationError for the message
    return error


def _short(value: object, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
