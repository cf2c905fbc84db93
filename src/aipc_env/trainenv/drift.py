"""Drift between an env and its lock (pure): missing, extra, different version, a lock artifact that changed since
the install (manifest), and installed files that no longer match their RECORD hashes."""

from __future__ import annotations

from typing import ClassVar, Literal

from packaging.utils import canonicalize_name

from aipc_env.core.formats import StrictModel, VersionedModel
from aipc_env.core.platforms import Platform, marker_environment
from aipc_env.core.specs import evaluate_marker
from aipc_env.lock.lockfile import Pylock
from aipc_env.matrix import versions_equal

__all__ = [
    "IGNORED",
    "DriftItem",
    "EnvCheckReport",
    "Manifest",
    "ManifestPackage",
    "compute_drift",
    "locked_packages",
]

IGNORED = {"pip", "setuptools", "wheel"}
"""Installed by the conda layer (or venv seeding), not by the pip layer."""


class DriftItem(StrictModel):
    kind: Literal["missing", "extra", "version", "hash", "modified", "interpreter"]
    name: str
    locked: str | None = None
    installed: str | None = None
    files: list[str] = []
    """For `modified`: installed files whose content differs from the wheel's RECORD."""

    def describe(self) -> str:
        return {
            "missing": f"{self.name} {self.locked}: in the lock, not installed",
            "extra": f"{self.name} {self.installed}: installed, not in the lock",
            "version": f"{self.name}: lock has {self.locked}, env has {self.installed}",
            "hash": f"{self.name}: the lock's artifact changed (sha256 {self.locked}), env has {self.installed}",
            "modified": f"{self.name} {self.installed}: {len(self.files)} installed file(s) changed since the "
            f"install ({', '.join(self.files[:3])}{' ...' if len(self.files) > 3 else ''})",
            "interpreter": f"{self.name}: the lock's conda layer has {self.locked}, env has {self.installed} "
            "(the interpreter is not repaired in place: build a new env)",
        }[self.kind]


class ManifestPackage(StrictModel):
    version: str
    sha256: str


class Manifest(VersionedModel):
    """<prefix>/aipc-env-manifest.json: what aipc-env installed, artifact by artifact."""

    FORMAT: ClassVar[str] = "env manifest"
    LEGACY_KEYS: ClassVar[dict[str, str]] = {"manifest_version": "schema_version"}
    FIX: ClassVar[str] = "rebuild the env: nox -s env"
    schema_version: Literal[1] = 1
    pair: str | None
    platform: str
    lockfile: str
    installed_at: str
    packages: dict[str, ManifestPackage]


class EnvCheckReport(VersionedModel):
    """`aipc-env env --check --json`."""

    FORMAT: ClassVar[str] = "env check report"
    schema_version: Literal[1] = 1
    pair: str
    prefix: str
    lockfile: str
    drift: list[DriftItem]

    @property
    def clean(self) -> bool:
        return not self.drift


def locked_packages(lock: Pylock, platform: Platform, python: str) -> dict[str, tuple[str, str]]:
    env = marker_environment(platform, python)
    out = {}
    for p in lock.packages:
        if p.marker and not evaluate_marker(p.marker, env):
            continue
        sha = next((a.hashes.get("sha256", "") for a in p.artifacts), "")
        out[p.key] = (p.version or "", sha)
    return out


def compute_drift(
    lock: Pylock,
    installed: dict[str, str],
    manifest: Manifest | None,
    platform: Platform,
    python: str,
    modified: dict[str, list[str]] | None = None,
) -> list[DriftItem]:
    installed = {canonicalize_name(k): v for k, v in installed.items()}
    locked = locked_packages(lock, platform, python)
    items: list[DriftItem] = []
    for name, (version, sha) in sorted(locked.items()):
        got = installed.get(name)
        if got is None:
            items.append(DriftItem(kind="missing", name=name, locked=version))
        elif not versions_equal(got, version):
            items.append(DriftItem(kind="version", name=name, locked=version, installed=got))
        elif manifest is not None and name in manifest.packages and manifest.packages[name].sha256 != sha:
            items.append(DriftItem(kind="hash", name=name, locked=sha[:12], installed=manifest.packages[name].sha256[:12]))
        elif modified and modified.get(name):
            items.append(DriftItem(kind="modified", name=name, locked=version, installed=got, files=sorted(modified[name])))
    for name, version in sorted(installed.items()):
        if name not in locked and name not in IGNORED:
            items.append(DriftItem(kind="extra", name=name, installed=version))
    return items
