"""The one home of the rules for version strings a user or a file can give: PEP 440 versions, PEP 508 markers,
a Python's X.Y, and file names taken from files (a plain name that cannot leave its folder). Each check returns the
value or raises ValueError with a sentence (pydantic validators and argparse types turn that into exit 2 naming the
file and key, or the option)."""

from __future__ import annotations

import re
from typing import Annotated

from packaging.markers import InvalidMarker, Marker
from packaging.version import InvalidVersion, Version
from pydantic import AfterValidator

__all__ = ["PythonMinor", "check_file_name", "check_marker", "check_project_name", "check_python_minor", "check_sha256",
           "check_specifier", "check_version"]

_PYTHON_MINOR = re.compile(r"3\.(\d{1,2})")
_PROJECT_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,198}[A-Za-z0-9])?")
_SHA256 = re.compile(r"[0-9a-f]{64}")


def check_version(value: str) -> str:
    try:
        Version(value)
    except InvalidVersion:
        raise ValueError(f"{value!r} is not a version (PEP 440)") from None
    return value


def check_specifier(value: str) -> str:
    """A PEP 440 version specifier set, such as '>=3.10,<3.14'."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        SpecifierSet(value)
    except (InvalidSpecifier, TypeError):
        raise ValueError(f"{str(value)[:80]!r} is not a version specifier such as '>=3.10,<3.14'") from None
    return value


def check_marker(value: str | None) -> str | None:
    if value is not None:
        try:
            Marker(value)
        except InvalidMarker as exc:
            raise ValueError(f"invalid PEP 508 marker {value!r}: {exc}") from None
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
        raise ValueError(f"{what} {value[:80]!r} is not a plain file name (a separator, `..`, a drive or a control "
                         "character)")
    return value


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
