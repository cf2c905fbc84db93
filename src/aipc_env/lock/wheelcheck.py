"""The XPU wheels' real core metadata, read where it can be read: on the machine that installs them, before anything
is installed. Each torch, torchvision and Triton wheel the env would get has its METADATA read (the index's PEP 658
file, else the wheel's own `.dist-info/METADATA` through range requests; the lock's sha256 fixes which wheel) and
compared with what the lock stands on: environments/xpu-wheels.yaml's record for a wheel hashed from public
lockfiles, the lock's own record for one resolved against the index. The closure of the lock is then run again with
the real metadata. Pure but for the read, which is passed in."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from packaging.markers import Marker
from packaging.specifiers import SpecifierSet

from aipc_env.core.platforms import Platform, marker_environment
from aipc_env.lock.closure import LockedDist, closure_problems, wheel_installs
from aipc_env.lock.coremeta import CoreMetadata, normal_requirement
from aipc_env.lock.lockfile import Pylock, PylockArtifact, PylockPackage, provenance_of
from aipc_env.lock.requires import locked_dists, recorded_metadata, wheel_name
from aipc_env.lock.simple_index import IndexFile, IndexReadError, MetadataCache, fetch_metadata
from aipc_env.lock.specs import EXPLICIT_XPU_NAMES
from aipc_env.lock.wheels import WheelManifest

__all__ = ["MetadataDifference", "MetadataReport", "check_xpu_metadata", "read_wheel_metadata"]

MANIFEST = "environments/xpu-wheels.yaml"

Reader = Callable[[PylockPackage, PylockArtifact], CoreMetadata]


@dataclass(frozen=True)
class MetadataDifference:
    package: str
    version: str
    wheel: str
    field: str
    """Requires-Dist or Requires-Python."""
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


def _differences(
    pkg: PylockPackage, wheel: str, expected: CoreMetadata, found: CoreMetadata, basis: str
) -> list[MetadataDifference]:
    out = []
    want = {normal_requirement(r): r for r in expected.requires_dist}
    got = {normal_requirement(r): r for r in found.requires_dist}
    if set(want) != set(got):
        show: Callable[[Iterable[str]], str] = lambda lines: "; ".join(sorted(lines)) or "nothing"
        out.append(
            MetadataDifference(
                pkg.name,
                pkg.version or "",
                wheel,
                "Requires-Dist",
                f"[{show(want[k] for k in set(want) - set(got))}] (not in the wheel)",
                f"[{show(got[k] for k in set(got) - set(want))}] (not in {basis})",
                basis,
            )
        )
    if _spec(expected.requires_python) != _spec(found.requires_python):
        out.append(
            MetadataDifference(
                pkg.name,
                pkg.version or "",
                wheel,
                "Requires-Python",
                expected.requires_python or "nothing",
                found.requires_python or "nothing",
                basis,
            )
        )
    return out


def check_xpu_metadata(lock: Pylock, platform: Platform, python: str, manifest: WheelManifest, read: Reader) -> MetadataReport:
    """Read the METADATA of each XPU-index wheel the lock installs on (platform, python), compare it with what the
    lock stands on, and close the lock over the real metadata."""
    report = MetadataReport()
    env = marker_environment(platform, python)
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
        report.differences += _differences(pkg, name, expected, found, basis)
    if report.differences:
        dists, missing = locked_dists(lock, platform, manifest)
        if not missing:
            swapped = [
                LockedDist(d.name, d.version, d.marker, real[d.key].requires_dist, real[d.key].requires_python, d.wheels, d.sdist)
                if d.key in real
                else d
                for d in dists
            ]
            report.closure = closure_problems(swapped, platform, python)
    return report
