"""A tool's version read from the files beside it, so the doctor never starts a Python CLI just to ask.

conda, mamba and conda-lock are entry points of a prefix (a Miniforge root, a conda env, a venv). What
`<tool> --version` prints is recorded twice on disk:

- `<prefix>/conda-meta/<name>-<version>-<build>.json`: conda's record of every package it installed;
- `<site-packages>/<name>-<version>.dist-info/METADATA`: the Python distribution's own metadata (pip, uv).

The prefix is found from the entry point: its folder's parent (`bin/`, `Scripts/`, `condabin/`), one more
level for `Library/bin` on Windows, or the prefix of the interpreter its shebang names. Reads only; a tool
whose files say nothing (a standalone micromamba, an odd layout) gets `None` and is asked by process.
Standard library only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from aipc_env.core.fileio import loads_json

__all__ = [
    "FileVersion",
    "candidate_prefixes",
    "conda_meta_version",
    "dist_info_version",
    "env_layout_from_files",
    "shebang_interpreter",
    "version_from_files",
]

VersionSource = Literal["conda-meta", "dist-info"]
MAX_RECORD_BYTES = 8 * 2**20
"""A conda-meta record lists every file of its package; conda's own is about 1 MB. Larger is not a record."""
MAX_SCRIPT_HEAD = 4096
PREFIX_LEVELS = 3
"""`<prefix>/bin/x`, `<prefix>/Scripts/x.exe`, `<prefix>/Library/bin/x.exe`: at most three levels up."""

_PIP_SH_SHEBANG = re.compile(r"""^'''exec' (?:'([^']+)'|"([^"]+)"|(\S+))""", re.MULTILINE)


@dataclass(frozen=True)
class FileVersion:
    version: str
    source: VersionSource
    path: Path
    """The file that said it."""


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def conda_meta_version(prefix: Path, name: str) -> FileVersion | None:
    """The version conda recorded for package `name` in `prefix`, if it installed it."""
    meta = prefix / "conda-meta"
    if not meta.is_dir():
        return None
    found: list[FileVersion] = []
    for record in meta.glob(f"{name}-*.json"):
        parts = record.name[: -len(".json")].rsplit("-", 2)
        if len(parts) != 3 or parts[0] != name:  # conda-lock-*.json also matches conda-*.json
            continue
        try:  # standard library only: bounded by size first; a nesting past the recursion limit is skipped too
            if record.stat().st_size > MAX_RECORD_BYTES:
                continue
            data = loads_json(record.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):
            continue
        if isinstance(data, dict) and data.get("name") == name and isinstance(data.get("version"), str):
            found.append(FileVersion(data["version"], "conda-meta", record))
    return found[0] if len(found) == 1 else None


def _site_packages(prefix: Path) -> list[Path]:
    sites = [prefix / "Lib" / "site-packages", prefix / "lib" / "site-packages"]
    for lib in ("lib", "lib64"):
        base = prefix / lib
        if base.is_dir():
            sites += sorted(base.glob("python3*/site-packages"))
    unique: dict[Path, Path] = {}
    for site in sites:
        if site.is_dir():
            unique.setdefault(site.resolve(), site)  # a venv's lib64 is a link to lib
    return list(unique.values())


def _metadata_version(path: Path) -> str | None:
    try:
        with path.open(encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if not line.strip():
                    break  # the headers end at the first blank line
                if line.startswith("Version:"):
                    return line.split(":", 1)[1].strip() or None
    except OSError:
        return None
    return None


def dist_info_version(prefix: Path, name: str) -> FileVersion | None:
    """The version of distribution `name` installed in `prefix`'s site-packages (exactly one copy)."""
    wanted = _canonical(name)
    found: list[FileVersion] = []
    for site in _site_packages(prefix):
        for info in site.glob("*.dist-info"):
            dist = info.name[: -len(".dist-info")].rsplit("-", 1)[0]
            if _canonical(dist) != wanted:
                continue
            version = _metadata_version(info / "METADATA")
            if version:
                found.append(FileVersion(version, "dist-info", info / "METADATA"))
    return found[0] if len(found) == 1 else None


def shebang_interpreter(script: Path) -> Path | None:
    """The interpreter a POSIX entry-point script runs: `#!/x/python`, or pip's `/bin/sh` form for long paths
    and paths with spaces (`'''exec' '/x y/python' "$0" "$@"`). None for binaries and `#!/usr/bin/env`."""
    try:
        with script.open("rb") as handle:
            head = handle.read(MAX_SCRIPT_HEAD)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    text = head.decode("utf-8", errors="replace")
    first = text.splitlines()[0][2:].strip()
    if first in ("/bin/sh", "/usr/bin/sh"):
        match = _PIP_SH_SHEBANG.search(text)
        return Path(next(g for g in match.groups() if g)) if match else None
    if not first or first.split()[0].endswith("/env"):
        return None
    return Path(first.split()[0])


def _is_prefix(path: Path) -> bool:
    return (path / "conda-meta").is_dir() or (path / "pyvenv.cfg").is_file() or bool(_site_packages(path))


def _nearest_prefix(entry_point: Path) -> Path | None:
    return next((p for p in list(entry_point.parents)[1 : PREFIX_LEVELS + 1] if _is_prefix(p)), None)


def candidate_prefixes(entry_point: Path) -> list[Path]:
    """The environments the package behind an entry point may live in, nearest first: the first folder above
    it that is an environment (a conda prefix, a venv, a user site), the same for the file a symlink points to
    (pipx), then the prefix of the interpreter its shebang names. Never a conda root above a conda env: the
    nearest environment is the one the tool belongs to."""
    prefixes = [_nearest_prefix(entry_point)]
    try:
        real = entry_point.resolve()
    except OSError:
        real = entry_point
    if real != entry_point:
        prefixes.append(_nearest_prefix(real))
    interpreter = shebang_interpreter(entry_point)
    if interpreter is not None and _is_prefix(interpreter.parent.parent):
        prefixes.append(interpreter.parent.parent)
    return [p for p in dict.fromkeys(prefixes) if p is not None]


def version_from_files(name: str, entry_point: Path) -> FileVersion | None:
    """What `<name> --version` prints, read from the records of the environment that holds `entry_point`:
    conda's record (it installed the tool), else the distribution's METADATA. None when no file says it."""
    for prefix in candidate_prefixes(entry_point):
        found = conda_meta_version(prefix, name) or dist_info_version(prefix, name)
        if found:
            return found
    return None


def _pyvenv_cfg(prefix: Path) -> dict[str, str]:
    try:
        text = (prefix / "pyvenv.cfg").read_text(encoding="utf-8", errors="replace")[:65536]
    except OSError:
        return {}
    values = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip().lower()] = value.strip()
    return values


def env_layout_from_files(prefix: Path) -> tuple[str, list[str]] | None:
    """An env's Python version and its site-packages, from pyvenv.cfg (venv: `version`, uv: `version_info`) or
    conda's python record, without starting its interpreter. None where the files do not settle it: a venv
    that also sees the system site-packages, no version record, or not exactly one site-packages of that
    version."""
    cfg = _pyvenv_cfg(prefix)
    if cfg.get("include-system-site-packages", "false").lower() == "true":
        return None
    version = cfg.get("version_info") or cfg.get("version")
    if not version:
        record = conda_meta_version(prefix, "python")
        version = record.version if record else None
    match = re.match(r"^(3)\.(\d+)\.(\d+)", version or "")
    if not match:
        return None
    major_minor = f"python{match.group(1)}.{match.group(2)}"
    sites = [s for s in _site_packages(prefix) if s.parent.name in (major_minor, "Lib", "lib")]
    if len(sites) != 1:
        return None
    return ".".join(match.groups()), [str(sites[0])]
