"""The conda layer of a lock (lockfiles/<pair>/conda-lock.yml): the env's interpreter (python, pip and their
closure by `depends`) for win-64 and linux-64, assembled from public conda lock records (pixi.lock files of public
repositories), with where each package was read in conda-sources.json beside it.

conda-lock's own models reject unknown keys, so the sources live in the sidecar; `lock check` holds the two to
each other (every package has its source, with the same URL and sha256) and checks the closure: every dependency
of every package is satisfied inside the lock, by conda's own MatchSpec (vendored in conda-lock)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from aipc_env.core.formats import StrictModel, VersionedModel
from aipc_env.core.platforms import PLATFORMS, Platform
from aipc_env.errors import InputError
from aipc_env.lock.condaspec import (
    CONDA_FORGE,
    CondaSpecError,
    check_build,
    check_conda_name,
    check_conda_spec,
    check_conda_version,
    check_package_url,
    matches,
    split_filename,
)

__all__ = [
    "CONDA_SOURCES_NAME",
    "CondaLock",
    "CondaPackage",
    "CondaSources",
    "PackageSource",
    "RecordSource",
    "closure_problems",
    "conda_layer_python",
    "conda_python",
    "interpreter_drift",
    "layer_for",
    "public_layer_status",
    "read_conda_lock",
    "source_problems",
    "sources_path",
    "split_package_url",
]

CONDA_SOURCES_NAME = "conda-sources.json"
ROOTS = ("python", "pip")
_SHA256 = r"^[0-9a-f]{64}$"
_MD5 = r"^[0-9a-f]{32}$"
_CHANNEL = CONDA_FORGE


class _Hash(StrictModel):
    md5: str = Field(pattern=_MD5)
    sha256: str = Field(pattern=_SHA256)


class CondaPackage(StrictModel):
    """One package of a conda-lock v1 file, as the conda layer needs it (both hashes, a conda-forge URL)."""

    name: str
    version: str
    manager: Literal["conda"]
    platform: Platform
    dependencies: dict[str, str] = {}
    url: str
    hash: _Hash
    category: Literal["main"] = "main"
    optional: Literal[False] = False
    build: str | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_conda_name(value)

    @field_validator("version")
    @classmethod
    def _version(cls, value: str) -> str:
        return check_conda_version(value)

    @field_validator("build")
    @classmethod
    def _build(cls, value: str | None) -> str | None:
        return None if value is None else check_build(value)

    @field_validator("dependencies")
    @classmethod
    def _dependencies(cls, value: dict[str, str]) -> dict[str, str]:
        for name, spec in value.items():
            check_conda_name(name.removeprefix("__"))
            check_conda_spec(spec)
        return value

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        return check_package_url(value, _CHANNEL)

    @model_validator(mode="after")
    def _url_is_this_package(self) -> CondaPackage:
        """The file the installer fetches is this package: its name, version and subdir (the platform or noarch)."""
        name, version, _ = split_filename(self.url)
        subdir = self.url[len(_CHANNEL) :].split("/", 1)[0]
        if name != self.name or version != self.version or subdir not in (self.platform, "noarch"):
            raise ValueError(
                f"url {self.url[:160]!r} is not {self.name} {self.version} for {self.platform} (name, version or subdir)"
            )
        return self


class _Meta(StrictModel):
    content_hash: dict[str, str]
    channels: list[dict[Any, Any]]  # keys unchecked, as conda-lock writes them
    platforms: list[Platform]
    sources: list[str]
    time_metadata: dict[Any, Any] | None = None
    git_metadata: dict[Any, Any] | None = None
    inputs_metadata: dict[Any, Any] | None = None
    custom_metadata: dict[Any, Any] | None = None


class CondaLock(StrictModel):
    """lockfiles/<pair>/conda-lock.yml: conda-lock's v1 format, restricted to what the conda layer may hold."""

    version: Literal[1]
    metadata: _Meta
    package: list[CondaPackage]

    def of(self, platform: str) -> list[CondaPackage]:
        return [p for p in self.package if p.platform == platform]


class RecordSource(StrictModel):
    """A public lock file read: repository, path and commit (and the environment of a pixi.lock)."""

    repository: str = Field(pattern=r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
    path: str
    commit: str = Field(pattern=r"^[0-9a-f]{40}$")
    environment: str | None = None


class PackageSource(StrictModel):
    platform: Platform
    name: str
    url: str
    sha256: str = Field(pattern=_SHA256)
    source: str
    """A key of CondaSources.sources."""


class CondaSources(VersionedModel):
    """lockfiles/<pair>/conda-sources.json: where each package of the conda layer was read."""

    FORMAT: ClassVar[str] = "conda layer sources"
    FIX: ClassVar[str] = "re-assemble the conda layer: python -m aipc_env.lock.conda_layer"
    schema_version: Literal[1] = 1
    python: str
    """The interpreter's full version (both platforms)."""
    roots: list[str] = list(ROOTS)
    sources: dict[str, RecordSource]
    packages: list[PackageSource]


def sources_path(lock_dir: Path) -> Path:
    return lock_dir / CONDA_SOURCES_NAME


def read_conda_lock(path: Path) -> CondaLock:
    from pydantic import ValidationError

    from aipc_env.core.fileio import read_yaml
    from aipc_env.errors import validation_message

    raw = read_yaml(path, "conda-lock file")
    try:
        return CondaLock.model_validate(raw)
    except ValidationError as exc:
        raise validation_message(exc, path) from None


def conda_python(lock: CondaLock, platform: str) -> str | None:
    """The interpreter version the conda layer holds for a platform."""
    return next((p.version for p in lock.of(platform) if p.name == "python"), None)


def conda_layer_python(lock_dir: Path, platform: str) -> str | None:
    """The interpreter version a lock folder's conda layer holds for a platform (None: no layer)."""
    from aipc_env.lock.lockfile import conda_lock_path

    path = conda_lock_path(lock_dir)
    return conda_python(read_conda_lock(path), platform) if path.is_file() else None


def public_layer_status(lock_dir: Path, python: str, pythons: list[str]) -> dict[str, str] | None:
    """lock-meta.json's conda_layer for a layer assembled from public records in lock_dir (conda-sources.json),
    where it holds the envs' Python; None where there is none."""
    from aipc_env.core.formats import load_versioned

    if not sources_path(lock_dir).is_file():
        return None
    sources = load_versioned(CondaSources, sources_path(lock_dir))
    if sources.python.split(".")[:2] != python.split(".")[:2]:
        return None
    read = "; ".join(
        f"{s.repository} {s.path}@{s.commit[:12]}" + (f", environment {s.environment}" if s.environment else "")
        for s in sources.sources.values()
    )
    others = [p for p in pythons if p != python]
    return {
        "status": "locked",
        "python": sources.python,
        "reason": f"assembled from public lock records ({CONDA_SOURCES_NAME}: {read}); the conda channels could "
        "not be reached to lock it here",
        "uncovered": (
            f"{', '.join(others)}: no conda layer; the env build's conda interpreter is Python {python} "
            "(lock-meta python), and a --base-python venv brings its own interpreter"
        )
        if others
        else "",
    }


def layer_for(lock_dir: Path, platform: str, python: str) -> tuple[Path | None, str]:
    """(the conda-lock file to build the interpreter from, or None; why). The layer is used where it holds this
    platform's interpreter at the env's Python minor; otherwise the build falls back to `conda create python=X.Y`
    (unpinned), and says so."""
    from aipc_env.lock.lockfile import conda_lock_path

    path = conda_lock_path(lock_dir)
    if not path.is_file():
        return None, (f"no conda layer in {lock_dir}: the interpreter comes from `conda create python={python}` (unpinned)")
    held = conda_python(read_conda_lock(path), platform)
    if held is None or held.split(".")[:2] != python.split(".")[:2]:
        return None, (
            f"the conda layer holds Python {held or 'nothing'} for {platform}, not {python}: the "
            f"interpreter comes from `conda create python={python}` (unpinned)"
        )
    return path, f"interpreter: Python {held} from the conda layer {path}"


def interpreter_drift(lock_dir: Path, platform: str, installed: str) -> tuple[str, str] | None:
    """(locked, installed) where the env's interpreter is at the conda layer's Python minor but another release;
    None where they agree or the layer does not cover the env's Python (the fallback)."""
    path, _ = layer_for(lock_dir, platform, installed)
    if path is None:
        return None
    held = conda_python(read_conda_lock(path), platform)
    return None if held == installed else (held or "", installed)


def closure_problems(lock: CondaLock) -> list[str]:
    """Every dependency of every package satisfied inside the lock (per platform), by conda's MatchSpec; the roots
    present; no package twice."""
    from aipc_env.lock.condaspec import can_check_closure

    if not can_check_closure():
        from aipc_env.errors import AipcError

        raise AipcError(
            "checking the conda layer's closure needs conda-lock (conda's MatchSpec)", fix="pip install 'aipc-env[lock]'"
        ) from None
    problems = []
    for platform in lock.metadata.platforms:
        pkgs = lock.of(platform)
        names = [p.name for p in pkgs]
        problems += [f"{platform}: {n} appears {names.count(n)} times" for n in sorted(set(names)) if names.count(n) > 1]
        problems += [f"{platform}: no {root}" for root in ROOTS if root not in names]
        by_name = {p.name: p for p in pkgs}
        for p in pkgs:
            for dep, spec in p.dependencies.items():
                if dep.startswith("__"):  # a virtual package: the machine provides it (conda checks it at install)
                    continue
                have = by_name.get(dep)
                if have is None:
                    problems.append(f"{platform}: {p.name} {p.version} depends on {dep} {spec}: not in the lock")
                    continue
                build = have.build or _build_of(have.url)
                try:
                    ok = matches(dep, spec, {"name": dep, "version": have.version, "build": build, "build_number": 0})
                except CondaSpecError as exc:
                    problems.append(f"{platform}: {p.name} {p.version} depends on {dep} {spec}: {exc}")
                    continue
                if not ok:
                    problems.append(
                        f"{platform}: {p.name} {p.version} depends on {dep} {spec}: the lock has {have.version} ({build})"
                    )
    missing = [x for x in PLATFORMS if x not in lock.metadata.platforms]
    if missing:
        problems.append(f"no conda layer for {', '.join(missing)}")
    return problems


def source_problems(lock: CondaLock, sources: CondaSources) -> list[str]:
    """Every package of the lock has its source record with the same URL and sha256, and nothing else is there."""
    recorded = {(s.platform, s.url): s for s in sources.packages}
    problems = []
    for p in lock.package:
        s = recorded.pop((p.platform, p.url), None)
        if s is None:
            problems.append(f"{p.platform}: {p.name} {p.version}: no source recorded for {p.url}")
        elif s.sha256 != p.hash.sha256:
            problems.append(
                f"{p.platform}: {p.name} {p.version}: sha256 {p.hash.sha256} in the lock, {s.sha256} where it was read"
            )
        elif s.source not in sources.sources:
            problems.append(f"{p.platform}: {p.name}: unknown source {s.source!r}")
    problems += [f"{pl}: {url}: a source for a package the lock does not hold" for pl, url in recorded]
    for platform in lock.metadata.platforms:
        if conda_python(lock, platform) != sources.python:
            problems.append(
                f"{platform}: python {conda_python(lock, platform)} in the lock, {sources.python} in {CONDA_SOURCES_NAME}"
            )
    return problems


def _build_of(url: str) -> str:
    return split_package_url(url)[2]


def split_package_url(url: str) -> tuple[str, str, str]:
    """(name, version, build) of a conda package URL, or a named error."""
    try:
        return split_filename(url)
    except CondaSpecError as exc:
        raise InputError(str(exc), key="url", fix="a conda package URL names <name>-<version>-<build>.conda") from None
