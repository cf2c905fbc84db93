"""The verdict every distill stage writes (<output_dir>/verdicts/<stage>.json) and its human summary
(<stage>.txt, also printed). Torch-free: the CLI reads verdicts back."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

from aipc_env.fileio import atomic_write_text
from aipc_env.formats import StrictModel, VersionedModel, load_versioned, write_model

__all__ = [
    "STAGES",
    "STAGE_TITLES",
    "Check",
    "ErrorInfo",
    "G3Entry",
    "G3Manifest",
    "Stage",
    "Verdict",
    "read_verdict",
    "summary",
    "verdict_path",
    "write_verdict",
]

Stage = Literal["g0", "trajectories", "train", "g2", "g3"]
STAGES: tuple[str, ...] = ("g0", "trajectories", "train", "g2", "g3")
"""The order of `distill all` (the seed's: plumbing first, quality last)."""
STAGE_TITLES = {"g0": "G0 plumbing", "trajectories": "teacher trajectories", "train": "student training",
                "g2": "G2 sampler parity", "g3": "G3 quality"}


class Check(StrictModel):
    name: str
    ok: bool
    detail: str = ""
    error: str | None = None
    """The named error (a seed-003 lesson, e.g. sigmas-not-verbatim) when the check failed."""
    fix: str | None = None


class ErrorInfo(StrictModel):
    name: str
    message: str
    fix: str | None = None


class Verdict(VersionedModel):
    FORMAT: ClassVar[str] = "distillation verdict"
    FIX: ClassVar[str] = "run the stage again with `aipc-env distill`"
    schema_version: Literal[1] = 1
    stage: Stage
    status: Literal["pass", "fail"]
    mode: Literal["quality", "plumbing"] | None = None
    """G3 only: plumbing on tiny random weights (student vs naive is reported but cannot be meaningful)."""
    model: str
    device: str | None = None
    dtype: str | None = None
    when: str
    seconds: float
    checks: list[Check] = []
    metrics: dict[str, Any] = {}
    notes: list[str] = []
    error: ErrorInfo | None = None
    artifacts: dict[str, str] = {}
    injected: list[str] = []
    """Faults injected on purpose (tests of the gates)."""

    @property
    def passed(self) -> bool:
        return self.status == "pass"


def verdict_path(out: Path, stage: str) -> Path:
    return out / "verdicts" / f"{stage}.json"


def summary(v: Verdict) -> str:
    title = STAGE_TITLES[v.stage]
    ok = sum(c.ok for c in v.checks)
    head = f"{title}: {v.status.upper()}"
    if v.checks:
        head += f" {ok}/{len(v.checks)}"
    if v.mode == "plumbing":
        head += " (plumbing check: tiny random weights)"
    lines = [head + f"  [{v.device or '?'}, {v.dtype or '?'}, {v.seconds:.1f} s]"]
    for c in v.checks:
        mark = "ok  " if c.ok else "FAIL"
        lines.append(f"  {mark} {c.name}" + (f": {c.detail}" if c.detail else "")
                     + (f"  [{c.error}]" if c.error else ""))
        if not c.ok and c.fix:
            lines.append(f"       fix: {c.fix}")
    if v.error:
        lines.append(f"  error [{v.error.name}]: {v.error.message}")
        if v.error.fix:
            lines.append(f"       fix: {v.error.fix}")
    for n in v.notes:
        lines.append(f"  note: {n}")
    if v.injected:
        lines.append(f"  injected faults: {', '.join(v.injected)}")
    return "\n".join(lines)


def write_verdict(out: Path, v: Verdict) -> Path:
    path = verdict_path(out, v.stage)
    write_model(path, v)
    atomic_write_text(path.with_suffix(".txt"), summary(v) + "\n")
    return path


def read_verdict(out: Path, stage: str) -> Verdict | None:
    path = verdict_path(out, stage)
    return load_versioned(Verdict, path) if path.is_file() else None


class G3Entry(StrictModel):
    prompt: str
    seed: int
    files: dict[str, str]
    distance_to_teacher: dict[str, dict[str, float]]
    """naive/student -> metric -> value."""


class G3Manifest(VersionedModel):
    """<output_dir>/g3/manifest.json: what G3 compared, with which LoRA, and the numbers."""

    FORMAT: ClassVar[str] = "G3 manifest"
    schema_version: Literal[1] = 1
    mode: Literal["quality", "plumbing"]
    metric: Literal["lpips", "psnr"]
    metric_note: str
    lora: str
    lora_sha256: str
    teacher_sigmas: list[float]
    student_sigmas: list[float]
    height: int
    width: int
    entries: list[G3Entry]
    grid: str
    mean: dict[str, dict[str, float]]
