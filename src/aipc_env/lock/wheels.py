"""The PyTorch XPU index's wheels as product data (environments/xpu-wheels.yaml): file, URL, sha256 and where each
hash was read (public lockfiles), for locking pairs when that index cannot be reached. Models, loading, and the
artifacts of one pair (pure given the file). Superseded and unhashed entries are kept as records, never locked."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import ClassVar, Literal

from packaging.requirements import InvalidRequirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version
from pydantic import Field, field_validator, model_validator

from aipc_env.core.formats import StrictModel, VersionedModel
from aipc_env.core.platforms import Platform, wheel_platform_fits
from aipc_env.core.specs import check_specifier, check_version, parse_requirement, parse_version
from aipc_env.lock.coremeta import CoreMetadata
from aipc_env.matrix import Pair

__all__ = [
    "MetadataQuote",
    "PairArtifacts",
    "WheelEntry",
    "WheelManifest",
    "WheelMetadata",
    "load_wheel_manifest",
    "manifest_path",
    "pair_artifacts",
    "torch_requires_dist",
]

SHA256 = r"^[0-9a-f]{64}$"


class WheelEntry(StrictModel):
    file: str
    package: str
    version: str
    python: str
    """The wheel's Python tag(s) as the source wrote them, e.g. cp312 (cp313/cp313t: free-threaded too)."""
    platform: str
    url: str = Field(pattern=r"^https://")
    sha256: str | None = Field(default=None, pattern=SHA256)
    status: Literal["current", "superseded", "no-hash"]
    sources: list[str] = Field(min_length=1)
    """repository:path@commit of each public file the hash was read from."""
    independent_sources: int = Field(ge=0)
    note: str | None = None

    @model_validator(mode="after")
    def _consistent(self) -> WheelEntry:
        try:
            name, version, _, tags = parse_wheel_filename(self.file)
        except InvalidWheelFilename as exc:
            raise ValueError(f"{self.file!r} is not a wheel file name: {exc}") from None
        if name != canonicalize_name(self.package) or version != parse_version(self.version):
            raise ValueError(f"{self.file} is {name} {version}, not {self.package} {self.version}")
        if not any(t.platform in self.platform.split(".") for t in tags):
            raise ValueError(f"{self.file} is not for platform {self.platform}")
        if self.status == "current" and not self.sha256:
            raise ValueError(f"{self.file}: a current entry needs its sha256")
        if self.status == "no-hash" and self.sha256:
            raise ValueError(f"{self.file}: a no-hash entry has a sha256")
        if self.url.rsplit("/", 1)[-1].replace("%2B", "+") != self.file:
            raise ValueError(f"{self.file}: the URL names another file ({self.url})")
        return self

    @property
    def key(self) -> str:
        return canonicalize_name(self.package)

    @property
    def python_minors(self) -> list[str]:
        """The CPython versions this wheel installs on, e.g. ["3.12"]."""
        return sorted({f"3.{m.group(1)}" for m in re.finditer(r"cp3(\d+)(?!t)\b", self.python)})

    def for_platform(self, platform: Platform) -> bool:
        return any(wheel_platform_fits(tag, platform) for tag in self.platform.split("."))


class MetadataQuote(StrictModel):
    """Lines of one public source as that source shows them: a file of a repository at a commit (a lockfile's
    dependency record, the project's setup.py at the release tag), or a wheel's METADATA read from its index (the
    wheel named by its sha256)."""

    repository: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
    path: str | None = Field(default=None, min_length=1)
    commit: str | None = Field(default=None, pattern=r"^[0-9a-f]{7,40}$")
    url: str | None = Field(default=None, pattern=r"^(https?|file)://")
    sha256: str | None = Field(default=None, pattern=SHA256)
    lines: list[str] = Field(min_length=1)
    """Verbatim, one source line each (whitespace at the ends stripped)."""

    @model_validator(mode="after")
    def _one_source(self) -> MetadataQuote:
        in_repo = (self.repository, self.path, self.commit)
        if all(in_repo) and not (self.url or self.sha256):
            return self
        if self.url and self.sha256 and not any(in_repo):
            return self
        raise ValueError("a quote names either repository, path and commit, or url and sha256 (the wheel read)")

    @property
    def where(self) -> str:
        return f"{self.repository}:{self.path}@{self.commit}" if self.repository else f"{self.url} ({self.sha256})"


def _quoted_names(quotes: list[MetadataQuote]) -> str:
    return " ".join(line for q in quotes for line in q.lines).lower().replace("_", "-")


class WheelMetadata(StrictModel):
    """One XPU-index release's core metadata as its wheels publish it, and where that was read (or inferred from).
    A `published` record carries its quotes: the source's own lines, with the commit (or wheel) they were read at,
    naming every package it requires; anything else is `inferred`, and `sources` says from what."""

    package: str
    version: str
    platforms: list[Platform] = ["win-64", "linux-64"]
    requires_dist: list[str]
    requires_python: str | None = None
    certainty: Literal["published", "inferred"]
    sources: list[str] = Field(min_length=1)
    """Where it was read (certainty published), or what it was inferred from (inferred)."""
    quotes: list[MetadataQuote] = []
    """The source lines a `published` record stands on (inferred records may quote what they were inferred from)."""
    note: str | None = None

    @model_validator(mode="after")
    def _published_is_quoted(self) -> WheelMetadata:
        if self.certainty != "published":
            return self
        if not self.quotes:
            raise ValueError(
                f"{self.package} {self.version}: a published record needs `quotes` (repository, path, "
                "commit and the lines as the source shows them); without them it is inferred"
            )
        shown = _quoted_names(self.quotes)
        unquoted = [line for line in self.requires_dist if canonicalize_name(parse_requirement(line).name) not in shown]
        if unquoted:
            raise ValueError(
                f"{self.package} {self.version}: published, but no quoted line shows "
                f"{', '.join(unquoted)}; quote it or mark the record inferred"
            )
        return self

    @field_validator("version")
    @classmethod
    def _version(cls, value: str) -> str:
        return check_version(value)

    @field_validator("requires_dist")
    @classmethod
    def _requirements(cls, value: list[str]) -> list[str]:
        for line in value:
            try:
                parse_requirement(line)
            except InvalidRequirement as exc:
                raise ValueError(f"{line!r} is not a PEP 508 requirement: {exc}") from None
        return value

    @field_validator("requires_python")
    @classmethod
    def _python(cls, value: str | None) -> str | None:
        return None if value is None else check_specifier(value)

    @property
    def key(self) -> str:
        return canonicalize_name(self.package)

    def core(self) -> CoreMetadata:
        return CoreMetadata(self.package, self.version, tuple(self.requires_dist), self.requires_python)


class WheelManifest(VersionedModel):
    """environments/xpu-wheels.yaml."""

    FORMAT: ClassVar[str] = "XPU wheel manifest"
    FIX: ClassVar[str] = "restore environments/xpu-wheels.yaml from the checkout"
    schema_version: Literal[1] = 1
    index: str
    wheels: list[WheelEntry]
    metadata: list[WheelMetadata] = []

    @model_validator(mode="after")
    def _one_current_per_file(self) -> WheelManifest:
        seen: set[str] = set()
        for w in self.wheels:
            if w.status == "current":
                if w.file in seen:
                    raise ValueError(f"{w.file}: two current entries")
                seen.add(w.file)
        records: set[tuple[str, Version, str]] = set()
        for m in self.metadata:
            for platform in m.platforms:
                key = (m.key, parse_version(m.version), platform)
                if key in records:
                    raise ValueError(f"metadata: {m.package} {m.version} is recorded twice for {platform}")
                records.add(key)
        return self

    def metadata_for(self, package: str, version: str, platform: Platform) -> WheelMetadata | None:
        """The recorded core metadata of a release on a platform (None: not recorded)."""
        key, wanted = canonicalize_name(package), parse_version(version)
        return next(
            (m for m in self.metadata if m.key == key and parse_version(m.version) == wanted and platform in m.platforms), None
        )

    def current(self) -> list[WheelEntry]:
        return [w for w in self.wheels if w.status == "current"]

    def by_file(self) -> dict[str, WheelEntry]:
        return {w.file: w for w in self.current()}


def torch_requires_dist(
    pair: Pair, torch: str, platform: Platform = "linux-64", manifest: WheelManifest | None = None
) -> list[str]:
    """torch+xpu's own Requires-Dist as the manifest records it (empty when it records none)."""
    record = (manifest or load_wheel_manifest()).metadata_for("torch", f"{torch}+xpu", platform)
    return list(record.requires_dist) if record else []


def manifest_path() -> Path:
    """environments/xpu-wheels.yaml; $AIPC_ENV_WHEEL_MANIFEST names another (a `matrix refresh` candidate)."""
    import os

    from aipc_env.paths import environments_dir

    return Path(os.environ.get("AIPC_ENV_WHEEL_MANIFEST") or environments_dir() / "xpu-wheels.yaml")


@cache
def _load(path: Path) -> WheelManifest:
    from aipc_env.core.formats import load_versioned

    return load_versioned(WheelManifest, path)


def load_wheel_manifest(path: Path | None = None) -> WheelManifest:
    return _load(Path(path or manifest_path()).resolve())


@dataclass(frozen=True)
class PairArtifacts:
    """The XPU-index wheels of one pair's torch release on one platform: per package, its version and wheels, for
    the Python versions every package has a wheel for."""

    torch: str
    packages: dict[str, tuple[str, list[WheelEntry]]]
    pythons: list[str]
    missing: list[str]
    """What the manifest lacks for this torch release on this platform (packages or whole Pythons)."""


def pair_artifacts(
    pair: Pair, platform: Platform, torch: str, manifest: WheelManifest, allowed_pythons: list[str]
) -> PairArtifacts:
    """torch (+xpu), its torchvision and its Triton (where the pair ships Triton on the platform), current entries
    only, limited to `allowed_pythons` that have a wheel of every package."""
    wanted = {"torch": f"{torch}+xpu"}
    torchvision = pair.torchvision_version(torch)
    if torchvision:
        wanted["torchvision"] = torchvision
    if pair.triton.applies_to(platform):
        wanted[pair.triton.key] = pair.triton_for(torch)
    found: dict[str, list[WheelEntry]] = {key: [] for key in wanted}
    for w in manifest.current():
        if w.key in wanted and parse_version(w.version) == parse_version(wanted[w.key]) and w.for_platform(platform):
            found[w.key].append(w)
    missing = [f"{key} {version}: no hashed wheel for {platform}" for key, version in wanted.items() if not found[key]]
    per_python = {key: {m for w in wheels for m in w.python_minors} for key, wheels in found.items()}
    pythons = [p for p in allowed_pythons if all(p in minors for minors in per_python.values())]
    missing += [
        f"Python {p}: no {', '.join(k for k, m in per_python.items() if p not in m)} wheel"
        for p in allowed_pythons
        if p not in pythons and any(per_python.values())
    ]
    packages = {
        key: (wanted[key], sorted([w for w in found[key] if set(w.python_minors) & set(pythons)], key=lambda w: w.file))
        for key in wanted
    }
    return PairArtifacts(torch=torch, packages=packages, pythons=pythons, missing=missing)
