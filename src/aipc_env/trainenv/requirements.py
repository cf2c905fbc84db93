"""Make a qwen-image-finetune requirements.txt installable on XPU with the pair's torch kept: the edits (pure,
idempotent, every line keeping its own line ending) and the file I/O (refuse read-only files, back up the
original, write atomically keeping mode, owner and symlinks) in apply_edits().

Edits, each marked with an `# aipc-env:` comment so a second run finds nothing to do:
- CUDA-only packages are commented out (transformer_engine, flash-attn);
- bitsandbytes is raised to the pair's minimum;
- pins that contradict the pair's torch (its own Requires-Dist, e.g. setuptools==69.5.1 vs >=77.0.3) are relaxed;
- torch and torchvision are pinned to the pair's XPU builds, with the XPU index line, so a plain `pip install -r`
  takes them from there and can never replace them with PyPI's CUDA build and its nvidia-* packages.
Conflicts with aipc-env's pip layer (and with a lock, where one exists) are reported, not edited.
"""

from __future__ import annotations

import difflib
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from aipc_env.core.fileio import atomic_write_bytes, decode_text
from aipc_env.core.formats import VersionedModel
from aipc_env.core.specs import parse_requirement, parse_version
from aipc_env.errors import InputError
from aipc_env.matrix import Pair

__all__ = [
    "CUDA_ONLY",
    "MARK",
    "EditResult",
    "RequirementsReport",
    "apply_edits",
    "edit_requirements",
    "specifiers_conflict",
    "split_lines",
]

CUDA_ONLY = {
    "transformer-engine": "transformer_engine is CUDA-only (no XPU build; its source build needs nvcc)",
    "flash-attn": "flash-attn is CUDA-only (aipc-env uses PyTorch SDPA on XPU)",
}
MARK = "# aipc-env:"
_EOL = re.compile(r"(\r\n|\n|\r)")


@dataclass
class EditResult:
    text: str
    changed: bool
    edits: list[str] = field(default_factory=list)
    report: list[str] = field(default_factory=list)


def split_lines(text: str) -> list[tuple[str, str]]:
    """(content, ending) per line, each line keeping its own ending ('' for a last line without one)."""
    parts = _EOL.split(text)
    lines = [(parts[i], parts[i + 1] if i + 1 < len(parts) else "") for i in range(0, len(parts), 2)]
    if lines and lines[-1] == ("", ""):
        lines.pop()
    return lines


def _parse(line: str) -> Requirement | None:
    """The requirement on a line, or None for comments, options (-e, -r, --index-url), URLs and direct references
    (`name @ https://...`, left as written)."""
    body = line.split(" #", 1)[0].strip()
    if "://" in body:
        return None
    try:
        return parse_requirement(body)
    except InvalidRequirement:
        return None


def _admits_older(spec: SpecifierSet, minimum: Version) -> bool:
    """Whether a specifier still allows a version below the minimum (no lower bound at or above it)."""
    for item in sorted(spec, key=str):  # a SpecifierSet's own order follows the string hash seed
        try:
            bound = parse_version(item.version.rstrip(".*"))
        except InvalidVersion:
            continue
        if item.operator in (">=", ">", "==", "~=", "===") and bound >= minimum:
            return False
    return True


def specifiers_conflict(a: SpecifierSet, b: SpecifierSet) -> bool:
    """Whether no version satisfies both (checked on the versions the specifiers name and their neighbours)."""
    if not str(a) or not str(b):
        return False
    candidates: set[Version] = set()
    for item in [*a, *b]:
        try:
            v = parse_version(item.version.rstrip(".*"))
        except InvalidVersion:
            return False
        release = list(v.release) + [0] * (3 - len(v.release))
        candidates |= {
            v,
            parse_version(".".join(map(str, release[:2] + [release[2] + 1]))),
            parse_version(".".join(map(str, [release[0], release[1] + 1, 0]))),
            parse_version(f"{release[0] + 1}.0.0"),
        }
    return not any(a.contains(v, prereleases=True) and b.contains(v, prereleases=True) for v in candidates)


def _pinned_block(pair: Pair, xpu_index: str, ending: str) -> list[tuple[str, str]]:
    torch = f"torch=={pair.newest_torch}+xpu"
    lines = [
        (
            f"{MARK} the pair's XPU torch ({pair.id}), from the PyTorch XPU index: a plain `pip install -r` keeps it and never",
            ending,
        ),
        (f"{MARK} takes PyPI's CUDA build (and its nvidia-* packages) instead", ending),
        (f"--extra-index-url {xpu_index}", ending),
        (torch, ending),
    ]
    if pair.newest_torchvision:
        lines.append((f"torchvision=={pair.torchvision_version(pair.newest_torch)}", ending))
    return lines


def edit_requirements(
    text: str,
    *,
    pair: Pair,
    xpu_index: str,
    pip_layer: list[str] | None = None,
    locked: dict[str, str] | None = None,
    torch_requires: list[str] | None = None,
) -> EditResult:
    """The edited text (see the module doc) and a report; pure given `torch_requires` (torch's Requires-Dist;
    default: the newest torch's, as environments/xpu-wheels.yaml records it)."""
    result = EditResult(text=text, changed=False)
    lines = split_lines(text)
    ending = lines[0][1] if lines and lines[0][1] else "\n"
    minimum = parse_version(pair.bitsandbytes_min)
    if torch_requires is None:
        from aipc_env.lock.wheels import torch_requires_dist

        torch_requires = torch_requires_dist(pair, pair.newest_torch)
    torch_needs = {canonicalize_name(parse_requirement(r).name): parse_requirement(r).specifier for r in torch_requires}
    layer = {canonicalize_name(parse_requirement(r).name): parse_requirement(r).specifier for r in (pip_layer or [])}
    already_pinned = any(content.startswith(MARK) and "XPU torch" in content for content, _ in lines)
    if already_pinned and not any(content.strip() == f"torch=={pair.newest_torch}+xpu" for content, _ in lines):
        result.report.append(
            f"the XPU torch pins come from an earlier run for another pair; restore the backup "
            f"(.aipc-backup) and run again for {pair.id}"
        )
    out: list[tuple[str, str]] = []
    seen: dict[str, int] = {}
    for number, (line, eol) in enumerate(lines, start=1):
        if "\x00" in line:
            result.report.append(f"line {number}: contains a NUL byte; left as is (is this a text file?)")
            out.append((line, eol))
            continue
        req = _parse(line)
        if req is None:
            out.append((line, eol))
            continue
        key = canonicalize_name(req.name)
        if key in seen:
            result.report.append(
                f"line {number}: {req.name} is listed again (first on line {seen[key]}); pip "
                "takes both, and conflicting pins fail the install"
            )
        seen.setdefault(key, number)
        indent = line[: len(line) - len(line.lstrip())]
        if key in CUDA_ONLY:
            out += [(f"{indent}{MARK} {CUDA_ONLY[key]}", eol), (f"{indent}# {line.strip()}", eol)]
            result.edits.append(f"line {number}: commented out {req.name}")
            continue
        if key in ("torch", "torchvision") and not already_pinned:
            out += [(f"{indent}{MARK} {req.name} comes from the pair's XPU pins below", eol), (f"{indent}# {line.strip()}", eol)]
            result.edits.append(f"line {number}: {req.name} replaced by the pair's XPU build")
            continue
        if key == "bitsandbytes" and _admits_older(req.specifier, minimum):
            extras = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
            marker = f"; {req.marker}" if req.marker else ""
            new = f"{indent}{req.name}{extras}>={pair.bitsandbytes_min}{marker}  {MARK} XPU needs >= {minimum}"
            out.append((new, eol))
            result.edits.append(f"line {number}: {line.strip()!r} -> bitsandbytes>={minimum} (XPU backend)")
            continue
        if key in torch_needs and specifiers_conflict(req.specifier, torch_needs[key]):
            extras = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
            marker = f"; {req.marker}" if req.marker else ""
            out.append(
                (
                    f"{indent}{req.name}{extras}{torch_needs[key]}{marker}  {MARK} was {line.strip()}; "
                    f"torch {pair.newest_torch} needs {req.name}{torch_needs[key]}",
                    eol,
                )
            )
            result.edits.append(
                f"line {number}: {line.strip()!r} relaxed to {req.name}{torch_needs[key]} (torch {pair.newest_torch} needs it)"
            )
            continue
        out.append((line, eol))
        if key in layer and specifiers_conflict(req.specifier, layer[key]):
            result.report.append(
                f"line {number}: {line.strip()} conflicts with aipc-env's pip layer "
                f"({req.name}{layer[key]}): this env cannot also be aipc-env's training env"
            )
        if locked and key in locked and str(req.specifier) and not req.specifier.contains(locked[key], prereleases=True):
            result.report.append(
                f"line {number}: {line.strip()} contradicts the lock ({req.name} {locked[key]}); "
                "pip would replace the locked version"
            )
    if not already_pinned:
        if out and not out[-1][1]:
            out[-1] = (out[-1][0], ending)
        out += _pinned_block(pair, xpu_index, ending)
        result.edits.append(
            f"appended torch=={pair.newest_torch}+xpu"
            + (f", torchvision=={pair.torchvision_version(pair.newest_torch)}" if pair.newest_torchvision else "")
            + f" with the XPU index line ({xpu_index})"
        )
    result.text = "".join(content + eol for content, eol in out)
    result.changed = result.text != text
    return result


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
    backup: str | None = None
    diff: str | None = None


def apply_edits(
    path: Path, *, pair: Pair, xpu_index: str, pip_layer: list[str] | None, locked: dict[str, str] | None, dry_run: bool
) -> tuple[EditResult, str, Path | None]:
    """Edit a requirements file in place: refuse a read-only file, keep a backup of the original (once), then an
    atomic write keeping mode, owner, symlink and BOM. Returns the result, a unified diff and the backup path.
    A second run finds nothing to change and writes nothing."""
    try:
        raw = path.read_bytes()
        st = path.stat()
    except FileNotFoundError:
        raise InputError("requirements file not found", path=path, fix="pass the clone's requirements.txt") from None
    except IsADirectoryError:
        raise InputError("is a folder, expected a requirements file", path=path) from None
    except OSError as exc:
        raise InputError(f"cannot read the requirements file: {exc.strerror}", path=path) from None
    bom = raw.startswith(b"\xef\xbb\xbf")
    text = decode_text(raw, path, "requirements file")
    result = edit_requirements(text, pair=pair, xpu_index=xpu_index, pip_layer=pip_layer, locked=locked)
    diff = "".join(
        difflib.unified_diff(
            text.splitlines(keepends=True), result.text.splitlines(keepends=True), fromfile=str(path), tofile=f"{path} (aipc-env)"
        )
    )
    backup = None
    if result.changed and not dry_run:
        if not st.st_mode & stat.S_IWUSR or (hasattr(os, "geteuid") and os.geteuid() != 0 and not os.access(path, os.W_OK)):
            raise InputError(
                "the requirements file is read-only; nothing was changed",
                path=path,
                fix="make it writable (chmod u+w, or clear the read-only attribute) and run again, or "
                "use --dry-run to see the edits",
            )
        backup = path.with_name(path.name + ".aipc-backup")
        if not backup.exists():
            atomic_write_bytes(backup, raw, mode=stat.S_IMODE(st.st_mode))
        atomic_write_bytes(path, (b"\xef\xbb\xbf" if bom else b"") + result.text.encode("utf-8"))
    return result, diff, backup
