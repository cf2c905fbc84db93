"""The one renderer of template files (shell, batch, PowerShell, YAML, Containerfile, HTML): each room keeps its
templates beside its code and hands their text here.

Scripts and YAML use marks, `@AIPC_NAME@`, replaced by validated values: a plain word (PLAIN: a pair id, a version,
a file name; its characters mean nothing in YAML, Jinja, sh, PowerShell or cmd) unless the value was escaped for the
file's language by that language's one rule here:

- YAML: `yaml_scalar` (a double-quoted scalar written by the YAML emitter) and `yaml_comment` (one line of text);
- Ansible: `ansible_literal` / `ansible_data` (every string quoted, and tagged `!unsafe` where it holds a `{`, so
  Ansible never evaluates a value from a data file as Jinja; a template that means a value as Jinja writes it in the
  template itself);
- PowerShell: `powershell_literal` (a single-quoted string, every quote character doubled, including the typographic
  ones PowerShell also takes as quotes).

The launchers (`.bat`, `.sh`) hold no values at all: they read them from data files. `@AIPC_EXIT_<NAME>@` marks are
filled from errors.ExitCode, so no template writes an exit code as a number. Pages use Jinja2 with every value
escaped."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aipc_env.errors import ExitCode

if TYPE_CHECKING:  # pragma: no cover
    import jinja2

__all__ = [
    "EXIT_MARKS",
    "MARK",
    "PLAIN",
    "Escaped",
    "ansible_data",
    "ansible_literal",
    "powershell_literal",
    "render_marked",
    "render_page",
    "yaml_comment",
    "yaml_scalar",
]

MARK = re.compile(r"@AIPC_([A-Z][A-Z0-9_]*)@")
PLAIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,199}")
"""A value written bare into a script or a YAML file."""
EXIT_MARKS = {f"exit_{code.name.lower()}": str(int(code)) for code in ExitCode}


class Escaped(str):
    """A value escaped by one of this module's rules for its language (render_marked takes it as it is)."""

    __slots__ = ()


def _no_nul(value: str, what: str) -> str:
    if not isinstance(value, str) or "\x00" in value:
        raise ValueError(f"{what}: {str(value)[:60]!r} is not text without NUL characters")
    return value


def yaml_scalar(value: str) -> Escaped:
    """`value` as one YAML double-quoted scalar (the emitter escapes line breaks, quotes and control characters)."""
    import yaml

    text = yaml.dump(_no_nul(value, "a YAML value"), default_style='"', width=2**31, allow_unicode=False, explicit_end=False)
    return Escaped(text.removesuffix("\n").removesuffix("\n...").strip())


def yaml_comment(text: str) -> Escaped:
    """Text for a YAML (or shell, PowerShell) comment line: every line break and control character escaped, so
    the comment cannot end early and start a line of the document."""
    from aipc_env.core.terminal import visible

    return Escaped(visible(_no_nul(text, "a comment").replace("\n", "\\n").replace("\t", "\\t")))


def _templatable(value: str) -> bool:
    """Whether Ansible could read Jinja in `value`: every Jinja delimiter starts with `{`. Only such values are
    tagged !unsafe: Ansible resolves the text of an !unsafe scalar again (`!unsafe "null"` reads as None,
    `!unsafe "yes"` as True), while a quoted scalar without a tag stays the string it says."""
    return "{" in value


def ansible_literal(value: str) -> Escaped:
    """`value` as an Ansible variable that is never templated: `!unsafe "..."` when it holds a `{`, else a quoted
    YAML string (which holds nothing Ansible would evaluate)."""
    return Escaped(f"!unsafe {yaml_scalar(value)}" if _templatable(value) else yaml_scalar(value))


def ansible_data(data: dict[str, Any]) -> Escaped:
    """Top-level variables for group_vars, every string value as ansible_literal writes it: quoted, and !unsafe where
    it holds a `{` (keys are the caller's names, never data)."""
    import yaml

    class _Unsafe(str):
        __slots__ = ()

    class _Quoted(str):
        __slots__ = ()

    class _Dumper(yaml.SafeDumper):  # type: ignore[misc, unused-ignore]  # PyYAML has no type information here: SafeDumper is Any
        def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:  # lists indented under their key
            super().increase_indent(flow, False)  # PyYAML's Emitter.increase_indent returns nothing

    def _mark(item: object) -> object:
        if isinstance(item, str):
            return _Unsafe(item) if _templatable(_no_nul(item, "an Ansible value")) else _Quoted(item)
        if isinstance(item, dict):
            return {str(k): _mark(v) for k, v in item.items()}
        if isinstance(item, list | tuple):
            return [_mark(v) for v in item]
        return item

    _Dumper.add_representer(_Unsafe, lambda dumper, v: dumper.represent_scalar("!unsafe", str(v), style='"'))
    _Dumper.add_representer(_Quoted, lambda dumper, v: dumper.represent_scalar("tag:yaml.org,2002:str", str(v), style='"'))
    return Escaped(
        yaml.dump(_mark(data), Dumper=_Dumper, sort_keys=False, width=110, default_flow_style=False, allow_unicode=False)
    )


_PS_QUOTES = "'\u2018\u2019\u201a\u201b"
"""The characters PowerShell takes as a single quote (about_Quoting_Rules; its tokenizer's IsSingleQuote)."""


def powershell_literal(value: str) -> Escaped:
    """`value` as a PowerShell verbatim string: single-quoted, each quote character doubled; nothing inside expands."""
    body = "".join(c + c if c in _PS_QUOTES else c for c in _no_nul(value, "a PowerShell value"))
    return Escaped(f"'{body}'")


def render_marked(text: str, name: str, values: dict[str, str], *, serialized: frozenset[str] = frozenset()) -> str:
    """`text` (the template `name`) with each `@AIPC_KEY@` replaced by values[key] (KEY lower-cased), exit marks by
    their codes. A value must be a plain word (PLAIN) or Escaped by this module's rule for the template's language;
    `serialized` names keys a room quoted by its own documented rule (the Containerfile's JSON labels). A mark
    without a value, or a value without a mark, is aipc-env's bug and raises."""
    marks = {m.lower() for m in MARK.findall(text)}
    exits = {m for m in marks if m in EXIT_MARKS}
    if marks - exits != set(values):
        raise RuntimeError(f"template {name}: marks {sorted(marks - exits)} but values for {sorted(values)}")
    for key, value in values.items():
        if key not in serialized and not isinstance(value, Escaped) and not PLAIN.fullmatch(value):
            raise ValueError(f"template {name}: {key}={value!r} is not a plain name (letters, digits, . _ + -)")
    filled = {**values, **EXIT_MARKS}
    return MARK.sub(lambda m: filled[m.group(1).lower()], text)


@cache
def _environment(folder: Path) -> jinja2.Environment:
    import jinja2

    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(folder), autoescape=True, undefined=jinja2.StrictUndefined, keep_trailing_newline=True
    )


def render_page(folder: Path, name: str, **context: Any) -> str:
    """An HTML page from the Jinja2 template `folder/name`: every value escaped (autoescape), an undefined name an
    error."""
    return _environment(Path(folder)).get_template(name).render(**context)
