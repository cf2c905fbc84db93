"""The one rule for text that reaches a terminal: control characters from outside values (a version pasted with a
clear-screen or set-title sequence, a file name holding an escape) are shown as `\\xNN` escapes, never sent as
codes. Newlines and tabs are kept (they shape the text). Standard library only."""

from __future__ import annotations

import re
from typing import Any, TextIO

__all__ = ["EscapingStream", "visible"]

_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group(0))
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str) -> str:
    """`text` with every control character but newline and tab escaped (C0, DEL, C1 such as the 8-bit CSI, and the
    bidirectional overrides that reorder what a terminal shows)."""
    return _CONTROL.sub(_escape, text)


class EscapingStream:
    """A text stream that writes through `visible` (what the CLI's renderer prints for people goes through one)."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(visible(text))
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:  # flush, fileno, encoding, isatty...
        return getattr(self._stream, name)
