"""The XPU wheels' real core metadata, read where it can be read: on the machine that installs them, before anything
is installed. Each torch, torchvision and Triton wheel the env would get has its METADATA read (the index's PEP 658
file, else the wheel's own `.dist-info/METADATA` through range requests; the lock's sha256 fixes which wheel) and
compared with what the lock stands on: environments/xpu-wheels.yaml's record for a wheel hashed from public
lockfiles, the lock's own record for one resolved against the index. The closure of the lock is then run again with
the real metadata. Pure but for the read, which is passed in."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from packaging.markers import Marker
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from aipc_env.core.platforms import Platform, marker_environment
from aipc_env.core.specs import parse_requirement
from aipc_env.lock.closure import LockedDist, closure_problems, wheel_installs
from aipc_env.lock.coremeta import CoreMetadata, normal_requirement
from aipc_env.lock.lockfile import Pylock, PylockArtifact, PylockPackage, provenance_of
from aipc_env.lock.requires import locked_dists, recorded_metadata, wheel_name
from aipc_env.lock.simple_index import IndexFile, IndexReadError, MetadataCache, fetch_metadata
from aipc_env.lock.specs import EXPLICIT_XPU_NAMES
from aipc_env.lock.wheels import WheelManifest

__all__ = [
    "MetadataDifference",
    "MetadataReport",
    "check_xpu_metadata",
    "compare_metadata",
    "deciding_requirements",
    "read_wheel_metadata",
    "requested_extras",
]

MANIFEST = "environments/xpu-wheels.yaml"

Reader = Callable[[PylockPackage, PylockArtifact], CoreMetadata]


@dataclass(frozen=True)
class MetadataDifference:
    package: str
    version: str
    wheel: str
    field: str
    """Name, Version, Requires-Python or Requires-Dist."""
    expected: str
    found: str
    basis: str
    """Where the expected value comes from: environments/xpu-wheels.yaml, or the lock's own record."""

    def __str__(self) -> str:
        return (
            f"{self.package} {self.version} ({self.wheel}): {self.field}: {self.basis} says {self.expected}, "
            f"the wheel says {self.found}"
        )


@dataclass
class MetadataReport:
    differences: list[MetadataDifference] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)
    closure: list[str] = field(default_factory=list)
    """Closure problems of the lock with the real metadata (empty when nothing differs)."""

    @property
    def problems(self) -> list[str]:
        return (
            [str(d) for d in self.differences]
            + [f"cannot read: {u}" for u in self.unreadable]
            + [f"with the real metadata the lock does not hold: {c}" for c in self.closure]
        )


def read_wheel_metadata(cache: MetadataCache | None = None) -> Reader:
    """Reads a locked wheel's metadata from its URL (`<url>.metadata`, else the wheel by range requests)."""

    def read(pkg: PylockPackage, wheel: PylockArtifact) -> CoreMetadata:
        sha = wheel.hashes.get("sha256")
        meta, _ = fetch_metadata(IndexFile(wheel_name(wheel), wheel.url or "", sha, None), expect_sha256=sha, cache=cache)
        return meta

    return read


def _installed_wheel(pkg: PylockPackage, platform: Platform, python: str) -> PylockArtifact | None:
    return next((w for w in pkg.wheels if wheel_installs(wheel_name(w), platform, python)), None)


def _expected(pkg: PylockPackage, platform: Platform, manifest: WheelManifest) -> tuple[CoreMetadata | None, str]:
    if provenance_of(pkg)["provenance"] == "public-lockfile":
        record = manifest.metadata_for(pkg.name, pkg.version or "", platform)
        return (record.core() if record else None), MANIFEST
    return recorded_metadata(pkg), "the lock"


def _spec(text: str | None) -> SpecifierSet | None:
    return SpecifierSet(text) if text else None


_EXTRA = re.compile(r"\bextra\s*(==|!=|in\b|not\s+in\b)|(==|!=|\bin|\bnot\s+in)\s*extra\b")


def _behind_extra(marker: Marker | None) -> bool:
    """Whether a Requires-Dist line's marker tests `extra` (the line is asked for only through an extra)."""
    return marker is not None and bool(_EXTRA.search(str(marker)))


def deciding_requirements(requires: Iterable[str], extras: frozenset[str], env: dict[str, str]) -> dict[str, str]:
    """The Requires-Dist lines that decide an install in `env` (a platform and Python), normalised (packaging's
    Requirement, canonical names, SpecifierSet): a line without a marker; a line whose marker holds here; a line
    behind an extra only when one of the requested `extras` turns it on here. Normal form -> the line as written."""
    out: dict[str, str] = {}
    for line in requires:
        marker = parse_requirement(line).marker
        if marker is not None:
            asked = extras if _behind_extra(marker) else frozenset({""})
            if not any(marker.evaluate({**env, "extra": e}) for e in asked):
                continue
        out[normal_requirement(line)] = line
    return out


def requested_extras(requires: Iterable[str]) -> dict[str, frozenset[str]]:
    """Per package (canonical name), the extras that any of `requires` asks of it."""
    found: dict[str, set[str]] = {}
    for line in requires:
        req = parse_requirement(line)
        if req.extras:
            found.setdefault(canonicalize_name(req.name), set()).update(canonicalize_name(e) for e in req.extras)
    return {k: frozenset(v) for k, v in found.items()}


def compare_metadata(
    expected: CoreMetadata, found: CoreMetadata, extras: frozenset[str], env: dict[str, str]
) -> list[tuple[str, str, str]]:
    """What differs between two core metadata in the fields that decide an install: (field, expected, found) for
    Name (canonical), Version (PEP 440 equal), Requires-Python (SpecifierSet equal) and Requires-Dist (the lines
    `deciding_requirements` keeps, normalised). Pure."""
    out: list[tuple[str, str, str]] = []
    if canonicalize_name(expected.name) != canonicalize_name(found.name):
        out.append(("Name", expected.name, found.name))
    if Version(expected.version) != Version(found.version):
        out.append(("Version", expected.version, found.version))
    if _spec(expected.requires_python) != _spec(found.requires_python):
        out.append(("Requires-Python", expected.requires_python or "nothing", found.requires_python or "nothing"))
    want = deciding_requirements(expected.requires_dist, extras, env)
    got = deciding_requirements(found.requires_dist, extras, env)
    if set(want) != set(got):
        show: Callable[[Iterable[str]], str] = lambda lines: "; ".join(sorted(lines)) or "nothing"
        out.append(
            (
                "Requires-Dist",
                f"[{show(want[k] for k in set(want) - set(got))}]",
                f"[{show(got[k] for k in set(got) - set(want))}]",
            )
        )
    return out


def _differences(
    pkg: PylockPackage,
    wheel: str,
    expected: CoreMetadata,
    found: CoreMetadata,
    basis: str,
    extras: frozenset[str],
    env: dict[str, str],
) -> list[MetadataDifference]:
    notes = {"Requires-Dist": (" (not in the wheel)", f" (not in {basis})")}
    return [
        MetadataDifference(
            pkg.name,
            pkg.version or "",
            wheel,
            name,
            want + notes.get(name, ("", ""))[0],
            got + notes.get(name, ("", ""))[1],
            basis,
        )
        for name, want, got in compare_metadata(expected, found, extras, env)
    ]


def check_xpu_metadata(lock: Pylock, platform: Platform, python: str, manifest: WheelManifest, read: Reader) -> MetadataReport:
    """Read the METADATA of each XPU-index wheel the lock installs on (platform, python), compare it with what the
    lock stands on, and close the lock over the real metadata."""
    report = MetadataReport()
    env = marker_environment(platform, python)
    dists, missing = locked_dists(lock, platform, manifest)
    asked = requested_extras(line for d in dists for line in d.requires_dist)
    real: dict[str, CoreMetadata] = {}
    for pkg in lock.packages:
        if pkg.key not in EXPLICIT_XPU_NAMES or (pkg.marker and not Marker(pkg.marker).evaluate(env)):
            continue
        wheel = _installed_wheel(pkg, platform, python)
        if wheel is None:
            continue  # the closure check of the lock names it
        name = wheel_name(wheel)
        try:
            found = read(pkg, wheel)
        except IndexReadError as exc:
            report.unreadable.append(f"{pkg.name} {pkg.version}: {exc}")
            continue
        real[pkg.key] = found
        expected, basis = _expected(pkg, platform, manifest)
        if expected is None:
            report.unreadable.append(f"{pkg.name} {pkg.version}: {basis} records no metadata to compare with")
            continue
        report.differences += _differences(pkg, name, expected, found, basis, asked.get(pkg.key, frozenset()), env)
    if report.differences and not missing:
        swapped = [
            LockedDist(d.name, d.version, d.marker, real[d.key].requires_dist, real[d.key].requires_python, d.wheels, d.sdist)
            if d.key in real
            else d
            for d in dists
        ]
        report.closure = closure_problems(swapped, platform, python)
    return report
