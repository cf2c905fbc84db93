"""Each locked package's core metadata, and the lock's closure over it. The XPU index's packages (torch, torchvision,
Triton) take theirs from environments/xpu-wheels.yaml; every other package from what its pylock records in
`[packages.tool.aipc-env]` (read from its index's PEP 658 metadata when the lock was made), else from that index now
(through the simple API, cached by the wheel's sha256)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from aipc_env.core.platforms import Platform
from aipc_env.lock.closure import LockedDist, closure_problems
from aipc_env.lock.coremeta import CoreMetadata
from aipc_env.lock.lockfile import Pylock, PylockArtifact, PylockPackage, provenance_of
from aipc_env.lock.simple_index import IndexFile, IndexReadError, MetadataCache, fetch_metadata, project_files
from aipc_env.lock.wheels import WheelManifest

__all__ = ["IndexReader", "lock_closure", "locked_dists", "record_metadata", "recorded_metadata", "wheel_name"]

WORKERS = 16
"""Parallel reads of index pages and metadata files (I/O-bound: small files, one request each)."""


def wheel_name(artifact: PylockArtifact) -> str:
    """A pylock artifact's file name: its `name` key, else the last part of its URL."""
    return (artifact.model_extra or {}).get("name") or (artifact.url or "").rsplit("/", 1)[-1].replace("%2B", "+")


@dataclass
class IndexReader:
    """Reads core metadata from one simple index: each project's page once, each wheel's metadata once (cached)."""

    index_url: str
    cache: MetadataCache = field(default_factory=lambda: MetadataCache(None))
    pages: dict[str, dict[str, IndexFile]] = field(default_factory=dict)
    unreadable: dict[str, str] = field(default_factory=dict)
    """Projects whose page could not be read, and why (asked once)."""

    @classmethod
    def default(cls, index_url: str) -> IndexReader:
        from aipc_env.paths import cache_dir

        return cls(index_url, MetadataCache(cache_dir() / "core-metadata"))

    def page(self, project: str) -> dict[str, IndexFile]:
        key = canonicalize_name(project)
        if key in self.unreadable:
            raise IndexReadError(self.unreadable[key])
        if key not in self.pages:
            try:
                self.pages[key] = project_files(self.index_url, key)
            except IndexReadError as exc:
                self.unreadable[key] = str(exc)
                raise
        return self.pages[key]

    def metadata(self, project: str, filename: str, sha256: str | None) -> CoreMetadata:
        cached = self.cache.get(sha256) if sha256 else None
        if cached is not None:
            file = IndexFile(filename, "", sha256, None)
        else:
            listed = self.page(project).get(filename)
            if listed is None:
                raise IndexReadError(f"{filename} is not on {self.index_url.rstrip('/')}/{canonicalize_name(project)}/")
            file = listed
        meta, _ = fetch_metadata(file, expect_sha256=sha256, cache=self.cache)
        if meta.key != canonicalize_name(project):
            raise IndexReadError(f"{filename}: its metadata names {meta.name}, not {project}")
        return meta

    def read_all(self, wanted: list[tuple[str, str, str | None]]) -> dict[str, CoreMetadata | str]:
        """(project, filename, sha256) -> metadata, or the reason it could not be read; in parallel."""
        projects = sorted({p for p, _, sha in wanted if not (sha and self.cache.get(sha) is not None)})
        with ThreadPoolExecutor(WORKERS) as pool:
            list(pool.map(self._try_page, projects))  # each page once, in parallel; failures are remembered
            return dict(zip([f for _, f, _ in wanted], pool.map(lambda w: self._try(*w), wanted)))

    def _try_page(self, project: str) -> None:
        try:
            self.page(project)
        except IndexReadError:
            pass  # remembered in self.unreadable; the metadata read names it

    def _try(self, project: str, filename: str, sha256: str | None) -> CoreMetadata | str:
        try:
            return self.metadata(project, filename, sha256)
        except IndexReadError as exc:
            return str(exc)


def recorded_metadata(pkg: PylockPackage) -> CoreMetadata | None:
    """The core metadata a pylock records for a package (None: the lock predates recording it)."""
    tool = provenance_of(pkg)
    if "requires-dist" not in tool:
        return None
    return CoreMetadata(pkg.name, pkg.version or "", tuple(tool["requires-dist"]), tool.get("requires-python"))


def locked_dists(
    lock: Pylock, platform: Platform, manifest: WheelManifest, reader: IndexReader | None = None
) -> tuple[list[LockedDist], list[str]]:
    """The lock's packages with their core metadata, and what could not be found (each a problem)."""
    problems: list[str] = []
    metas: dict[int, CoreMetadata] = {}
    fetch: list[tuple[int, PylockPackage]] = []
    for i, pkg in enumerate(lock.packages):
        if provenance_of(pkg)["provenance"] == "public-lockfile":
            record = manifest.metadata_for(pkg.name, pkg.version or "", platform)
            if record is None:
                problems.append(
                    f"{pkg.name} {pkg.version}: no core metadata recorded in environments/xpu-wheels.yaml for {platform}"
                )
            else:
                metas[i] = record.core()
        elif (recorded := recorded_metadata(pkg)) is not None:
            metas[i] = recorded
        else:
            fetch.append((i, pkg))
    if fetch:
        if reader is None:
            problems.append(
                f"{len(fetch)} package(s) record no metadata and no index was asked for it: "
                f"{', '.join(p.name for _, p in fetch[:5])}"
            )
        else:
            wanted = [(pkg.name, wheel_name(pkg.wheels[0]), pkg.wheels[0].hashes.get("sha256")) for _, pkg in fetch if pkg.wheels]
            found = reader.read_all(wanted)
            for i, pkg in fetch:
                result = found.get(wheel_name(pkg.wheels[0])) if pkg.wheels else "only an sdist (no metadata to read)"
                if isinstance(result, CoreMetadata):
                    metas[i] = result
                else:
                    problems.append(f"{pkg.name} {pkg.version}: metadata could not be read: {result}")
    dists = []
    for i, pkg in enumerate(lock.packages):
        meta = metas.get(i)
        dists.append(
            LockedDist(
                name=pkg.name,
                version=pkg.version or "0",
                marker=pkg.marker,
                requires_dist=meta.requires_dist if meta else (),
                requires_python=meta.requires_python if meta else None,
                wheels=tuple(wheel_name(w) for w in pkg.wheels),
                sdist=pkg.sdist is not None,
            )
        )
    return dists, problems


def lock_closure(
    lock: Pylock, path: Path, platform: Platform, pythons: list[str], manifest: WheelManifest, reader: IndexReader | None = None
) -> list[str]:
    """Every closure problem of one platform's pylock, for each Python it covers; metadata that cannot be found is a
    problem too (the closure is then not checked)."""
    dists, missing = locked_dists(lock, platform, manifest, reader)
    if missing:
        return [f"{path}: closure not checked: {m}" for m in missing[:5]] + (
            [f"{path}: closure not checked: ... and {len(missing) - 5} more"] if len(missing) > 5 else []
        )
    return [f"{path}: {p}" for python in pythons for p in closure_problems(dists, platform, python)]


def record_metadata(data: dict[str, Any], readers: dict[str, IndexReader]) -> list[str]:
    """Write into each index-resolved package of a pylock (as a dict, before it is written) the core metadata of its
    wheels, read from the index it was resolved from: `requires-dist` and `requires-python` in
    `[packages.tool.aipc-env]`. Returns what could not be recorded (a package whose wheels disagree, an sdist-only
    package, an index that does not serve the metadata)."""
    problems: list[str] = []
    wanted: dict[str, list[tuple[str, str, str | None]]] = {}
    for pkg in data.get("packages", []):
        tool = pkg.get("tool", {}).get("aipc-env", {})
        if tool.get("provenance") != "index":
            continue
        wheels = pkg.get("wheels") or []
        if not wheels:
            problems.append(
                f"{pkg['name']} {pkg.get('version')}: only an sdist is locked; its metadata cannot be "
                "read without building it (lock a release with wheels)"
            )
            continue
        wanted.setdefault(tool["index"], []).extend(
            (pkg["name"], w.get("name") or w["url"].rsplit("/", 1)[-1].replace("%2B", "+"), (w.get("hashes") or {}).get("sha256"))
            for w in wheels
        )
    found: dict[str, CoreMetadata | str] = {}
    for index, items in wanted.items():
        found.update(readers[index].read_all(items))
    for pkg in data.get("packages", []):
        tool = pkg.get("tool", {}).get("aipc-env", {})
        if tool.get("provenance") != "index" or not pkg.get("wheels"):
            continue
        metas = [found[w.get("name") or w["url"].rsplit("/", 1)[-1].replace("%2B", "+")] for w in pkg["wheels"]]
        errors = [m for m in metas if isinstance(m, str)]
        if errors:
            problems.append(f"{pkg['name']} {pkg.get('version')}: {errors[0]}")
            continue
        read = [m for m in metas if isinstance(m, CoreMetadata)]  # all of them: none is an error
        first = read[0]
        if any(not first.same_requirements(m) for m in read[1:]):
            problems.append(
                f"{pkg['name']} {pkg.get('version')}: its wheels declare different Requires-Dist; "
                "one record per package cannot say which"
            )
            continue
        tool["requires-dist"] = list(first.requires_dist)
        if first.requires_python:
            tool["requires-python"] = first.requires_python
    return problems
