"""Which pair is installed: resolve a set of installed distributions against the matrix (pure logic)."""

from __future__ import annotations

from typing import ClassVar, Literal

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion
from pydantic import BaseModel

from aipc_env.core.formats import VersionedModel
from aipc_env.core.platforms import Platform
from aipc_env.core.specs import parse_version
from aipc_env.matrix.model import Matrix, Pair, versions_equal

__all__ = [
    "TRITON_PACKAGES",
    "PinMismatch",
    "Resolution",
    "ResolveReport",
    "ToolkitReport",
    "resolve_pair",
    "resolve_report",
    "triton_packages",
]

TRITON_PACKAGES = ("pytorch-triton-xpu", "triton-xpu", "triton", "triton-windows", "pytorch-triton")
"""Every distribution that installs the top-level `triton` package; exactly one may be present."""

Status = Literal["exact", "partial", "mixed", "ambiguous", "unknown", "not-xpu", "none"]


class PinMismatch(BaseModel):
    name: str
    installed: str
    expected: list[str]
    belongs_to: list[str]
    """Pairs whose pins this installed version matches (empty: no known release)."""


class Resolution(BaseModel):
    """The verdict: which pair, how sure, and what does not fit."""

    status: Status
    pair: str | None = None
    candidates: list[str] = []
    torch: str | None = None
    torch_is_xpu: bool = False
    matched: list[str] = []
    missing: list[str] = []
    mismatches: list[PinMismatch] = []
    evidence: list[str] = []

    @property
    def summary(self) -> str:
        if self.status == "none":
            return "no torch and no Intel runtime packages installed"
        if self.status == "not-xpu":
            return f"torch {self.torch} is not an XPU build"
        if self.status == "exact":
            return f"{self.pair}: every runtime pin matches"
        if self.status == "partial":
            return f"{self.pair}: matches, but {len(self.missing)} pinned package(s) are not installed"
        if self.status == "mixed":
            odd = ", ".join(f"{m.name} {m.installed} (expected {' or '.join(m.expected)})" for m in self.mismatches)
            return f"{self.pair or 'unknown pair'}: {len(self.mismatches)} package(s) differ from its pins: {odd}"
        if self.status == "ambiguous":
            return f"runtime matches several pairs: {', '.join(self.candidates)} (torch not installed)"
        return "Intel runtime packages match no known release"


def triton_packages(installed: dict[str, str]) -> dict[str, str]:
    return {name: installed[name] for name in TRITON_PACKAGES if name in installed}


def _fingerprints(pair: Pair, platform: Platform) -> dict[str, list[str]]:
    prints = {p.key: p.accepted_versions() for p in pair.pins_for(platform)}
    if pair.triton.applies_to(platform):
        prints[pair.triton.key] = pair.triton_pin().accepted_versions()
    return prints


def _score(pair: Pair, installed: dict[str, str], platform: Platform) -> tuple[int, int]:
    good = bad = 0
    for name, versions in _fingerprints(pair, platform).items():
        if name in installed:
            if any(versions_equal(installed[name], v) for v in versions):
                good += 1
            else:
                bad += 1
    return good, bad


def _owners(matrix: Matrix, name: str, version: str, platform: Platform) -> list[str]:
    owners = []
    for pair in matrix.pairs:
        versions = _fingerprints(pair, platform).get(name)
        if versions and any(versions_equal(version, v) for v in versions):
            owners.append(pair.id)
    return owners


def resolve_pair(
    installed: dict[str, str], matrix: Matrix, platform: Platform, torch_version_xpu: str | None = None
) -> Resolution:
    """Resolve installed distributions ({name: version}, any name spelling) to a matrix pair."""
    installed = {canonicalize_name(k): v for k, v in installed.items()}
    torch = installed.get("torch")
    evidence: list[str] = []
    torch_is_xpu = False
    by_torch: Pair | None = None
    if torch:
        try:
            tv = parse_version(torch)
            torch_is_xpu = tv.local == "xpu"
            by_torch = matrix.for_torch(torch)
        except InvalidVersion:
            evidence.append(f"torch version {torch!r} is not a PEP 440 version")
        if by_torch:
            evidence.append(f"torch {torch} belongs to {by_torch.id}")

    scores = {p.id: _score(p, installed, platform) for p in matrix.pairs}
    any_runtime = any(good or bad for good, bad in scores.values())
    if torch and not torch_is_xpu and not any_runtime:
        return Resolution(
            status="not-xpu", torch=torch, torch_is_xpu=False, evidence=evidence + [f"torch {torch} has no '+xpu' local version"]
        )
    if not torch and not any_runtime:
        return Resolution(status="none")

    if by_torch is not None:
        chosen: Pair | None = by_torch
        candidates = [by_torch.id]
    else:
        best = max(good for good, _ in scores.values())
        top = [p for p in matrix.pairs if scores[p.id][0] == best and best > 0]
        # fewest contradictions wins among equals
        if top:
            least_bad = min(scores[p.id][1] for p in top)
            top = [p for p in top if scores[p.id][1] == least_bad]
        candidates = [p.id for p in top]
        chosen = top[0] if len(top) == 1 else None
        if chosen:
            evidence.append(f"{best} runtime fingerprint(s) match {chosen.id}")

    if chosen is None:
        status: Status = "ambiguous" if candidates else "unknown"
        return Resolution(status=status, candidates=candidates, torch=torch, torch_is_xpu=torch_is_xpu, evidence=evidence)

    matched, missing, mismatches = [], [], []
    for name, versions in _fingerprints(chosen, platform).items():
        got = installed.get(name)
        if got is None:
            missing.append(name)
        elif any(versions_equal(got, v) for v in versions):
            matched.append(name)
        else:
            mismatches.append(
                PinMismatch(name=name, installed=got, expected=versions, belongs_to=_owners(matrix, name, got, platform))
            )
    if torch_version_xpu and chosen.torch_version_xpu and torch_version_xpu != chosen.torch_version_xpu:
        evidence.append(f"torch.version.xpu is {torch_version_xpu}, {chosen.id} was built with {chosen.torch_version_xpu}")
        mismatches.append(
            PinMismatch(name="torch.version.xpu", installed=torch_version_xpu, expected=[chosen.torch_version_xpu], belongs_to=[])
        )
    if torch and not torch_is_xpu:
        evidence.append(f"torch {torch} has no '+xpu' local version")
    if mismatches:
        status = "mixed"
    elif missing:
        status = "partial"
    else:
        status = "exact"
    if torch and not torch_is_xpu and status == "exact":
        status = "not-xpu"
    return Resolution(
        status=status,
        pair=chosen.id,
        candidates=candidates,
        torch=torch,
        torch_is_xpu=torch_is_xpu,
        matched=sorted(matched),
        missing=sorted(missing),
        mismatches=mismatches,
        evidence=evidence,
    )


class ResolveReport(VersionedModel):
    """`aipc-env resolve --pip-list FILE`: the resolution of a pasted package list."""

    FORMAT: ClassVar[str] = "resolve report"
    schema_version: Literal[2] = 2
    platform: str
    platform_source: str = ""
    """Why this platform: --platform, what the list shows, or this machine's (assumed)."""
    resolution: Resolution
    summary: str
    triton_packages: dict[str, str]
    oneapi: str | None = None
    certainty: str | None = None
    fix: str | None = None
    """What to do when the list is not one consistent pair (None: nothing)."""

    @property
    def consistent(self) -> bool:
        res = self.resolution
        return res.status in ("exact", "partial") and res.torch_is_xpu and len(self.triton_packages) <= 1


class ToolkitReport(VersionedModel):
    """`aipc-env resolve --toolkit RELEASE`: the pairs whose runtime matches a oneAPI toolkit release."""

    FORMAT: ClassVar[str] = "toolkit report"
    schema_version: Literal[1] = 1
    toolkit: str
    pairs: list[str]
    torch: dict[str, list[str]]


def resolution_fix(res: Resolution, tritons: dict[str, str], platform: Platform) -> str | None:
    """The fix for a list that is not one consistent pair (pure)."""
    rebuild = f"or rebuild the env from the pair's lock: aipc-env env --pair {res.pair}" if res.pair else ""
    if res.status == "mixed":
        pins = " ".join(f'"{m.name}=={m.expected[0]}"' for m in res.mismatches if m.name != "torch.version.xpu")
        return (f"in the training env: pip install {pins} ({rebuild})" if pins else rebuild) or None
    if len(tritons) > 1:
        return (
            f"keep one Triton: pip uninstall -y {' '.join(t for t in tritons if t not in TRITON_PACKAGES[:2])}"
            if any(t not in TRITON_PACKAGES[:2] for t in tritons)
            else "keep only the pair's Triton package"
        )
    if res.status == "partial":
        return f"in the training env: pip install the missing pins ({', '.join(res.missing)}), {rebuild}"
    if res.status == "ambiguous":
        return (
            f"the runtime fits {', '.join(res.candidates)}: install the torch+xpu of one of them, or paste the list "
            "of the whole env (with torch)"
        )
    if res.status in ("unknown", "not-xpu"):
        return "build a training env from a pair's lock: aipc-env env --pair <pair> (aipc-env matrix lists them)"
    return None


def resolve_report(
    installed: dict[str, str], matrix: Matrix, platform: Platform, torch_version_xpu: str | None = None, platform_source: str = ""
) -> ResolveReport:
    res = resolve_pair(installed, matrix, platform, torch_version_xpu=torch_version_xpu)
    pair = matrix.by_id.get(res.pair) if res.pair else None
    tritons = triton_packages(installed)
    report = ResolveReport(
        platform=platform,
        platform_source=platform_source,
        resolution=res,
        summary=res.summary,
        triton_packages=tritons,
        oneapi=pair.oneapi if pair else None,
        certainty=pair.certainty if pair else None,
    )
    if not report.consistent:
        report.fix = resolution_fix(res, tritons, platform)
    return report
