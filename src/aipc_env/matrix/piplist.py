"""Parse what users paste: `pip list`, `pip freeze`, `pip list --format=json`, `conda list`, `findstr` output."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion

from aipc_env.core.fileio import parse_json
from aipc_env.core.specs import parse_version
from aipc_env.errors import InputError

if TYPE_CHECKING:  # pragma: no cover
    from aipc_env.core.platforms import Platform
    from aipc_env.matrix.model import Matrix

__all__ = ["DuplicatePackage", "parse_pip_list", "platform_of_list", "read_list_text", "read_pip_list"]

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
        parse_version(text)
    except InvalidVersion:
        return False
    return True


def parse_pip_list(text: str) -> dict[str, str]:
    """Return {canonical name: version}. Unparseable lines (headers, comments, URLs) are skipped."""
    stripped = text.lstrip("\ufeff").strip()
    if stripped.startswith("["):
        try:
            rows = parse_json(stripped, "pip list", "pip list --format json")
            return {canonicalize_name(r["name"]): str(r["version"]) for r in rows}
        except (ValueError, KeyError, TypeError, InputError):
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
        raise DuplicatePackage(
            f"{name} appears twice with different versions: {found[name]} (line {lines[name]}) and {version} (line {number})"
        )
    found.setdefault(name, version)
    lines.setdefault(name, number)


_WIN_PATH = re.compile(r"(?<![A-Za-z0-9])[A-Za-z]:\\|\\(?:Lib|Scripts)\\site-packages|\\AppData\\", re.IGNORECASE)
_POSIX_PATH = re.compile(r"(?<![A-Za-z0-9:])/(?:home|usr|opt|root|srv|var|mnt)/|/lib/python3\.\d+/site-packages")
_WIN_ONLY = ("pywin32", "pywin32-ctypes", "pywinpty", "wmi", "comtypes")
_LINUX_ONLY = ("oneccl", "oneccl-devel", "impi-rt", "pyzes", "uvloop")


def platform_of_list(text: str, installed: dict[str, str], matrix: Matrix | None = None) -> tuple[str | None, str]:
    """The platform a pasted list was made on, from what it shows (pure): wheel tags of direct references, paths
    (`pip list -v` locations, file URLs), packages that install on one platform only, and Intel runtime versions
    that one platform's wheels pin (xpu-2.7's compiler runtime is 2025.0.5 on Windows, 2025.0.4 on Linux).
    (None, why) when the list does not say, or says both."""
    votes: dict[Platform, list[str]] = {"win-64": [], "linux-64": []}
    if "win_amd64" in text:
        votes["win-64"].append("a win_amd64 wheel")
    if re.search(r"(?:manylinux|linux)_[0-9_]*x86_64", text):
        votes["linux-64"].append("a linux wheel")
    if _WIN_PATH.search(text):
        votes["win-64"].append("Windows paths")
    if _POSIX_PATH.search(text):
        votes["linux-64"].append("Linux paths")
    for name in _WIN_ONLY:
        if name in installed:
            votes["win-64"].append(name)
    for name in _LINUX_ONLY:
        if name in installed:
            votes["linux-64"].append(name)
    if matrix is not None:
        from aipc_env.matrix.model import versions_equal

        for platform in votes:
            other: Platform = "linux-64" if platform == "win-64" else "win-64"
            for pair in matrix.pairs:
                mine = {p.key: p for p in pair.pins_for(platform)}
                theirs = {p.key: p for p in pair.pins_for(other)}
                for key, pin in mine.items():
                    got = installed.get(key)
                    if (
                        got
                        and versions_equal(got, pin.version)
                        and key in theirs
                        and not any(versions_equal(got, v) for v in theirs[key].accepted_versions())
                    ):
                        votes[platform].append(f"{key} {got} ({pair.id}'s {platform} pin)")
    said = {pl: why for pl, why in votes.items() if why}
    if len(said) == 1:
        platform, why = next(iter(said.items()))
        return platform, f"the list shows {platform}: {', '.join(dict.fromkeys(why))}"
    if len(said) == 2:
        return None, (
            "the list shows both platforms (" + "; ".join(f"{pl}: {', '.join(dict.fromkeys(w))}" for pl, w in said.items()) + ")"
        )
    return None, "the list does not show its platform"


def read_list_text(path: str | Path) -> tuple[str, str]:
    """The text of a saved package list and the encoding it was read as (core.fileio.decode_guessing: a byte-order
    mark, UTF-8, or cp1252 as cmd writes)."""
    from aipc_env.core.fileio import decode_guessing

    path = Path(path)
    limit = 16 * 2**20
    try:
        with path.open("rb") as fh:
            raw = fh.read(limit + 1)  # from the stream: a device or a pipe has no size to check first
    except OSError as exc:
        raise InputError(f"cannot read the package list: {exc.strerror}", path=path) from None
    if len(raw) > limit:
        raise InputError(
            "the package list is larger than 16 MiB", path=path, fix="save the output of one `pip list` or `pip freeze`"
        )
    text, encoding = decode_guessing(raw, path, "the package list")
    if "\x00" in text:
        raise InputError(
            f"the package list holds NUL characters (read as {encoding})",
            path=path,
            fix="save it from PowerShell with `| Out-File -Encoding utf8`, or as UTF-8",
        )
    return text, encoding


def read_pip_list(path: str | Path, text: str | None = None) -> dict[str, str]:
    path = Path(path)
    text = read_list_text(path)[0] if text is None else text
    try:
        packages = parse_pip_list(text)
    except DuplicatePackage as exc:
        raise InputError(
            str(exc), path=path, fix="paste the output of one `pip list` or `pip freeze`, run in the training env"
        ) from None
    if not packages:
        raise InputError(
            "no packages found in the file",
            path=path,
            fix="save the output of `pip list` or `pip freeze` run in the training env",
        )
    return packages
