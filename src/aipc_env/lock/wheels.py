"""The PyTorch XPU index's wheels as product data (environments/xpu-wheels.yaml): file, URL, sha256 and where each
hash was read (public lockfiles), for locking pairs when that index cannot be reached. Models, loading, and the
artifacts of one pair (pure given the file). Superseded and unhashed entries are kept as records, never locked."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import ClassVar, Literal

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version
from pydantic import Field, model_validator

from aipc_env.formats import StrictModel, VersionedModel
from aipc_env.matrix import Pair
from aipc_env.platforms import Platform

__all__ = ["PLATFORM_TAGS", "PairArtifacts", "WheelEntry", "WheelManifest", "load_wheel_manifest", "manifest_path",
           "pair_artifacts"]

PLATFORM_TAGS: dict[Platform, tuple[str, ...]] = {
    "win-64": ("win_amd64",),
    "linux-64": ("linux_x86_64", "manylinux_2_28_x86_64", "manylinux_2_27_x86_64"),
}
"""Wheel platform tags that install on each target (torch <= 2.12 is tagged linux_x86_64, later manylinux)."""
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
        if name != canonicalize_name(self.package) or version != Version(self.version):
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
        return any(tag in PLATFORM_TAGS[platform] for tag in self.platform.split("."))


class WheelManifest(VersionedModel):
    """environments/xpu-wheels.yaml."""

    FORMAT: ClassVar[str] = "XPU wheel manifest"
    FIX: ClassVar[str] = "restore environments/xpu-wheels.yaml from the checkout"
    schema_version: Literal[1] = 1
    index: str
    wheels: list[WheelEntry]

    @model_validator(mode="after")
    def _one_current_per_file(self) -> WheelManifest:
        seen: set[str] = set()
        for w in self.wheels:
            if w.status == "current":
                if w.file in seen:
                    raise ValueError(f"{w.file}: two current entries")
                seen.add(w.file)
        return self

    def current(self) -> list[WheelEntry]:
        return [w for w in self.wheels if w.status == "current"]

    def by_file(self) -> dict[str, WheelEntry]:
        return {w.file: w for w in self.current()}


def manifest_path() -> Path:
    from aipc_env.paths import environments_dir

    return environments_dir() / "xpu-wheels.yaml"


@cache
def _load(path: Path) -> WheelManifest:
    from aipc_env.formats import load_versioned

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


def pair_artifacts(pair: Pair, platform: Platform, torch: str, manifest: WheelManifest,
                   allowed_pythons: list[str]) -> PairArtifacts:
    """torch (+xpu), its torchvision and its Triton (where the pair ships Triton on the platform), current entries
    only, limited to `allowed_pythons` that have a wheel of every package."""
    wanted = {"torch": f"{torch}+xpu"}
    torchvision = pair.torchvision_for(torch)
    if torchvision:
        wanted["torchvision"] = f"{torchvision}+xpu"
    if pair.triton.applies_to(platform):
        wanted[pair.triton.key] = pair.triton_for(torch)
    found: dict[str, list[WheelEntry]] = {key: [] for key in wanted}
    for w in manifest.current():
        if w.key in wanted and Version(w.version) == Version(wanted[w.key]) and w.for_platform(platform):
            found[w.key].append(w)
    missing = [f"{key} {version}: no hashed wheel for {platform}" for key, version in wanted.items() if not found[key]]
    per_python = {key: {m for w in wheels for m in w.python_minors} for key, wheels in found.items()}
    pythons = [p for p in allowed_pythons if all(p in minors for minors in per_python.values())]
    missing += [f"Python {p}: no {', '.join(k for k, m in per_python.items() if p not in m)} wheel"
                for p in allowed_pythons if p not in pythons and any(per_python.values())]
    packages = {key: (wanted[key], sorted([w for w in found[key] if set(w.python_minors) & set(pythons)],
                                          key=lambda w: w.file)) for key in wanted}
    return PairArtifacts(torch=torch, packages=packages, pythons=pythons, missing=missing)
