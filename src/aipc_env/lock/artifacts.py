"""The artifacts of a lock for one platform and Python: one wheel per package (chosen by tag), the hashed
requirements that install exactly those, and a wheelhouse filled with them (each checked against the lock's
sha256, cached by hash). Used by container images and offline fleet bundles."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal
from urllib.parse import unquote, urlparse

from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import canonicalize_name, parse_wheel_filename

from aipc_env.core.fileio import parse_toml, read_text
from aipc_env.core.formats import VersionedModel
from aipc_env.core.net import download, reachable
from aipc_env.core.platforms import Platform, marker_environment
from aipc_env.core.specs import check_file_name, check_sha256, evaluate_marker, parse_requirement
from aipc_env.errors import AipcError, ExitCode, InputError
from aipc_env.lock.lockfile import Pylock, PylockArtifact

__all__ = [
    "GLIBC_MAX_MINOR",
    "Artifact",
    "HashMismatch",
    "PlannedArtifact",
    "file_sha256",
    "fill_wheelhouse",
    "hashed_requirements",
    "install_plan",
    "select_artifacts",
]

GLIBC_MAX_MINOR = 36
"""Debian 12 ships glibc 2.36: manylinux wheels up to 2_36 install on it."""


@dataclass(frozen=True)
class Artifact:
    name: str
    version: str
    filename: str
    url: str | None
    path: str | None
    sha256: str


def _tags(python: str, platform: Platform) -> list[Tag]:
    major, minor = (int(x) for x in python.split(".")[:2])
    if platform == "win-64":
        platforms = ["win_amd64"]
    else:
        platforms = [f"manylinux_2_{m}_x86_64" for m in range(GLIBC_MAX_MINOR, 16, -1)] + [
            "manylinux2014_x86_64",
            "manylinux2010_x86_64",
            "manylinux1_x86_64",
            "linux_x86_64",
        ]
    return [*cpython_tags((major, minor), platforms=platforms), *compatible_tags((major, minor), platforms=platforms)]


def aipc_env_requirements(wheel: Path | None = None) -> list[str]:
    """aipc-env's own runtime dependencies (no extras): the Requires-Dist of the wheel that will be installed when
    one is given, else the checkout's pyproject.toml, else the installed metadata."""
    import email.parser
    import zipfile
    from importlib import metadata

    from aipc_env.paths import checkout_root

    if wheel is not None:
        with zipfile.ZipFile(wheel) as zf:
            name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
            lines = email.parser.Parser().parsestr(zf.read(name).decode("utf-8")).get_all("Requires-Dist") or []
    else:
        root = checkout_root()
        pyproject = root / "pyproject.toml" if root else None
        project = parse_toml(read_text(pyproject, "pyproject.toml"), pyproject).get("project", {}) if pyproject else {}
        if project.get("name") == "aipc-env":
            lines = list(project.get("dependencies", []))
        else:
            lines = metadata.requires("aipc-env") or []
    found = []
    for line in lines:
        req = parse_requirement(line)
        if req.marker is None or "extra" not in str(req.marker):
            found.append(str(req))
    return found


def check_holds_aipc_env(lock: Pylock, python: str, lockfile: Path, platform: Platform, wheel: Path | None = None) -> None:
    """A bundle or an image installs aipc-env itself offline from the lock's wheels, so the lock must hold every
    dependency aipc-env declares, at a version it accepts: refused by name before anything is fetched."""

    env = marker_environment(platform, python)
    locked = {p.key: p for p in lock.packages if not p.marker or evaluate_marker(p.marker, env)}
    problems = []
    for line in aipc_env_requirements(wheel):
        req = parse_requirement(line)
        if req.marker is not None and not evaluate_marker(req.marker, env):
            continue
        pkg = locked.get(canonicalize_name(req.name))
        if pkg is None:
            problems.append(f"{req.name} is not in the lock")
        elif pkg.version and not req.specifier.contains(pkg.version, prereleases=True):
            problems.append(f"{req.name} {pkg.version} does not satisfy aipc-env's {req}")
    if problems:
        raise InputError(
            "the lock cannot install aipc-env offline: " + "; ".join(problems),
            path=lockfile,
            fix="re-lock the pair (environments/pip-layer.txt lists aipc-env's dependencies): nox -s lock -- --pair PAIR",
        )


def select_artifacts(lock: Pylock, python: str, lockfile: Path, platform: Platform = "linux-64") -> list[Artifact]:
    """One installable wheel per locked package for a platform and Python (the best tag), with its sha256."""
    env = marker_environment(platform, python)
    priority = {tag: i for i, tag in enumerate(_tags(python, platform))}
    chosen = []
    for pkg in sorted(lock.packages, key=lambda p: p.key):
        if pkg.marker and not evaluate_marker(pkg.marker, env):
            continue
        if pkg.key == "aipc-env":  # installed from its own wheel, built from the checkout
            continue
        best: tuple[int, PylockArtifact, str] | None = None
        for wheel in pkg.wheels:
            filename = (wheel.url or wheel.path or "").rsplit("/", 1)[-1]
            try:
                _, _, _, tags = parse_wheel_filename(filename.replace("%2B", "+"))
            except ValueError:
                continue
            rank = min((priority[t] for t in tags if t in priority), default=None)
            if rank is not None and (best is None or rank < best[0]):
                best = (rank, wheel, filename)
        if best is None:
            raise InputError(
                f"{pkg.name} {pkg.version}: no wheel for {platform} / Python {python} in the lock",
                path=lockfile,
                fix=f"images and bundles install wheels only: re-lock for {platform} with this Python",
            )
        _, wheel, filename = best
        sha = wheel.hashes.get("sha256", "")
        if not sha:
            raise InputError(f"{pkg.name}: the locked wheel has no sha256", path=lockfile)
        try:  # every value that goes into a generated file or a path is checked here, once
            check_sha256(sha)
            check_file_name(filename.replace("%2B", "+"), what="wheel file name")
        except ValueError as exc:
            raise InputError(
                f"{pkg.name}: {exc}", path=lockfile, fix="re-lock: nox -s lock (a lock is never hand-edited)"
            ) from None
        chosen.append(Artifact(pkg.name, pkg.version or "", filename.replace("%2B", "+"), wheel.url, wheel.path, sha))
    return chosen


class InstallPlanReport(VersionedModel):
    """`aipc-env env --dry-run --json`: what a build from the lock downloads."""

    FORMAT: ClassVar[str] = "install plan"
    schema_version: Literal[1] = 1
    pair: str
    platform: str
    python: str
    lockfile: str
    known_bytes: int
    size_unknown: list[str]
    artifacts: list[PlannedArtifact]
    known_issues: list[str] = []
    """Known issues of the pair (environments/matrix.yaml) that the machine planned for meets, as warnings."""


@dataclass(frozen=True)
class PlannedArtifact:
    name: str
    version: str
    filename: str
    url: str
    size: int | None
    """Bytes, where the lock records it (uv does for PyPI files; public lockfiles give none)."""
    provenance: str
    where: str
    """The host it is fetched from."""


def install_plan(lock: Pylock, python: str, lockfile: Path, platform: Platform) -> list[PlannedArtifact]:
    """What an env build from this lock downloads for a platform and Python: one wheel per package, its size where
    known, the host it comes from and where its hash came from (pure)."""
    from aipc_env.lock.lockfile import provenance_of

    by_name = {p.key: p for p in lock.packages}
    planned = []
    for a in select_artifacts(lock, python, lockfile, platform):
        pkg = by_name[canonicalize_name(a.name)]
        wheel = next(
            (w for w in pkg.wheels if (w.url or w.path or "").rsplit("/", 1)[-1].replace("%2B", "+") == a.filename), None
        )
        size = (wheel.model_extra or {}).get("size") if wheel is not None else None
        url = a.url or a.path or ""
        planned.append(
            PlannedArtifact(
                a.name,
                a.version,
                a.filename,
                url,
                size if isinstance(size, int) else None,
                provenance_of(pkg)["provenance"],
                urlparse(url).netloc or "local",
            )
        )
    return planned


def hashed_requirements(artifacts: list[Artifact]) -> str:
    lines = [
        "# Generated by aipc-env from the lock: every package pinned to one wheel and its sha256.",
        "# Installed with --no-index --find-links <wheels> --require-hashes.",
    ]
    lines += [f"{a.name}=={a.version} --hash=sha256:{a.sha256}" for a in artifacts]
    return "\n".join(lines) + "\n"


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class HashMismatch(AipcError):
    exit_code = ExitCode.PROBLEMS


def _source(artifact: Artifact, lock_dir: Path, find_links: list[Path]) -> tuple[str, Path | None]:
    """(description, local path or None to download)."""
    for folder in find_links:
        candidate = folder / artifact.filename
        if candidate.is_file():
            return str(candidate), candidate
    if artifact.path:
        p = Path(artifact.path)
        return artifact.path, p if p.is_absolute() else lock_dir / p
    if artifact.url and artifact.url.startswith("file:"):
        return artifact.url, Path(unquote(urlparse(artifact.url).path))
    if artifact.url:
        return artifact.url, None
    raise InputError(f"{artifact.name}: the lock gives neither a URL nor a path for {artifact.filename}")


def _download(url: str, target: Path, filename: str) -> None:
    try:
        download(url, target, timeout=120)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise AipcError(
            f"cannot fetch {filename} from {url}: {getattr(exc, 'reason', None) or exc}",
            exit_code=ExitCode.PROBLEMS,
            fix="run this on a machine that reaches that host, or pass --find-links DIR with a folder "
            "holding the wheel (its sha256 is checked against the lock)",
        ) from None


def _cached(a: Artifact, cache: Path) -> bool:
    return (cache / a.sha256[:2] / a.sha256 / a.filename).is_file()


def _check_hosts(to_download: list[Artifact]) -> None:
    """Before anything is fetched: every host the downloads need answers; else name its first artifact and URL
    (a bundle of 2 GB should not fail after the first 1.9 GB)."""
    first: dict[str, Artifact] = {}
    for a in to_download:
        first.setdefault(urlparse(a.url or "").netloc, a)
    for host, a in first.items():
        if not reachable(a.url or ""):
            raise AipcError(
                f"cannot fetch {a.filename} from {a.url}: {host} cannot be reached",
                exit_code=ExitCode.PROBLEMS,
                fix="run this on a machine that reaches that host, or pass --find-links DIR with a folder "
                "holding the wheel (its sha256 is checked against the lock); nothing was written",
            )


def fill_wheelhouse(
    artifacts: list[Artifact],
    wheelhouse: Path,
    *,
    lock_dir: Path,
    cache: Path,
    find_links: Sequence[Path] = (),
    log: Callable[[str], None] = print,
) -> list[Path]:
    """Put every artifact into `wheelhouse`, verified; returns the files. Cached copies (by sha256) are reused."""
    wheelhouse.mkdir(parents=True, exist_ok=True)
    cache.mkdir(parents=True, exist_ok=True)
    _check_hosts([a for a in artifacts if not _cached(a, cache) and _source(a, lock_dir, list(find_links))[1] is None])
    out = []
    for a in artifacts:
        target = wheelhouse / a.filename
        cached = cache / a.sha256[:2] / a.sha256 / a.filename
        if not cached.is_file() or file_sha256(cached) != a.sha256:
            where, local = _source(a, lock_dir, list(find_links))
            cached.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp_name = tempfile.mkstemp(dir=cached.parent, suffix=".part")
            os.close(fd)
            tmp = Path(tmp_name)
            try:
                if local is not None:
                    if not local.is_file():
                        raise InputError(
                            f"{a.name}: {where} does not exist", fix="check the lock's paths or the wheel folder (--find-links)"
                        )
                    shutil.copyfile(local, tmp)
                else:
                    log(f"downloading {a.filename}")
                    _download(a.url or "", tmp, a.filename)
                got = file_sha256(tmp)
                if got != a.sha256:
                    raise HashMismatch(
                        f"{a.filename} does not match the lock: the lock says sha256 {a.sha256}, the file from {where} has {got}",
                        fix="re-lock, or restore the wheel the lock was made from; nothing was built",
                    )
                os.replace(tmp, cached)
            finally:
                tmp.unlink(missing_ok=True)
        if not target.is_file() or file_sha256(target) != a.sha256:
            shutil.copyfile(cached, target)
        out.append(target)
    return out
