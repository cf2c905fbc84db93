"""`aipc-env lock verify`: on a connected machine, fetch every locked artifact whose hash was not made against the
live index (provenance `public-lockfile`: torch, torchvision and Triton), hash it and compare. A changed hash means
the index re-uploaded the file: an error naming the file and both hashes. Each fetched wheel's METADATA (Name,
Version, Requires-Dist, Requires-Python) is compared with what environments/xpu-wheels.yaml records for its
release, naming the field that differs; torch's Intel runtime pins are also compared with the matrix row. Where the
index cannot be reached, every such artifact is listed as unverified: it never passes silently."""

from __future__ import annotations

import hashlib
import tempfile
import urllib.error
import urllib.request
import zipfile
from pathlib import Path
from typing import ClassVar, Literal

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

from aipc_env.core.formats import StrictModel, VersionedModel
from aipc_env.core.net import download
from aipc_env.core.platforms import DEFAULT_PYTHON, PLATFORMS, Platform, marker_environment
from aipc_env.core.specs import check_file_name, evaluate_marker, parse_requirement, parse_specifier, parse_version
from aipc_env.lock.coremeta import (
    MAX_METADATA_BYTES,
    CoreMetadata,
    MetadataError,
    normal_requirement,
    parse_core_metadata,
)
from aipc_env.lock.lockfile import provenance_of, pylock_path, read_pylock
from aipc_env.lock.requires import wheel_name
from aipc_env.lock.wheels import WheelManifest, load_wheel_manifest
from aipc_env.matrix import Pair

__all__ = ["ArtifactCheck", "LockVerifyReport", "metadata_problems", "requires_dist_problems", "verify_lock"]

CHUNK = 1 << 20


class ArtifactCheck(StrictModel):
    file: str
    url: str
    locked_sha256: str
    status: Literal["verified", "changed", "unverified"]
    fetched_sha256: str | None = None
    reason: str = ""


class LockVerifyReport(VersionedModel):
    """`aipc-env lock verify --json`."""

    FORMAT: ClassVar[str] = "lock verify report"
    schema_version: Literal[1] = 1
    pair: str
    checked: list[ArtifactCheck]
    requires_dist: list[str] = []
    """Where a fetched wheel's METADATA differs from environments/xpu-wheels.yaml (naming the field), or torch's
    runtime pins from the matrix row."""

    @property
    def clean(self) -> bool:
        return bool(self.checked) and all(c.status == "verified" for c in self.checked) and not self.requires_dist


class LockVerifyReports(VersionedModel):
    """`aipc-env lock verify --json`: one report per lock folder."""

    FORMAT: ClassVar[str] = "lock verify reports"
    schema_version: Literal[1] = 1
    reports: list[LockVerifyReport]


def _fetch(url: str, target: Path, timeout: float) -> str:
    """Download url to target (a body cut short is fetched again, never hashed as "changed"); its sha256. Raises
    OSError/URLError when it cannot."""
    download(url, target, timeout)
    digest = hashlib.sha256()
    with target.open("rb") as fh:
        for block in iter(lambda: fh.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def wheel_metadata(wheel: Path) -> CoreMetadata | str:
    """The core metadata of a wheel file, or why it cannot be read."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            members = [i for i in zf.infolist() if i.filename.count("/") == 1 and i.filename.endswith(".dist-info/METADATA")]
            if len(members) != 1:
                return f"not a wheel ({len(members)} .dist-info/METADATA members)"
            if members[0].file_size > MAX_METADATA_BYTES:
                return "METADATA is larger than a metadata file can be"
            return parse_core_metadata(zf.read(members[0]))
    except (zipfile.BadZipFile, OSError) as exc:
        return f"not a wheel ({exc})"
    except MetadataError as exc:
        return str(exc)


def metadata_problems(found: CoreMetadata, recorded: CoreMetadata) -> list[str]:
    """Each field where a wheel's metadata differs from the manifest's record (pure)."""
    problems = []
    if canonicalize_name(found.name) != canonicalize_name(recorded.name):
        problems.append(f"Name: the wheel says {found.name}, environments/xpu-wheels.yaml {recorded.name}")
    if parse_version(found.version) != parse_version(recorded.version):
        problems.append(f"Version: the wheel says {found.version}, environments/xpu-wheels.yaml {recorded.version}")
    have = {normal_requirement(r): r for r in found.requires_dist}
    want = {normal_requirement(r): r for r in recorded.requires_dist}
    extra = [have[k] for k in sorted(set(have) - set(want))]
    lacking = [want[k] for k in sorted(set(want) - set(have))]
    if extra:
        problems.append(
            f"Requires-Dist: the wheel also requires {', '.join(extra[:5])}"
            + (f" (+{len(extra) - 5} more)" if len(extra) > 5 else "")
            + ", which environments/xpu-wheels.yaml does not record"
        )
    if lacking:
        problems.append(
            f"Requires-Dist: environments/xpu-wheels.yaml records {', '.join(lacking[:5])}"
            + (f" (+{len(lacking) - 5} more)" if len(lacking) > 5 else "")
            + ", which the wheel does not "
            "require"
        )
    spec = {m: parse_specifier(m.requires_python) if m.requires_python else None for m in (found, recorded)}
    if spec[found] != spec[recorded]:
        problems.append(
            f"Requires-Python: the wheel says {found.requires_python or 'nothing'}, "
            f"environments/xpu-wheels.yaml {recorded.requires_python or 'nothing'}"
        )
    return problems


def requires_dist_problems(requires: list[str] | tuple[str, ...], pair: Pair, platform: Platform, python: str) -> list[str]:
    """torch's Requires-Dist (of a wheel for `platform` and `python`) against the matrix row: every runtime pin
    that applies there exact, and no exact pin besides Triton that the row does not name (pure)."""
    problems = []
    found: dict[str, Requirement] = {}
    env = marker_environment(platform, python)
    for line in requires:
        try:
            req = parse_requirement(line)
        except InvalidRequirement:
            problems.append(f"unreadable Requires-Dist {line!r}")
            continue
        if req.marker is not None and ("extra" in str(req.marker) or not evaluate_marker(req.marker, env)):
            continue
        found[canonicalize_name(req.name)] = req
    expected = {p.key: p for p in pair.pins_for(platform)}
    for key, pin in expected.items():
        pinned = found.get(key)
        if pinned is None:
            problems.append(f"{pin.name}=={pin.version} is in the matrix row but not in torch's Requires-Dist")
        elif not any(pin.accepts(s.version) for s in pinned.specifier if s.operator == "=="):
            problems.append(f"{pin.name}: torch requires {pinned.specifier}, the matrix row pins {pin.version}")
    for key, req in sorted(found.items()):
        if key not in expected and key != pair.triton.key and any(s.operator == "==" for s in req.specifier):
            problems.append(f"torch pins {req} which the matrix row does not list (runtime_pins)")
    return problems


def _python_of(name: str) -> str:
    """The CPython minor version a wheel file is for (3.12 for a py3 wheel)."""
    tags = parse_wheel_filename(name)[3]
    minors = [t.interpreter[3:] for t in tags if t.interpreter.startswith("cp3") and t.interpreter[3:].isdigit()]
    return f"3.{minors[0][1:]}" if minors else DEFAULT_PYTHON


def verify_lock(
    lock_dir: Path,
    pair: Pair,
    *,
    mirror: str | None = None,
    timeout: float = 60.0,
    keep: Path | None = None,
    manifest: WheelManifest | None = None,
) -> LockVerifyReport:
    """Fetch and hash every public-lockfile artifact of the pair's pylocks (from `mirror`/<file> when given) and
    compare its METADATA with the manifest."""
    manifest = manifest or load_wheel_manifest()
    checks: list[ArtifactCheck] = []
    problems: list[str] = []
    seen: set[str] = set()
    with tempfile.TemporaryDirectory() as tmp:
        folder = keep or Path(tmp)
        for platform in PLATFORMS:
            path = pylock_path(lock_dir, platform)
            if not path.is_file():
                continue
            for pkg in read_pylock(path).packages:
                if provenance_of(pkg)["provenance"] == "index":
                    continue
                for wheel in pkg.wheels:
                    name = wheel_name(wheel)
                    if name in seen:
                        continue
                    seen.add(name)
                    locked = wheel.hashes.get("sha256", "")
                    try:
                        check_file_name(name, what="wheel file name")
                        parse_wheel_filename(name)
                    except ValueError as exc:
                        checks.append(
                            ArtifactCheck(
                                file=name[:200],
                                url=(wheel.url or "")[:300],
                                locked_sha256=locked,
                                status="unverified",
                                reason=f"not fetched: {exc}",
                            )
                        )
                        continue
                    url = f"{mirror.rstrip('/')}/{name}" if mirror else (wheel.url or "")
                    target = folder / name
                    try:
                        got = _fetch(url, target, timeout)
                    except (urllib.error.URLError, OSError, ValueError) as exc:
                        reason = getattr(exc, "reason", None) or exc
                        checks.append(
                            ArtifactCheck(
                                file=name,
                                url=url,
                                locked_sha256=locked,
                                status="unverified",
                                reason=f"could not be fetched: {reason}",
                            )
                        )
                        continue
                    status = "verified" if got == locked else "changed"
                    checks.append(
                        ArtifactCheck(
                            file=name,
                            url=url,
                            locked_sha256=locked,
                            status=status,
                            fetched_sha256=got,
                            reason="" if status == "verified" else "the index serves another file under this name (re-uploaded)",
                        )
                    )
                    if status == "verified":
                        problems += [
                            f"{name}: {p}"
                            for p in _compare(target, pkg.name, pkg.version or "", platform, pair, manifest, _python_of(name))
                        ]
                    if keep is None:
                        target.unlink(missing_ok=True)
    return LockVerifyReport(pair=pair.id, checked=checks, requires_dist=problems)


def _compare(
    wheel: Path, package: str, version: str, platform: Platform, pair: Pair, manifest: WheelManifest, python: str
) -> list[str]:
    found = wheel_metadata(wheel)
    if isinstance(found, str):
        return [found]
    record = manifest.metadata_for(package, version, platform)
    if record is None:
        return [f"environments/xpu-wheels.yaml records no metadata for {package} {version} on {platform}"]
    problems = metadata_problems(found, record.core())
    if canonicalize_name(package) == "torch":
        problems += requires_dist_problems(found.requires_dist, pair, platform, python)
    return problems
