"""The one home of the rules for version strings a user or a file can give: PEP 440 versions, PEP 508 markers and
a Python's X.Y. Each check returns the value or raises ValueError with a sentence (pydantic validators and argparse
types turn that into exit 2 naming the file and key, or the option)."""

from __future__ import annotations

import re
from typing import Annotated

from packaging.markers import InvalidMarker, Marker
from packaging.version import InvalidVersion, Version
from pydantic import AfterValidator

__all__ = ["PythonMinor", "check_marker", "check_python_minor", "check_version"]

_PYTHON_MINOR = re.compile(r"3\.(\d{1,2})")


def check_version(value: str) -> str:
    try:
        Version(value)
    except InvalidVersion:
        raise ValueError(f"{value!r} is not a version (PEP 440)") from None
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
