"""The one rule for text that reaches a terminal, and the one console that prints it.

Control characters from outside values (a version pasted with a clear-screen or set-title sequence, a file name
holding an escape) are shown as `\\xNN` escapes, never sent as codes. Newlines and tabs are kept (they shape the
text). The tool's own styling is not text: `console()` gives rich console whose every text segment is escaped
before rich adds the style codes, so colours reach a terminal as colours and a value's codes as visible escapes.
`visible`, `EscapingStream` and `styling_wanted` are standard library only; rich is imported by `console()`."""

from __future__ import annotations

import functools
import os
import re
import sys
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["EscapingStream", "console", "styling_wanted", "visible"]

_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group(0))
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str) -> str:
    """`text` with every control character but newline and tab escaped (C0, DEL, C1 such as the 8-bit CSI, and the
    bidirectional overrides that reorder what a terminal shows)."""
    return _CONTROL.sub(_escape, text)


class EscapingStream:
    """A text stream that writes through `visible` (plain `print` in a command's text for people goes through one;
    `console()` writes styled text to the stream under it)."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    @property
    def inner(self) -> TextIO:
        return self._stream

    def write(self, text: str) -> int:
        self._stream.write(visible(text))
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:  # flush, fileno, encoding, isatty...
        return getattr(self._stream, name)


def styling_wanted(stream: TextIO) -> bool:
    """Colours and bold only on a terminal that shows them: not with NO_COLOR set (any value but empty,
    no-color.org), not on TERM=dumb, not into a pipe or a file."""
    if os.environ.get("NO_COLOR", ""):
        return False
    if os.environ.get("TERM", "").lower() in ("dumb", "unknown"):
        return False
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def console(stream: TextIO | None = None) -> Console:
    """THE console for people (doctor, verify, matrix, adapt...): styled on a terminal (styling_wanted), plain
    elsewhere; markup off (a value's `[red]` is text, not a style); every text segment escaped by `visible` before
    its style is encoded; no wrapping of its own but in tables (the terminal wraps a long line)."""
    target: TextIO = stream or sys.stdout
    if isinstance(target, EscapingStream):  # the renderer's stdout: this console escapes segment by segment
        target = target.inner
    styled = styling_wanted(target)
    return _escaping_console_class()(
        file=target,
        color_system="auto" if styled else None,
        force_terminal=styled,
        no_color=False,
        markup=False,
        highlight=False,
        soft_wrap=True,
        emoji=False,
    )


@functools.cache
def _escaping_console_class() -> type[Console]:
    from collections.abc import Iterable

    from rich.console import Console as RichConsole
    from rich.console import ConsoleOptions, RenderableType
    from rich.segment import Segment

    class EscapingConsole(RichConsole):
        """Every text segment through `visible` (idempotent: nested renders, a table's cells, stay right); control
        segments (cursor moves rich makes itself) and styles untouched."""

        def render(self, renderable: RenderableType, options: ConsoleOptions | None = None) -> Iterable[Segment]:
            for segment in super().render(renderable, options):
                if segment.control or not _CONTROL.search(segment.text):
                    yield segment
                else:
                    yield Segment(visible(segment.text), segment.style)

    return EscapingConsole
