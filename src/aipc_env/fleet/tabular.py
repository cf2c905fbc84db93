"""CSV cells that a spreadsheet shows as text, never runs as a formula.

A fleet report's cells come from machines' own reports (hostnames, check messages, file names): hostile input.
Excel, LibreOffice and Google Sheets evaluate a cell that begins with ``=``, ``+``, ``-``, ``@``, a tab or a
carriage return (CSV injection, OWASP); such a cell gets a leading apostrophe, which the spreadsheet hides.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable

__all__ = ["FORMULA_STARTS", "csv_text", "safe_cell"]

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def safe_cell(value: object) -> str:
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def csv_text(header: list[str], rows: Iterable[Iterable[object]]) -> str:
    """RFC 4180 CSV (quoted as needed, '\\n' line ends) with every cell made safe."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([safe_cell(h) for h in header])
    writer.writerows([safe_cell(c) for c in row] for row in rows)
    return buf.getvalue()
