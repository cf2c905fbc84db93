"""`aipc-env matrix refresh` (admin, connected machine): read the PyTorch XPU index (PEP 691/503 project pages, PEP
658 metadata) and PyPI, and propose what the matrix and the wheel manifest lack: rows for torch releases no pair
names (their runtime pins, Triton, torchvision and Python range read from the wheels' metadata), new torch releases
of an existing row, manifest entries for every wheel of a known release the manifest lacks (with the index's
sha256), and the metadata records of each. The result is a reviewed candidate, never an edit: candidate files
beside the originals and their diff. The decisions are pure functions of what was read (`plan_refresh`)."""

from __future__ import annotations

import datetime as _dt
import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import yaml
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version

from aipc_env.core.formats import VersionedModel
from aipc_env.core.platforms import Platform, marker_environment, wheel_platform_fits
from aipc_env.core.specs import evaluate_marker, parse_requirement, parse_specifier, parse_version
from aipc_env.lock.coremeta import CoreMetadata
from aipc_env.lock.wheels import WheelManifest
from aipc_env.matrix.model import Matrix, Pair

__all__ = [
    "IndexWheel",
    "RefreshPlan",
    "RefreshReport",
    "candidate_paths",
    "check_candidates",
    "manifest_text",
    "matrix_text",
    "plan_refresh",
    "read_index",
    "today",
    "unified_diff",
]

XPU_PROJECTS = ("torch", "torchvision", "triton-xpu", "pytorch-triton-xpu")


@dataclass(frozen=True)
class IndexWheel:
    """One wheel the XPU index lists, with its core metadata as the index serves it."""

    project: str
    file: str
    url: str
    sha256: str | None
    metadata: CoreMetadata
    page: str
    """The project page it was listed on (its source)."""

    @property
    def version(self) -> str:
        return str(parse_wheel_filename(self.file)[1])

    @property
    def platforms(self) -> list[Platform]:
        tags = parse_wheel_filename(self.file)[3]
        return [pl for pl in ("win-64", "linux-64") if any(wheel_platform_fits(t.platform, pl) for t in tags)]

    @property
    def pythons(self) -> list[str]:
        tags = parse_wheel_filename(self.file)[3]
        return sorted(
            {f"3.{t.interpreter[3:]}" for t in tags if re.fullmatch(r"cp3\d+", t.interpreter) and t.abi != f"{t.interpreter}t"},
            key=lambda v: int(v.split(".")[1]),
        )


@dataclass
class RefreshPlan:
    new_rows: list[dict[str, Any]] = field(default_factory=list)
    row_updates: dict[str, dict[str, Any]] = field(default_factory=dict)
    """pair id -> {"torch": [...], "torchvision": {...}} for new releases of an existing row."""
    wheels: list[dict[str, Any]] = field(default_factory=list)
    metadata: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.new_rows or self.row_updates or self.wheels or self.metadata)


def _runtime_pins(meta: CoreMetadata, triton: set[str]) -> list[dict[str, str]]:
    pins = []
    for line in meta.requires_dist:
        req = parse_requirement(line)
        exact = [s for s in req.specifier if s.operator == "=="]
        if canonicalize_name(req.name) in triton or len(exact) != 1 or (req.marker and "extra" in str(req.marker)):
            continue
        pin: dict[str, str] = {"name": req.name, "version": exact[0].version}
        if req.marker is not None:
            pin["marker"] = str(req.marker)
        pins.append(pin)
    return pins


def _triton_of(meta: CoreMetadata, platform: Platform) -> tuple[str, str] | None:
    for line in meta.requires_dist:
        req = parse_requirement(line)
        if canonicalize_name(req.name) in ("triton-xpu", "pytorch-triton-xpu") and (
            req.marker is None or evaluate_marker(req.marker, marker_environment(platform))
        ):
            exact = [s.version for s in req.specifier if s.operator == "=="]
            if exact:
                return canonicalize_name(req.name), exact[0]
    return None


def _python_range(pythons: list[str], requires_python: str | None) -> str:
    minors = sorted({int(p.split(".")[1]) for p in pythons})
    if requires_python:
        minors = [m for m in minors if parse_version(f"3.{m}.0") in parse_specifier(requires_python)] or minors
    return f">=3.{minors[0]},<3.{minors[-1] + 1}" if minors else (requires_python or ">=3.10")


def _torchvision_for(wheels: list[IndexWheel], torch: str) -> str | None:
    """The newest torchvision whose metadata admits exactly this torch release."""
    fits = [
        w
        for w in wheels
        if w.project == "torchvision"
        and any(
            canonicalize_name(parse_requirement(r).name) == "torch"
            and parse_requirement(r).specifier.contains(torch, prereleases=True)
            for r in w.metadata.requires_dist
        )
    ]
    return str(max((parse_version(w.version) for w in fits), default=None)) if fits else None


def plan_refresh(
    matrix: Matrix, manifest: WheelManifest, wheels: list[IndexWheel], pypi_torch: list[str], when: str
) -> RefreshPlan:
    """What the matrix and manifest lack, given the index's wheels and PyPI's torch releases (pure)."""
    plan = RefreshPlan()
    known_files = {w.file for w in manifest.wheels}
    known_meta = {(m.key, str(parse_version(m.version)), pl) for m in manifest.metadata for pl in m.platforms}
    rows_by_minor = {".".join(p.newest_torch.split(".")[:2]): p for p in matrix.pairs}
    torch_builds: dict[str, list[IndexWheel]] = {}
    for w in wheels:
        if w.project == "torch" and parse_version(w.version).local == "xpu":
            torch_builds.setdefault(parse_version(w.version).public, []).append(w)
    listed = {v for p in matrix.pairs for v in p.torch}
    for torch, builds in sorted(torch_builds.items(), key=lambda kv: parse_version(kv[0])):
        if torch in listed:
            continue
        by_platform = {pl: next((w for w in builds if pl in w.platforms), None) for pl in ("win-64", "linux-64")}
        first = next(w for w in by_platform.values() if w is not None)
        triton = _triton_of(first.metadata, "linux-64" if by_platform["linux-64"] else "win-64")
        vision = _torchvision_for(wheels, torch)
        sycl = next(
            (p["version"] for p in _runtime_pins(first.metadata, set()) if canonicalize_name(p["name"]) == "intel-sycl-rt"), None
        )
        minor = ".".join(torch.split(".")[:2])
        row = rows_by_minor.get(minor)
        source = f"read from the PyTorch XPU index on {when}: {first.file}'s METADATA (PEP 658), {len(builds)} wheel(s)"
        if row is not None:
            update = plan.row_updates.setdefault(row.id, {"torch": list(row.torch), "torchvision": dict(row.torchvision)})
            update["torch"].append(torch)
            if vision:
                update["torchvision"][torch] = vision.split("+")[0]
            plan.notes.append(f"{row.id}: torch {torch} is on the XPU index ({source}); compare its pins with the row's")
            plan.notes += _open_issue_notes(row, torch)
            continue
        if not (sycl and triton):
            plan.notes.append(
                f"torch {torch} is on the XPU index, but {first.file}'s metadata names no "
                f"{'intel-sycl-rt pin' if not sycl else 'Triton pin'}: no row proposed"
            )
            continue
        new = {
            "id": f"xpu-{minor}",
            "torch": [torch],
            "oneapi": ".".join(sycl.split(".")[:2]),
            "python": _python_range([p for w in builds for p in w.pythons], first.metadata.requires_python),
            "windows": "full" if by_platform["win-64"] else "none",
            "triton": {"name": triton[0], "version": triton[1]},
            "bitsandbytes_min": "0.50.2",
            "bitsandbytes_native": parse_version(sycl) >= parse_version("2025.1"),
            "torchvision": {torch: vision.split("+")[0]} if vision else {},
            "torch_version_xpu": None,
            "sycl_major": 9 if parse_version(sycl) >= parse_version("2026") else 8,
            "runtime_pins": _runtime_pins(first.metadata, {triton[0]}),
            "source": source,
            "certainty": "provisional",
            "notes": "candidate written by `aipc-env matrix refresh`: review the pins, then mark it confirmed",
        }
        plan.new_rows.append(new)
        older = [p for p in matrix.pairs if parse_version(p.newest_torch) < parse_version(torch)]
        if older:
            plan.notes += _open_issue_notes(max(older, key=lambda p: parse_version(p.newest_torch)), torch)
    newest_index = max((parse_version(v) for v in torch_builds), default=None)
    for v in sorted(pypi_torch, key=Version):
        if newest_index is not None and parse_version(v) > newest_index and not parse_version(v).is_prerelease:
            plan.notes.append(f"torch {v} is on PyPI but has no XPU build on the index yet")
    found: dict[tuple[str, str], dict[Platform, IndexWheel]] = {}
    for w in sorted(wheels, key=lambda w: w.file):
        if w.file in known_files or not w.sha256 or (w.project == "torch" and parse_version(w.version).local != "xpu"):
            continue
        plan.wheels.append(
            {
                "file": w.file,
                "package": w.project,
                "version": w.version,
                "python": ".".join(t.interpreter for t in parse_wheel_filename(w.file)[3] if t.interpreter.startswith("cp"))
                or "py3",
                "platform": w.file.removesuffix(".whl").split("-")[-1],
                "url": w.url,
                "sha256": w.sha256,
                "status": "current",
                "sources": [f"{w.page} (the index, read {when})"],
                "independent_sources": 1,
            }
        )
        for platform in w.platforms:
            found.setdefault((w.project, w.version), {}).setdefault(platform, w)
    for (project, version), wheel_by_platform in found.items():
        records: list[tuple[list[str], IndexWheel]] = []
        for platform, w in wheel_by_platform.items():
            if (canonicalize_name(project), str(parse_version(version)), platform) in known_meta:
                continue
            same = next((r for r in records if r[1].metadata.same_requirements(w.metadata)), None)
            if same:
                same[0].append(platform)
            else:
                records.append(([platform], w))
        for platforms, w in records:
            plan.metadata.append(
                {
                    "package": project,
                    "version": version,
                    "platforms": sorted(platforms, reverse=True),
                    "requires_dist": list(w.metadata.requires_dist),
                    **({"requires_python": w.metadata.requires_python} if w.metadata.requires_python else {}),
                    **(
                        {"certainty": "published", "quotes": [_quote(w)]} if w.sha256 else {"certainty": "inferred"}
                    ),  # no hash: which wheel was read is not fixed
                    "sources": [f"{w.url}.metadata (PEP 658, read {when})"],
                }
            )
    return plan


def _open_issue_notes(row: Pair, torch: str) -> list[str]:
    """Keep known issues current: a new torch release may fix an open one (then record its fixed_in) or carry it
    into the next pair (then copy the record)."""
    return [
        f"{row.id}: known issue {i.id} is open (no fixed_in): check whether torch {torch} fixes it ({i.source}); "
        f"record fixed_in, or carry the record to torch {torch}'s row"
        for i in row.known_issues
        if i.fixed_in is None
    ]


def _quote(w: IndexWheel) -> dict[str, object]:
    """The METADATA lines a record was read from, as the wheel (by its sha256) shows them."""
    meta = w.metadata
    lines = ([f"Requires-Python: {meta.requires_python}"] if meta.requires_python else []) + [
        f"Requires-Dist: {r}" for r in meta.requires_dist
    ]
    return {"url": f"{w.url}.metadata", "sha256": w.sha256, "lines": lines or ["(no Requires-Dist)"]}


def _flow(value: object) -> str:
    """A flow value in the matrix's own style (JSON is YAML): ["2.12.0", "2.12.1"]."""
    import json

    return json.dumps(value)


def matrix_text(original: str, plan: RefreshPlan) -> str:
    """The matrix file with the plan applied as text (comments, anchors and order kept)."""
    text = original
    for pair_id, update in plan.row_updates.items():
        start = text.index(f"  - id: {pair_id}\n")
        end = text.find("\n  - id: ", start + 1)
        end = len(text) if end < 0 else end
        block = text[start:end]
        block = re.sub(r"(?m)^    torch: .*$", f"    torch: {_flow(update['torch'])}", block, count=1)
        if update["torchvision"]:
            block = re.sub(r"(?m)^    torchvision: .*$", f"    torchvision: {_flow(update['torchvision'])}", block, count=1)
        text = text[:start] + block + text[end:]
    if plan.new_rows:
        rows = yaml.safe_dump(plan.new_rows, sort_keys=False, width=120, allow_unicode=True)
        text = text.rstrip("\n") + "\n\n" + "\n".join("  " + ln if ln else ln for ln in rows.splitlines()) + "\n"
    return text


def manifest_text(original: str, plan: RefreshPlan) -> str:
    """The manifest file with the plan's wheels and metadata added (its header comments kept)."""
    head = original[: original.index("schema_version:")]
    from aipc_env.core.fileio import parse_yaml

    data = parse_yaml(original, "environments/xpu-wheels.yaml", "wheel manifest")
    data["wheels"] = data.get("wheels", []) + plan.wheels
    data["metadata"] = data.get("metadata", []) + plan.metadata
    dumped: str = yaml.safe_dump(data, sort_keys=False, width=200, allow_unicode=True)
    return head + dumped


def unified_diff(before: str, after: str, name: str) -> str:
    return "".join(
        difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True), f"{name}", f"{name} (candidate)")
    )


def today() -> str:
    return _dt.date.today().isoformat()


class RefreshReport(VersionedModel):
    """`aipc-env matrix refresh --json`."""

    FORMAT: ClassVar[str] = "matrix refresh report"
    schema_version: Literal[1] = 1
    xpu_index_url: str
    new_rows: list[str]
    updated_rows: list[str]
    new_wheels: int
    new_metadata: int
    notes: list[str]
    unreadable: list[str]
    """Index pages or metadata files that could not be read (the candidate lacks what they hold)."""
    written: list[str]
    """The candidate files (nothing in environments/ is changed)."""


def candidate_paths(out: Path) -> tuple[Path, Path]:
    return out / "matrix.candidate.yaml", out / "xpu-wheels.candidate.yaml"


def check_candidates(matrix_file: Path, manifest_file: Path) -> None:
    """The candidates load as the real files do (a candidate that would not load is a bug, not a proposal)."""
    from aipc_env.core.formats import load_versioned
    from aipc_env.matrix.model import load_matrix

    load_matrix(matrix_file)
    load_versioned(WheelManifest, manifest_file)


def _supported(file: str) -> bool:
    try:
        tags = parse_wheel_filename(file)[3]
    except InvalidWheelFilename:
        return False
    return any(wheel_platform_fits(t.platform, pl) for t in tags for pl in ("win-64", "linux-64")) and any(
        t.interpreter in ("py3", "py2.py3") or (re.fullmatch(r"cp3\d+", t.interpreter) and int(t.interpreter[3:]) >= 10)
        for t in tags
    )


def read_index(
    xpu_index_url: str, pypi_url: str, manifest: WheelManifest, reader_cache: Path | None = None
) -> tuple[list[IndexWheel], list[str], list[str]]:
    """The XPU index's torch, torchvision and Triton wheels the manifest lacks (with their metadata), PyPI's torch
    releases, and what could not be read."""
    from concurrent.futures import ThreadPoolExecutor

    from aipc_env.lock.simple_index import IndexFile, IndexReadError, MetadataCache, fetch_metadata, project_files

    cache = MetadataCache(reader_cache)
    known = {w.file for w in manifest.wheels}
    unreadable: list[str] = []
    todo: list[tuple[str, IndexFile, str]] = []
    for project in XPU_PROJECTS:
        page = f"{xpu_index_url.rstrip('/')}/{project}/"
        try:
            files = project_files(xpu_index_url, project)
        except IndexReadError as exc:
            if exc.status != 404:  # 404: the index has no such project (pytorch-triton-xpu after the rename)
                unreadable.append(str(exc))
            continue
        todo += [
            (project, f, page) for name, f in files.items() if name.endswith(".whl") and name not in known and _supported(name)
        ]

    def read(item: tuple[str, IndexFile, str]) -> IndexWheel | str:
        project, file, page = item
        try:
            meta, _ = fetch_metadata(file, cache=cache)
        except IndexReadError as exc:
            return str(exc)
        return IndexWheel(project, file.filename, file.url, file.sha256, meta, page)

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(read, todo))
    wheels = [r for r in results if isinstance(r, IndexWheel)]
    unreadable += [r for r in results if isinstance(r, str)]
    try:
        pypi = sorted(
            {str(parse_wheel_filename(n)[1]) for n in project_files(pypi_url, "torch") if n.endswith(".whl")}, key=Version
        )
    except (IndexReadError, InvalidWheelFilename) as exc:
        unreadable.append(str(exc))
        pypi = []
    return wheels, pypi, unreadable
