"""Parse what users paste: `pip list`, `pip freeze`, `pip list --format=json`, `conda list`, `findstr` output."""

from __future__ import annotations

import json
import re
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from aipc_env.errors import InputError

__all__ = ["DuplicatePackage", "parse_pip_list", "read_pip_list"]

_FREEZE = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?\s*===?\s*([^\s;#]+)")
_TABLE = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s+(\S+)(?:\s+.*)?$")
_DIRECT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?\s*@\s*(\S+)")


class DuplicatePackage(ValueError):
    """The list names one package twice with different versions."""


def _version_from_url(url: str) -> str | None:
    """The version in a wheel or sdist file name of a direct URL (`torch @ file:///.../torch-2.8.0%2Bxpu-...whl`)."""
    from urllib.parse import unquote, urlparse

    name = unquote(urlparse(url).path.rsplit("/", 1)[-1])
    if name.endswith(".whl"):
        parts = name[:-4].split("-")
        return parts[1] if len(parts) >= 5 else None
    match = re.match(r"^[A-Za-z0-9_.]+?-(\d[^-]*?)(?:\.tar\.gz|\.zip)$", name)
    return match.group(1) if match else None


def _is_version(text: str) -> bool:
    try:
        Version(text)
    except InvalidVersion:
        return False
    return True


def parse_pip_list(text: str) -> dict[str, str]:
    """Return {canonical name: version}. Unparseable lines (headers, comments, URLs) are skipped."""
    stripped = text.lstrip("\ufeff").strip()
    if stripped.startswith("["):
        try:
            rows = json.loads(stripped)
            return {canonicalize_name(r["name"]): str(r["version"]) for r in rows}
        except (ValueError, KeyError, TypeError):
            pass
    found: dict[str, str] = {}
    lines: dict[str, int] = {}
    for number, line in enumerate(stripped.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith(("#", "-", "Package ", "WARNING", "DEPRECATION", "[notice]")):
            continue
        direct = _DIRECT.match(line)
        if direct:
            version = _version_from_url(direct.group(2))
            if version:
                _add(found, lines, canonicalize_name(direct.group(1)), version, number)
            continue
        match = _FREEZE.match(line)
        if not match:
            match = _TABLE.match(line)
            if match and not _is_version(match.group(2)):
                match = None
        if match:
            _add(found, lines, canonicalize_name(match.group(1)), match.group(2), number)
    return found


def _add(found: dict[str, str], lines: dict[str, int], name: str, version: str, number: int) -> None:
    if name in found and found[name] != version:
        raise DuplicatePackage(f"{name} appears twice with different versions: {found[name]} (line {lines[name]}) "
                               f"and {version} (line {number})")
    found.setdefault(name, version)
    lines.setdefault(name, number)


def read_pip_list(path: str | Path) -> dict[str, str]:
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read the package list: {exc.strerror}", path=path) from None
    # PowerShell redirection writes UTF-16; cmd writes the ANSI code page.
    for encoding in ("utf-8-sig", "utf-16", "cp1252"):
        try:
            text = raw.decode(encoding)
            if "\x00" not in text:
                break
        except UnicodeDecodeError:
            continue
    else:  # pragma: no cover - cp1252 decodes almost anything
        raise InputError("the package list is not text", path=path)
    try:
        packages = parse_pip_list(text)
    except DuplicatePackage as exc:
        raise InputError(str(exc), path=path, fix="paste the output of one `pip list` or `pip freeze`, run in the "
                         "training env") from None
    if not packages:
        raise InputError("no packages found in the file", path=path,
                         fix="save the output of `pip list` or `pip freeze` run in the training env")
    return packages
