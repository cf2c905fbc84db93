"""Edit a qwen-image-finetune requirements.txt for XPU: idempotent, line-preserving, with a report (pure), plus
the file I/O (backup, atomic write) in apply_edits()."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from aipc_env.errors import InputError
from aipc_env.fileio import atomic_write_bytes
from aipc_env.formats import VersionedModel

__all__ = ["EditResult", "RequirementsReport", "edit_requirements", "apply_edits", "CUDA_ONLY"]

CUDA_ONLY = {"transformer-engine": "transformer_engine is CUDA-only (no XPU build; its source build needs nvcc)",
             "flash-attn": "flash-attn is CUDA-only (aipc-env uses PyTorch SDPA on XPU)"}
_MARK = "# aipc-env:"


@dataclass
class EditResult:
    text: str
    changed: bool
    edits: list[str] = field(default_factory=list)
    report: list[str] = field(default_factory=list)


def _parse(line: str) -> Requirement | None:
    body = line.split(" #", 1)[0].strip()
    if not body or body.startswith(("#", "-")) or "://" in body:
        return None
    try:
        return Requirement(body)
    except InvalidRequirement:
        return None


def _admits_older(spec: SpecifierSet, minimum: Version) -> bool:
    """Whether a specifier still allows a version below the minimum (no lower bound at or above it)."""
    for item in spec:
        if item.operator in (">=", ">", "==", "~=", "===") and Version(item.version.rstrip(".*")) >= minimum:
            return False
    return True


def edit_requirements(text: str, *, bnb_min: str, locked: dict[str, str] | None = None) -> EditResult:
    """Comment out CUDA-only packages, raise bitsandbytes to the pair's minimum, report contradictions."""
    newline = "\r\n" if "\r\n" in text else "\n"
    lines = text.split(newline)
    out: list[str] = []
    result = EditResult(text=text, changed=False)
    seen: dict[str, int] = {}
    minimum = Version(bnb_min)
    for number, line in enumerate(lines, start=1):
        req = _parse(line)
        if req is None:
            out.append(line)
            continue
        key = canonicalize_name(req.name)
        if key in seen:
            result.report.append(f"line {number}: {req.name} is listed again (first on line {seen[key]}); pip "
                                 "takes both, and conflicting pins fail the install")
        seen.setdefault(key, number)
        if key in CUDA_ONLY:
            indent = line[: len(line) - len(line.lstrip())]
            out += [f"{indent}{_MARK} {CUDA_ONLY[key]}", f"{indent}# {line.strip()}"]
            result.edits.append(f"line {number}: commented out {req.name}")
            continue
        if key == "bitsandbytes" and _admits_older(req.specifier, minimum):
            extras = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
            marker = f"; {req.marker}" if req.marker else ""
            comment = f" #{line.split(' #', 1)[1]}" if " #" in line else ""
            new = f"{req.name}{extras}>={bnb_min}{marker}{comment}"
            out.append(new)
            result.edits.append(f"line {number}: {line.strip()!r} -> {new!r} (XPU backend needs >= {bnb_min})")
            continue
        out.append(line)
        if locked and key in locked and str(req.specifier):
            if not req.specifier.contains(locked[key], prereleases=True):
                result.report.append(f"line {number}: {line.strip()} contradicts the lock ({req.name} "
                                     f"{locked[key]}); pip would replace the locked version")
    result.text = newline.join(out)
    result.changed = result.text != text
    return result


def apply_edits(path: Path, *, bnb_min: str, locked: dict[str, str] | None, dry_run: bool) -> tuple[EditResult, str]:
    """Edit a requirements file in place: a backup of the original first, then an atomic write. Returns the
    result and a unified diff. A second run finds nothing to change and writes nothing."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise InputError("requirements file not found", path=path) from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InputError("not UTF-8 text", path=path) from None
    bom = raw.startswith(b"\xef\xbb\xbf")
    result = edit_requirements(text, bnb_min=bnb_min, locked=locked)
    diff = "".join(difflib.unified_diff(text.splitlines(keepends=True), result.text.splitlines(keepends=True),
                                        fromfile=str(path), tofile=f"{path} (aipc-env)"))
    if result.changed and not dry_run:
        backup = path.with_name(path.name + ".aipc-backup")
        if not backup.exists():
            atomic_write_bytes(backup, raw)
        atomic_write_bytes(path, (b"\xef\xbb\xbf" if bom else b"") + result.text.encode("utf-8"))
    return result, diff




class RequirementsReport(VersionedModel):
    """`aipc-env patch-requirements --json`."""

    FORMAT: ClassVar[str] = "requirements edit report"
    schema_version: Literal[1] = 1
    path: str
    pair: str
    pair_why: str
    dry_run: bool
    changed: bool
    edits: list[str]
    warnings: list[str]
    notes: list[str]
    diff: str | None = None
