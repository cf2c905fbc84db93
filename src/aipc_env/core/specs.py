"""The one home of the rules for version strings a user or a file can give: PEP 440 versions, PEP 508 requirements
and markers, version specifiers, a Python's X.Y, and file names taken from files (a plain name that cannot leave its
folder). Each check returns the value or raises ValueError with a sentence (pydantic validators and argparse types
turn that into exit 2 naming the file and key, or the option).

`parse_version`, `parse_requirement`, `parse_specifier` and `parse_marker` are the one bounded way aipc-env reads
those from anything outside (a pip list, facts, a lock, core metadata): at most MAX_VERSION_CHARS (a requirement
MAX_REQUIREMENT_CHARS) characters and no run of more than MAX_DIGITS digits, checked before packaging parses (a
5,000-digit release number makes packaging raise a bare ValueError from int(), not InvalidVersion). Each raises
packaging's own Invalid* error (a ValueError), so every caller's handler of an invalid value handles these too."""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Annotated

from packaging.markers import InvalidMarker, Marker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version
from pydantic import AfterValidator

__all__ = [
    "MAX_DIGITS",
    "MAX_REQUIREMENT_CHARS",
    "MAX_VERSION_CHARS",
    "Identifier",
    "PythonMinor",
    "bounded_text",
    "check_file_name",
    "check_identifier",
    "check_marker",
    "check_project_name",
    "check_python_minor",
    "check_requirement",
    "check_sha256",
    "check_specifier",
    "check_version",
    "evaluate_marker",
    "parse_marker",
    "parse_requirement",
    "parse_specifier",
    "parse_version",
]

MAX_VERSION_CHARS = 128
"""The longest version (or version specifier) read: torch's `2.11.0+xpu` is 10, a date-stamped nightly ~30."""
MAX_REQUIREMENT_CHARS = 2048
"""The longest Requires-Dist line or marker read (torch's longest is ~130; a direct URL a few hundred)."""
MAX_DIGITS = 24
"""The longest run of digits in any of them (a date stamp `20261204123456` is 14)."""
_DIGITS = re.compile(rf"\d{{{MAX_DIGITS + 1},}}")


def bounded_text(value: object, limit: int, what: str, error: type[ValueError]) -> str:
    """value as a string no longer than limit and with no run of more than MAX_DIGITS digits, else `error` (the
    caller's ValueError) naming `what`: checked before any parser reads it."""
    if not isinstance(value, str):
        raise error(f"{what} {str(value)[:60]!r} is not a string")
    if len(value) > limit:
        raise error(f"{what} {value[:40]!r}... is longer than {limit} characters")
    if _DIGITS.search(value):
        raise error(f"{what} {value[:40]!r}... holds a number of more than {MAX_DIGITS} digits")
    return value


def parse_version(value: str) -> Version:
    """A PEP 440 version, bounded (InvalidVersion otherwise)."""
    text = bounded_text(value, MAX_VERSION_CHARS, "version", InvalidVersion)
    try:
        return Version(text)
    except InvalidVersion:
        raise
    except ValueError as exc:  # packaging's int() past a limit, or anything else it did not foresee
        raise InvalidVersion(f"invalid version {text[:40]!r}: {exc}") from None


def parse_specifier(value: str) -> SpecifierSet:
    """A PEP 440 specifier set such as '>=3.10,<3.14', bounded (InvalidSpecifier otherwise)."""
    text = bounded_text(value, MAX_VERSION_CHARS * 4, "version specifier", InvalidSpecifier)
    try:
        return SpecifierSet(text)
    except InvalidSpecifier:
        raise
    except (ValueError, TypeError) as exc:
        raise InvalidSpecifier(f"invalid version specifier {text[:40]!r}: {exc}") from None


def parse_requirement(value: str) -> Requirement:
    """A PEP 508 requirement, bounded (InvalidRequirement otherwise): a pip option (`--index-url ...`, `-e .`) or a
    file path is not one."""
    text = bounded_text(value, MAX_REQUIREMENT_CHARS, "requirement", InvalidRequirement)
    try:
        req = Requirement(text)
        for spec in req.specifier:  # the versions inside it, as bounded as any other
            if spec.version and not spec.version.endswith(".*") and spec.operator != "===":
                parse_version(spec.version)
        if req.marker is not None:
            from aipc_env.core.platforms import PLATFORMS, marker_environment

            for platform in PLATFORMS:  # a marker that parses but cannot be evaluated is no requirement either
                evaluate_marker(req.marker, marker_environment(platform))
        return req
    except InvalidRequirement:
        raise
    except ValueError as exc:
        raise InvalidRequirement(f"invalid requirement {text[:40]!r}: {exc}") from None


def parse_marker(value: str) -> Marker:
    """A PEP 508 environment marker, bounded (InvalidMarker otherwise)."""
    text = bounded_text(value, MAX_REQUIREMENT_CHARS, "marker", InvalidMarker)
    try:
        return Marker(text)
    except InvalidMarker:
        raise
    except ValueError as exc:
        raise InvalidMarker(f"invalid marker {text[:40]!r}: {exc}") from None


def evaluate_marker(
    marker: str | Marker,
    environment: Mapping[str, str],
    *,
    extras: Collection[str] = (),
    groups: Collection[str] = (),
) -> bool:
    """Whether a marker holds in an environment: the one way aipc-env evaluates a marker. Every variable PEP 508 and
    PEP 751 define is set (`extra` empty unless given, `extras` and `dependency_groups` the given sets), so a lock's
    marker on `extras` is evaluated, not a KeyError; a marker that parses but cannot be evaluated
    (`python_version ~= '1'`: packaging's UndefinedComparison, or anything else it raises) is InvalidMarker."""
    parsed = parse_marker(marker) if isinstance(marker, str) else marker
    env: dict[str, str | frozenset[str]] = {"extra": "", **environment}
    env["extras"] = frozenset(extras)
    env["dependency_groups"] = frozenset(groups)
    try:
        return parsed.evaluate(env)
    except Exception as exc:  # noqa: BLE001 - UndefinedComparison, UndefinedEnvironmentName, InvalidVersion, TypeError
        raise InvalidMarker(f"marker {str(parsed)[:80]!r} cannot be evaluated: {str(exc)[:200]}") from None


_PYTHON_MINOR = re.compile(r"3\.(\d{1,2})")
_PROJECT_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,198}[A-Za-z0-9])?")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_IDENTIFIER = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,98}[A-Za-z0-9])?")


def check_version(value: str) -> str:
    try:
        parse_version(value)
    except InvalidVersion:
        raise ValueError(
            f"{str(value)[:80]!r} is not a version (PEP 440, at most {MAX_VERSION_CHARS} characters, "
            f"numbers of at most {MAX_DIGITS} digits)"
        ) from None
    return value


def check_specifier(value: str) -> str:
    """A PEP 440 version specifier set, such as '>=3.10,<3.14'."""
    try:
        parse_specifier(value)
    except InvalidSpecifier:
        raise ValueError(f"{str(value)[:80]!r} is not a version specifier such as '>=3.10,<3.14'") from None
    return value


def check_requirement(value: str) -> str:
    """A PEP 508 requirement line (a Requires-Dist), such as 'numpy>=1.26; python_version >= "3.10"'."""
    try:
        parse_requirement(value)
    except InvalidRequirement as exc:
        raise ValueError(f"{str(value)[:80]!r} is not a PEP 508 requirement: {str(exc)[:200]}") from None
    return value


def check_marker(value: str | None) -> str | None:
    """A marker that parses and can be evaluated on every target platform (a marker that parses but compares
    what cannot be compared is refused where it is read, not where it is first evaluated)."""
    if value is not None:
        from aipc_env.core.platforms import PLATFORMS, marker_environment

        try:
            parsed = parse_marker(value)
            for platform in PLATFORMS:
                evaluate_marker(parsed, marker_environment(platform))
        except InvalidMarker as exc:
            raise ValueError(f"invalid PEP 508 marker {str(value)[:80]!r}: {str(exc)[:200]}") from None
    return value


def check_python_minor(value: str) -> str:
    """A CPython 3 minor version, written X.Y (3.8 to 3.99): what envs, locks and images are built for."""
    match = _PYTHON_MINOR.fullmatch(value.strip()) if isinstance(value, str) else None
    if not match or int(match.group(1)) < 8:
        raise ValueError(f"{value!r} is not a Python version written X.Y (e.g. 3.12)")
    return f"3.{int(match.group(1))}"


PythonMinor = Annotated[str, AfterValidator(check_python_minor)]


MAX_FILE_NAME = 255


def check_file_name(value: str, what: str = "file name") -> str:
    """A plain file name from a file (a lock, a manifest): no folder separator, not `.` or `..`, no control
    character, at most 255 characters; joined to a folder it stays in that folder."""
    if not isinstance(value, str) or not value or len(value) > MAX_FILE_NAME:
        raise ValueError(f"{what} {str(value)[:80]!r} is empty or longer than {MAX_FILE_NAME} characters")
    if value in (".", "..") or any(c in value for c in "/\\:") or any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise ValueError(f"{what} {value[:80]!r} is not a plain file name (a separator, `..`, a drive or a control character)")
    return value


def check_identifier(value: str, what: str = "name") -> str:
    """An identifier aipc-env writes into files of other languages (a pair id, a check id, a distribution key):
    letters, digits and `.`, `_`, `-` inside, at most 100 characters, matched whole (a trailing newline is not
    part of a name)."""
    if not isinstance(value, str) or not _IDENTIFIER.fullmatch(value):
        raise ValueError(
            f"{what} {str(value)[:80]!r} is not a plain name (letters, digits, '.', '_', '-'; at most 100 characters)"
        )
    return value


Identifier = Annotated[str, AfterValidator(check_identifier)]


def check_project_name(value: str) -> str:
    """A distribution name as PEP 508 allows it (letters, digits, `.`, `_`, `-`; no space, newline or option)."""
    if not isinstance(value, str) or not _PROJECT_NAME.fullmatch(value):
        raise ValueError(f"{str(value)[:80]!r} is not a package name (PEP 508: letters, digits, '.', '_', '-')")
    return value


def check_sha256(value: str) -> str:
    """A sha256 digest: 64 lowercase hex digits."""
    if not isinstance(value, str) or not _SHA256.fullmatch(value):
        raise ValueError(f"{str(value)[:80]!r} is not a sha256 digest (64 lowercase hex digits)")
    return value
