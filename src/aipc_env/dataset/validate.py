"""Validate a scanned dataset: blocking issues and advice, as the runbook's verdict JSON."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal

from aipc_env.core.formats import VersionedModel
from aipc_env.dataset.images import ImageProblem, check_image
from aipc_env.dataset.scan import Sample, Scan, scan_dataset

__all__ = ["MIN_SAMPLES", "WARN_SAMPLES", "Verdict", "split_problems", "validate_dataset", "validate_scan"]

MIN_SAMPLES = 5
WARN_SAMPLES = 30
SMOKE_ONLY = 20
PROMPT_WORDS = (10, 200)
VAGUE = {"edit the image", "edit image", "edit", "change the image", "make it better"}
CAPTION_START = ("a ", "an ", "the ", "photo of", "image of", "picture of")


class Verdict(VersionedModel):
    """The runbook's dataset verdict (`aipc-env dataset validate`): issues block training, warnings advise."""

    FORMAT: ClassVar[str] = "dataset verdict"
    schema_version: Literal[1] = 1
    valid: bool
    format: Literal["local", "parquet", "csv"]
    sample_count: int
    issues: list[str] = []
    warnings: list[str] = []
    heldout: list[str] = []
    """The ids of the held-out split that was checked (--heldout N), which the fit never sees."""


def set_folder(scan: Scan) -> Path:
    """The folder a set's images must stay in: the dataset folder, or the folder of its CSV or parquet file."""
    return scan.root if scan.root.is_dir() else scan.root.parent


def _image_problems(
    sample: Sample,
    part: Path | bytes | None,
    role: str,
    target_size: tuple[int, int] | None,
    issues: list[str],
    small: list[str],
    root: Path | None = None,
) -> None:
    if part is None:
        return
    if isinstance(part, Path) and not part.is_file() and not part.is_symlink():
        issues.append(f"{sample.where}: {role} {part} does not exist")
        return
    try:
        header = check_image(part, root=root)
    except ImageProblem as exc:
        issues.append(f"{sample.where}: {role} {exc}")
        return
    mode, w, h = header.mode, header.width, header.height
    if role != "mask" and mode != "RGB":
        issues.append(
            f"{sample.where}: {role} is {mode}, not RGB (convert it: RGBA, greyscale and palette images are not handled like RGB)"
        )
    if target_size and role == "target" and (h < target_size[0] or w < target_size[1]):
        small.append(f"{sample.id} ({w} wide, {h} high)")


def split_problems(samples: list[Sample], count: int) -> tuple[list[str], list[str]]:
    """(held-out ids, issues) of holding out `count` samples by the recorded rule (aipc_env.dataset.split): at least
    HELDOUT_MIN, each with a control, a prompt and a target, and MIN_SAMPLES left to train on."""
    from aipc_env.dataset.split import HELDOUT_MIN, HELDOUT_RULE, split_samples

    train, held = split_samples(samples, [s.id for s in samples], count)
    issues = []
    if count < HELDOUT_MIN:
        issues.append(f"held-out split: {count} sample(s); hold out at least {HELDOUT_MIN} (runbook §3)")
    incomplete = [s.id for s in held if not (s.controls and s.prompt and s.target is not None)]
    if incomplete:
        issues.append(
            f"held-out split: samples without a control, a prompt or a target: {', '.join(incomplete[:5])} (the judge "
            "compares each with its edited target)"
        )
    if len(train) < MIN_SAMPLES:
        issues.append(
            f"held-out split: {len(samples)} sample(s), {len(held)} held out by rule {HELDOUT_RULE}, leaves "
            f"{len(train)} to train on: at least {MIN_SAMPLES} are needed (add samples)"
        )
    return sorted({s.id for s in held}), issues


def validate_scan(scan: Scan, target_size: tuple[int, int] | None = (384, 672), heldout: int | None = None) -> Verdict:
    """The verdict; `heldout`: also check the held-out split of that many samples (data.heldout_count)."""
    issues, warnings = list(scan.issues), list(scan.warnings)
    small: list[str] = []
    counts: dict[int, list[str]] = {}
    for s in scan.samples:
        if not s.prompt:
            if s.prompt_file is not None:
                issues.append(f"{s.where}: its prompt file {s.prompt_file.name} is empty; write the edit instruction into it")
            elif scan.format == "local":
                issues.append(
                    f"{s.where}: no prompt (upstream silently drops such a sample); add {s.id}.txt with the edit instruction"
                )
            else:
                issues.append(f"{s.where}: empty prompt")
        if s.target is None:
            issues.append(f"{s.where}: no target image (the result of the edit)")
        if not s.controls:
            issues.append(f"{s.where}: no control image (the input of the edit)")
        counts.setdefault(len(s.controls), []).append(s.id)
        for role, part in [("target", s.target), *[(f"control {i}", c) for i, c in enumerate(s.controls)], ("mask", s.mask)]:
            _image_problems(s, part, role, target_size, issues, small, set_folder(scan))
        if s.prompt:
            words = len(s.prompt.split())
            if s.prompt.strip().lower().rstrip(".") in VAGUE:
                warnings.append(f"{s.where}: prompt {s.prompt!r} is too vague to teach an edit")
            elif words < PROMPT_WORDS[0] or words > PROMPT_WORDS[1]:
                warnings.append(f"{s.where}: prompt has {words} words (10–200 recommended)")
            if s.prompt.lower().startswith(CAPTION_START):
                warnings.append(
                    f"{s.where}: prompt reads like a caption of the result; write the edit instruction "
                    '("Add the character to the image")'
                )
    if len(counts) > 1:
        first = scan.samples[0]
        detail = "; ".join(
            f"{n} control(s): {', '.join(ids[:3])}{'…' if len(ids) > 3 else ''}" for n, ids in sorted(counts.items())
        )
        issues.append(
            f"samples have different numbers of control images ({detail}); upstream takes the count "
            f"from the first sample ({first.id}) and fails or ignores controls on the others"
        )
    if small:
        warnings.append(
            f"{len(small)} target image(s) smaller than target_size {list(target_size or [])} (height "
            f"{target_size[0] if target_size else 0} px, width {target_size[1] if target_size else 0} px) will be "
            f"upscaled: {', '.join(small[:5])}"
        )
    n = len(scan.samples)
    if n < MIN_SAMPLES:
        issues.append(f"{n} sample(s): at least {MIN_SAMPLES} are needed")
    elif n < SMOKE_ONLY:
        warnings.append(f"{n} samples: enough for a smoke test only (20–50 for a narrow task)")
    elif n < WARN_SAMPLES:
        warnings.append(f"{n} samples: fewer than {WARN_SAMPLES}; 50–100 generalise better")
    held: list[str] = []
    if heldout is not None:
        held, split_issues = split_problems(scan.samples, heldout)
        issues += split_issues
    elif n >= MIN_SAMPLES:
        warnings.append(
            "hold out at least 3 samples as a test set that training never sees (data.heldout_count: 3 in the "
            "config; check the split with --heldout 3)"
        )
    return Verdict(valid=not issues, format=scan.format, sample_count=n, issues=issues, warnings=warnings, heldout=held)


def validate_dataset(path: str | Path, target_size: tuple[int, int] | None = (384, 672), heldout: int | None = None) -> Verdict:
    return validate_scan(scan_dataset(path), target_size, heldout)
