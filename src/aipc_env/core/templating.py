"""The one renderer of template files (shell, batch, PowerShell, YAML, Containerfile, HTML): each room keeps its
templates beside its code and hands their text here.

Scripts and YAML use marks, `@AIPC_NAME@`, replaced by validated values: a plain word (a pair id, a version, a file
name) unless the caller serialized the value for the file's language itself (a JSON string is a YAML scalar; the
launchers quote everything they pass in data files, never in the script). `@AIPC_EXIT_<NAME>@` marks are filled
from errors.ExitCode, so no template writes an exit code as a number. Pages use Jinja2 with every value escaped."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

from aipc_env.errors import ExitCode

__all__ = ["EXIT_MARKS", "MARK", "PLAIN", "render_marked", "render_page"]

MARK = re.compile(r"@AIPC_([A-Z][A-Z0-9_]*)@")
PLAIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,199}")
"""A value written bare into a script or a YAML file."""
EXIT_MARKS = {f"exit_{code.name.lower()}": str(int(code)) for code in ExitCode}


def render_marked(text: str, name: str, values: dict[str, str], *,
                  serialized: frozenset[str] = frozenset()) -> str:
    """`text` (the template `name`) with each `@AIPC_KEY@` replaced by values[key] (KEY lower-cased), exit marks by
    their codes. A value must be a plain word (PLAIN) unless its key is in `serialized`. A mark without a value, or
    a value without a mark, is aipc-env's bug and raises."""
    marks = {m.lower() for m in MARK.findall(text)}
    exits = {m for m in marks if m in EXIT_MARKS}
    if marks - exits != set(values):
        raise RuntimeError(f"template {name}: marks {sorted(marks - exits)} but values for {sorted(values)}")
    for key, value in values.items():
        if key not in serialized and not PLAIN.fullmatch(value):
            raise ValueError(f"template {name}: {key}={value!r} is not a plain name (letters, digits, . _ + -)")
    filled = {**values, **EXIT_MARKS}
    return MARK.sub(lambda m: filled[m.group(1).lower()], text)


@cache
def _environment(folder: Path):
    import jinja2

    return jinja2.Environment(loader=jinja2.FileSystemLoader(folder), autoescape=True,
                              undefined=jinja2.StrictUndefined, keep_trailing_newline=True)


def render_page(folder: Path, name: str, **context: Any) -> str:
    """An HTML page from the Jinja2 template `folder/name`: every value escaped (autoescape), an undefined name an
    error."""
    return _environment(Path(folder)).get_template(name).render(**context)
