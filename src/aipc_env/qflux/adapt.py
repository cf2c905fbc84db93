"""Apply and revert the step-5 adaptation on a clone: plan every edit in memory from the pristine files (an
anchor that does not match refuses the whole run, naming anchor and file), back up each file once, write each
file atomically keeping its mode and line endings, roll back on any failure. A second apply writes nothing;
`revert` restores the pristine bytes (checked by hash) and removes what was created.

State lives in <clone>/.aipc-adapt/: manifest.json (AdaptManifest) and backup/<path> (pristine bytes).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

from aipc_env.core.fileio import atomic_write_bytes
from aipc_env.core.formats import StrictModel, VersionedModel, load_versioned, timestamp, write_model
from aipc_env.core.interrupts import checkpoint
from aipc_env.errors import AipcError, ExitCode, InputError
from aipc_env.qflux.patches import (
    CALL_REWRITES,
    CREATED,
    HELPER_NAMES,
    HELPERS_MODULE,
    PATCHES,
    SRC,
    Replace,
    helper_import,
    import_anchor,
)

__all__ = [
    "STATE_DIR",
    "AdaptManifest",
    "AnchorMismatch",
    "Plan",
    "apply_adaptation",
    "is_adapted",
    "load_manifest",
    "plan_adaptation",
    "revert_adaptation",
]

STATE_DIR = ".aipc-adapt"
NO_HELPER_IMPORT = {f"{SRC}/data/config.py"}
"""qflux.utils imports qflux.data.config (utils/options.py), so config.py cannot import qflux.utils.device_utils."""
PATCH_SET = 1
"""Bumped when the edits change: an adapted clone is then re-adapted from its pristine backups."""


class AnchorMismatch(AipcError):
    """The clone differs from the upstream the edits were written for."""

    exit_code = ExitCode.PROBLEMS


class FileRecord(StrictModel):
    path: str
    pristine_sha256: str | None
    """None: the file was created by the adaptation."""
    adapted_sha256: str
    edits: list[str]


class AdaptManifest(VersionedModel):
    FORMAT: ClassVar[str] = "adaptation manifest"
    FIX: ClassVar[str] = "restore the clone from git (git checkout -- . && git clean -fd src) and adapt again"
    schema_version: Literal[1] = 1
    patch_set: int
    state: Literal["applying", "applied"]
    when: str
    files: list[FileRecord]


@dataclass
class Planned:
    path: str
    pristine: bytes | None
    adapted: bytes
    edits: list[str]


@dataclass
class Plan:
    files: list[Planned]


def _sha(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


def _text(data: bytes, path: str) -> tuple[str, str]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise AnchorMismatch(
            f"{path} is not UTF-8 ({exc.reason})",
            path=path,
            fix=f"restore it from git (git checkout -- {path}): upstream's files are UTF-8",
        ) from None
    newline = "\r\n" if "\r\n" in text else "\n"
    return text.replace("\r\n", "\n"), newline


def load_manifest(clone: Path) -> AdaptManifest | None:
    path = clone / STATE_DIR / "manifest.json"
    return load_versioned(AdaptManifest, path) if path.is_file() else None


def _pristine(clone: Path, rel: str, manifest: AdaptManifest | None) -> bytes | None:
    """The file as upstream shipped it: its backup when the clone was adapted before, else the file itself."""
    if manifest is not None:
        rec = next((f for f in manifest.files if f.path == rel), None)
        if rec is not None:
            if rec.pristine_sha256 is None:
                return None
            backup = clone / STATE_DIR / "backup" / rel
            data = backup.read_bytes() if backup.is_file() else None  # missing, even where upstream's file is empty
            if data is None or _sha(data) != rec.pristine_sha256:
                raise InputError(f"the backup of {rel} is missing or damaged", path=backup, fix=AdaptManifest.FIX)
            return data
    p = clone / rel
    return p.read_bytes() if p.is_file() else None


def require_clone(clone: Path) -> None:
    if not (clone / SRC).is_dir():
        raise InputError(
            f"{clone} has no {SRC} package",
            path=clone,
            fix="point at a clone of tsiendragon/qwen-image-finetune (its root folder)",
        )


def plan_adaptation(clone: Path) -> Plan:
    """Every edited and created file with its pristine and adapted bytes; refuses on the first mismatch."""
    clone = Path(clone)
    require_clone(clone)
    manifest = load_manifest(clone)
    by_file: dict[str, list[Replace]] = {}
    for patch in PATCHES:
        by_file.setdefault(patch.path, []).append(patch)
    created = {c.path: c for c in CREATED}
    sources = sorted(str(p.relative_to(clone)).replace(os.sep, "/") for p in (clone / SRC).rglob("*.py"))
    names = set(sources) | set(by_file) | set(created)
    planned: list[Planned] = []
    leftovers: list[str] = []
    for rel in sorted(names):
        pristine = _pristine(clone, rel, manifest)
        if rel in created:
            if pristine is not None:
                raise AnchorMismatch(
                    f"{rel} already exists upstream: this clone is not the upstream the adaptation was written for",
                    path=rel,
                    fix="adapt a clone of 460ba1a, or update aipc-env",
                )
            content = created[rel].content.encode("utf-8")
            planned.append(Planned(rel, None, content, [f"create ({created[rel].why})"]))
            continue
        if pristine is None:
            raise AnchorMismatch(
                f"anchor file {rel} does not exist",
                path=rel,
                fix="this clone is another upstream layout; adapt a clone of 460ba1a",
            )
        text, newline = _text(pristine, rel)
        edits = []
        for patch in by_file.get(rel, []):
            found = text.count(patch.old)
            if found != patch.count:
                first_line = patch.old.strip().splitlines()[0]
                raise AnchorMismatch(
                    f"anchor {patch.id!r} ({first_line!r}) occurs {found} time(s) in {rel}, "
                    f"expected {patch.count}: nothing was changed",
                    path=rel,
                    fix="this clone is another upstream commit; adapt a clone of 460ba1a, or update aipc-env",
                )
            text = text.replace(patch.old, patch.new)
            edits.append(patch.id)
        if rel != HELPERS_MODULE:
            for rw in CALL_REWRITES:
                text, n = re.subn(rw.pattern, rw.replacement, text)
                if n:
                    edits.append(f"{rw.helper} x{n}")
            code = "\n".join(line.partition("#")[0] for line in text.splitlines())  # comments need no imports
            code_uses = {name for name in HELPER_NAMES if re.search(rf"(?<![\w.]){name}\(", code) and f"def {name}(" not in code}
            if code_uses and rel in NO_HELPER_IMPORT:
                raise AnchorMismatch(
                    f"{rel} would need the device helpers, which it cannot import (its package imports it back)",
                    path=rel,
                    fix="update aipc-env",
                )
            if code_uses:
                at = import_anchor(text)
                if at is None:
                    raise AnchorMismatch(
                        f"{rel} uses torch.cuda but has no top-level `import torch` line to anchor the helpers import on",
                        path=rel,
                        fix="this clone is another upstream commit; update aipc-env",
                    )
                text = text[:at] + helper_import(sorted(code_uses)) + text[at:]
            for number, line in enumerate(text.splitlines(), 1):
                if "torch.cuda." in line:
                    leftovers.append(f"{rel}:{number}: {line.strip()}")
        if edits:
            planned.append(Planned(rel, pristine, text.replace("\n", newline).encode("utf-8"), edits))
    if leftovers:
        raise AnchorMismatch(
            f"{len(leftovers)} torch.cuda use(s) the adaptation does not know: {'; '.join(leftovers[:3])}",
            path=leftovers[0].split(":")[0],
            fix="this clone is another upstream commit; update aipc-env",
        )
    return Plan(planned)


def is_adapted(clone: Path) -> bool:
    manifest = load_manifest(clone)
    if manifest is None or manifest.state != "applied" or manifest.patch_set != PATCH_SET:
        return False
    return all(
        _sha((clone / f.path).read_bytes() if (clone / f.path).is_file() else None) == f.adapted_sha256 for f in manifest.files
    )


def _inside(clone: Path, rel: str) -> Path:
    """The clone's file `rel`, refused when its real path (links followed) leaves the clone."""
    target = clone / rel
    real = Path(os.path.realpath(target))
    if not real.is_relative_to(Path(os.path.realpath(clone))):
        raise InputError(
            f"{rel} leads outside the clone (to {real})",
            path=target,
            fix="replace the link with the file itself; adapt never edits files outside the clone",
        )
    return target


def _rollback(clone: Path, manifest: AdaptManifest) -> None:
    """Put every file the journal names back to its pristine bytes when it holds the adapted ones (whether or not
    this process wrote it), created files removed; the journal stays until every file is pristine again."""
    for rec in manifest.files:
        target = clone / rec.path
        current = _sha(target.read_bytes()) if target.is_file() else None
        if current != rec.adapted_sha256:
            continue
        if rec.pristine_sha256 is None:
            target.unlink()  # it holds the adapted bytes, so it exists
        else:
            atomic_write_bytes(target, (clone / STATE_DIR / "backup" / rec.path).read_bytes())


def apply_adaptation(clone: Path, *, log: Callable[[str], None] = print) -> list[str]:
    """Adapt the clone (see the module doc). Returns the files written (empty when it was already adapted).

    Transactional: the backups and a journal (the manifest in state `applying`, listing every file's pristine and
    adapted hash) are on disk before the first file is replaced. An interrupt at any instant leaves a journal the
    next run resumes from (it plans from the backups, so adapted files are never taken for pristine ones), and
    `--revert` undoes. A failure rolls back every journaled file that holds its adapted bytes."""
    clone = Path(clone)
    require_clone(clone)
    _inside(clone, STATE_DIR)
    plan = plan_adaptation(clone)
    manifest = load_manifest(clone)
    recorded = {f.path: f for f in manifest.files} if manifest else {}
    todo = []
    for item in plan.files:
        target = _inside(clone, item.path)
        current = target.read_bytes() if target.is_file() else None
        if current == item.adapted:
            continue
        known = {item.pristine and _sha(item.pristine), recorded[item.path].adapted_sha256 if item.path in recorded else None} - {
            None
        }
        if current is not None and _sha(current) not in known:
            raise AipcError(
                f"{item.path} was edited after the adaptation (its content is neither upstream's nor "
                "the adapted one); nothing was changed",
                path=target,
                exit_code=ExitCode.PROBLEMS,
                fix="keep your edits elsewhere, then `aipc-env adapt --revert --force` and adapt again",
            )
        todo.append(item)
    state = clone / STATE_DIR
    if not todo:
        if manifest is None or manifest.state != "applied" or manifest.patch_set != PATCH_SET:
            _write_manifest(clone, plan, "applied")
        return []
    for item in plan.files:  # back up each pristine file once, before anything is changed
        backup = state / "backup" / item.path
        if item.pristine is not None and not backup.is_file():
            atomic_write_bytes(backup, item.pristine)
    checkpoint("adapt:after-backup")
    journal = _write_manifest(clone, plan, "applying")
    checkpoint("adapt:after-journal")
    try:
        for item in todo:
            atomic_write_bytes(clone / item.path, item.adapted)
            checkpoint("adapt:after-replace")
        checkpoint("adapt:before-applied")
        _write_manifest(clone, plan, "applied")
    except BaseException:
        _rollback(clone, journal)
        if manifest is None:  # nothing of this clone was adapted before this run: no journal needed any more
            shutil.rmtree(state, ignore_errors=True)
        raise
    for item in todo:
        log(f"adapt: {item.path}: {', '.join(item.edits)}")
    return [item.path for item in todo]


def _write_manifest(clone: Path, plan: Plan, state: str) -> AdaptManifest:
    manifest = AdaptManifest(
        patch_set=PATCH_SET,
        state=state,
        when=timestamp(),
        files=[
            FileRecord(
                path=i.path, pristine_sha256=_sha(i.pristine), adapted_sha256=hashlib.sha256(i.adapted).hexdigest(), edits=i.edits
            )
            for i in plan.files
        ],
    )
    write_model(clone / STATE_DIR / "manifest.json", manifest)
    return manifest


def revert_adaptation(clone: Path, *, force: bool = False, log: Callable[[str], None] = print) -> list[str]:
    """Restore every edited file's pristine bytes and remove created files; refuses (unless force) when a file was
    edited after the adaptation, and before changing anything when a backup is missing or damaged. Works from an
    `applying` journal too (an interrupted adapt). Returns the files restored or removed."""
    clone = Path(clone)
    _inside(clone, STATE_DIR)
    manifest = load_manifest(clone)
    if manifest is None:
        raise InputError(
            f"{clone} was not adapted by aipc-env (no {STATE_DIR}/manifest.json)", path=clone, fix="nothing to revert"
        )
    changed, damaged = [], []
    backups: dict[str, bytes] = {}
    for rec in manifest.files:
        target = _inside(clone, rec.path)
        current = target.read_bytes() if target.is_file() else None
        if current is not None and _sha(current) not in (rec.adapted_sha256, rec.pristine_sha256) and not force:
            changed.append(rec.path)
        if rec.pristine_sha256 is not None:
            backup = clone / STATE_DIR / "backup" / rec.path
            data = backup.read_bytes() if backup.is_file() and not backup.is_symlink() else None
            if data is None or _sha(data) != rec.pristine_sha256:
                damaged.append(rec.path)
            else:
                backups[rec.path] = data
    if damaged:  # checked for every file before any file is changed
        raise InputError(
            f"the backup of {', '.join(damaged)} is missing or damaged; nothing was reverted",
            path=clone / STATE_DIR,
            fix=AdaptManifest.FIX,
        )
    if changed:
        raise AipcError(
            f"edited after the adaptation: {', '.join(changed)}; nothing was reverted",
            path=clone,
            exit_code=ExitCode.PROBLEMS,
            fix="copy your edits elsewhere, then `aipc-env adapt CLONE --revert --force`",
        )
    done = []
    for rec in manifest.files:
        target = clone / rec.path
        if rec.pristine_sha256 is None:
            if target.exists():
                target.unlink()
                done.append(rec.path)
                log(f"adapt: removed {rec.path} (created by the adaptation)")
            continue
        data = backups[rec.path]
        if not target.is_file() or target.read_bytes() != data:
            atomic_write_bytes(target, data)
            done.append(rec.path)
            log(f"adapt: restored {rec.path}")
            checkpoint("adapt:revert-after-restore")
    shutil.rmtree(clone / STATE_DIR)
    return done
