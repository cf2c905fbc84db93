"""Drift between an env and its lock (pure): missing, extra, different version, different artifact hash."""

from __future__ import annotations

from typing import Literal

from packaging.markers import Marker
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version
from pydantic import BaseModel

from aipc_env.lock.lockfile import Pylock
from aipc_env.platforms import Platform, marker_environment

__all__ = ["DriftItem", "compute_drift", "IGNORED", "Manifest"]

IGNORED = {"pip", "setuptools", "wheel"}
"""Installed by the conda layer (or venv seeding), not by the pip layer."""


class DriftItem(BaseModel):
    kind: Literal["missing", "extra", "version", "hash"]
    name: str
    locked: str | None = None
    installed: str | None = None

    def describe(self) -> str:
        return {"missing": f"{self.name} {self.locked}: in the lock, not installed",
                "extra": f"{self.name} {self.installed}: installed, not in the lock",
                "version": f"{self.name}: lock has {self.locked}, env has {self.installed}",
                "hash": f"{self.name}: the lock's artifact changed (sha256 {self.locked}), env has {self.installed}",
                }[self.kind]


class Manifest(BaseModel):
    """<prefix>/aipc-env-manifest.json: what aipc-env installed, artifact by artifact."""

    manifest_version: int = 1
    pair: str | None
    platform: str
    lockfile: str
    installed_at: str
    packages: dict[str, dict[str, str]]
    """name -> {version, sha256}."""


def _same(a: str | None, b: str | None) -> bool:
    try:
        return Version(a or "") == Version(b or "")
    except InvalidVersion:
        return a == b


def locked_packages(lock: Pylock, platform: Platform, python: str) -> dict[str, tuple[str, str]]:
    env = marker_environment(platform, python)
    out = {}
    for p in lock.packages:
        if p.marker and not Marker(p.marker).evaluate(env):
            continue
        sha = next((a.hashes.get("sha256", "") for a in p.artifacts), "")
        out[p.key] = (p.version or "", sha)
    return out


def compute_drift(lock: Pylock, installed: dict[str, str], manifest: Manifest | None, platform: Platform,
                  python: str) -> list[DriftItem]:
    installed = {canonicalize_name(k): v for k, v in installed.items()}
    locked = locked_packages(lock, platform, python)
    items: list[DriftItem] = []
    for name, (version, sha) in sorted(locked.items()):
        got = installed.get(name)
        if got is None:
            items.append(DriftItem(kind="missing", name=name, locked=version))
        elif not _same(got, version):
            items.append(DriftItem(kind="version", name=name, locked=version, installed=got))
        elif manifest is not None and name in manifest.packages and manifest.packages[name].get("sha256") != sha:
            items.append(DriftItem(kind="hash", name=name, locked=sha[:12],
                                   installed=manifest.packages[name].get("sha256", "")[:12]))
    for name, version in sorted(installed.items()):
        if name not in locked and name not in IGNORED:
            items.append(DriftItem(kind="extra", name=name, installed=version))
    return items
