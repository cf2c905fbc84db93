"""`aipc-env lock verify`: on a connected machine, fetch every locked artifact whose hash was not made against the
live index (provenance `public-lockfile`), hash it and compare. A changed hash means the index re-uploaded the
file: an error naming the file and both hashes. torch's own Requires-Dist, read from the fetched wheel, is compared
with the matrix row. Where the index cannot be reached, every such artifact is listed as unverified: it never
passes silently."""

from __future__ import annotations

import hashlib
import tempfile
import urllib.error
import urllib.request
import zipfile
from pathlib import Path
from typing import ClassVar, Literal

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from aipc_env.formats import StrictModel, VersionedModel
from aipc_env.lock.lockfile import provenance_of, pylock_path, read_pylock
from aipc_env.matrix import Pair
from aipc_env.platforms import PLATFORMS, Platform, marker_environment

__all__ = ["ArtifactCheck", "LockVerifyReport", "requires_dist_problems", "verify_lock"]

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
    """Where torch's Requires-Dist (read from a fetched wheel) disagrees with the matrix row."""

    @property
    def clean(self) -> bool:
        return bool(self.checked) and all(c.status == "verified" for c in self.checked) and not self.requires_dist


def _fetch(url: str, target: Path, timeout: float) -> str:
    """Download url to target; its sha256. Raises OSError/URLError when it cannot."""
    digest = hashlib.sha256()
    with urllib.request.urlopen(url, timeout=timeout) as response, target.open("wb") as fh:
        for block in iter(lambda: response.read(CHUNK), b""):
            digest.update(block)
            fh.write(block)
    return digest.hexdigest()


def _requires_dist(wheel: Path) -> list[str] | None:
    """The Requires-Dist lines of a wheel's METADATA; None when the file is not a wheel."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            meta = next((n for n in zf.namelist() if n.endswith(".dist-info/METADATA")), None)
            if meta is None:
                return None
            text = zf.read(meta).decode("utf-8", "replace")
    except (zipfile.BadZipFile, OSError):
        return None
    headers = text.split("\n\n", 1)[0]
    return [line.split(":", 1)[1].strip() for line in headers.splitlines() if line.startswith("Requires-Dist:")]


def requires_dist_problems(requires: list[str], pair: Pair, platform: Platform, python: str) -> list[str]:
    """torch's Requires-Dist (of a wheel for `platform` and `python`) against the matrix row: every runtime pin
    that applies there exact, every other requirement named in torch_requires or the Triton pin (pure)."""
    problems = []
    found: dict[str, Requirement] = {}
    env = marker_environment(platform, python)
    for line in requires:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            problems.append(f"unreadable Requires-Dist {line!r}")
            continue
        if req.marker is not None and ("extra" in str(req.marker) or not req.marker.evaluate(env)):
            continue
        found[canonicalize_name(req.name)] = req
    expected = {p.key: p for p in pair.pins_for(platform)}
    for key, pin in expected.items():
        req = found.get(key)
        if req is None:
            problems.append(f"{pin.name}=={pin.version} is in the matrix row but not in torch's Requires-Dist")
        elif not any(pin.accepts(s.version) for s in req.specifier if s.operator == "=="):
            problems.append(f"{pin.name}: torch requires {req.specifier}, the matrix row pins {pin.version}")
    declared = {canonicalize_name(Requirement(r).name) for r in pair.torch_requires} | set(expected) | {
        pair.triton.key}
    for key, req in sorted(found.items()):
        if key not in declared:
            problems.append(f"torch requires {req} which the matrix row does not list (torch_requires)")
    return problems


def verify_lock(lock_dir: Path, pair: Pair, *, mirror: str | None = None, timeout: float = 60.0,
                keep: Path | None = None) -> LockVerifyReport:
    """Fetch and hash every public-lockfile artifact of the pair's pylocks (from `mirror`/<file> when given)."""
    checks: list[ArtifactCheck] = []
    requires: list[str] = []
    seen: set[str] = set()
    with tempfile.TemporaryDirectory() as tmp:
        for platform in PLATFORMS:
            path = pylock_path(lock_dir, platform)
            if not path.is_file():
                continue
            for pkg in read_pylock(path).packages:
                if provenance_of(pkg)["provenance"] == "index":
                    continue
                for wheel in pkg.wheels:
                    name = (wheel.model_extra or {}).get("name") or (wheel.url or "").rsplit("/", 1)[-1]
                    if name in seen:
                        continue
                    seen.add(name)
                    url = f"{mirror.rstrip('/')}/{name}" if mirror else (wheel.url or "")
                    locked = wheel.hashes.get("sha256", "")
                    target = (keep or Path(tmp)) / name
                    try:
                        got = _fetch(url, target, timeout)
                    except (urllib.error.URLError, OSError, ValueError) as exc:
                        reason = getattr(exc, "reason", None) or exc
                        checks.append(ArtifactCheck(file=name, url=url, locked_sha256=locked, status="unverified",
                                                    reason=f"could not be fetched: {reason}"))
                        continue
                    status = "verified" if got == locked else "changed"
                    checks.append(ArtifactCheck(file=name, url=url, locked_sha256=locked, status=status,
                                                fetched_sha256=got, reason="" if status == "verified" else
                                                "the index serves another file under this name (re-uploaded)"))
                    if status == "verified" and pkg.key == "torch":
                        minor = next((f"3.{t[3:]}" for t in name.split("-")[2:3] if t.startswith("cp3")), "3.12")
                        found = _requires_dist(target)
                        requires += ([f"{name}: {p}" for p in requires_dist_problems(found, pair, platform, minor)]
                                     if found is not None else [f"{name}: not a wheel (no METADATA to read)"])
                    if keep is None:
                        target.unlink(missing_ok=True)
    return LockVerifyReport(pair=pair.id, checked=checks, requires_dist=requires)
