"""The verdict every distill stage writes (<output_dir>/verdicts/<stage>.json) and its human summary
(<stage>.txt, also printed). Torch-free: the CLI reads verdicts back."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal, TypeGuard, get_args

from pydantic import BaseModel, ConfigDict, model_validator

from aipc_env.core.fileio import atomic_write_text
from aipc_env.core.formats import StrictModel, VersionedModel, load_versioned, write_model

__all__ = [
    "INJECTABLE",
    "PLUMBING_TITLE",
    "STAGES",
    "STAGE_TITLES",
    "Check",
    "ErrorInfo",
    "G3Entry",
    "G3Manifest",
    "Stage",
    "Verdict",
    "is_stage",
    "read_verdict",
    "summary",
    "take_out_after",
    "verdict_path",
    "write_verdict",
]

Stage = Literal["g0", "g2", "trajectories", "train", "g3"]
STAGES: tuple[str, ...] = get_args(Stage)
"""The order of `distill all`, the recorded project's: G0 -> G2 -> trajectories -> train -> G3. A stage's verdict counts only
while every stage before it has a current passing one."""


def is_stage(name: str) -> TypeGuard[Stage]:
    """A stage whose verdict is written (not `report`)."""
    return name in STAGES


INJECTABLE: dict[str, Stage] = {
    "grad-embeddings": "g0",
    "rgba": "g0",
    "no-lora-metadata": "g0",
    "wrong-sigmas": "g2",
    "parity-ulp": "g2",
}
"""The faults `distill --inject` plants to prove a gate catches them, and the gate that must."""


STAGE_TITLES = {
    "g0": "G0 plumbing",
    "trajectories": "teacher trajectories",
    "train": "student training",
    "g2": "G2 sampler parity",
    "g3": "G3 quality gate",
}
PLUMBING_TITLE = "G3 plumbing check"


class Check(StrictModel):
    name: str
    ok: bool
    detail: str = ""
    error: str | None = None
    """The named error (a distillation lesson, e.g. sigmas-not-verbatim) when the check failed."""
    fix: str | None = None


class ErrorInfo(StrictModel):
    name: str
    message: str
    fix: str | None = None


class _Metrics(BaseModel):
    """The metrics of a stage that its summary and the report read, typed (a verdict file may carry more keys)."""

    model_config = ConfigDict(extra="allow")


class G2Metrics(_Metrics):
    teacher_max_abs_diff: float | None = None
    student_max_abs_diff: float | None = None
    teacher_passed_sigmas: list[float] | None = None
    student_passed_sigmas: list[float] | None = None
    behaviour: list[str] = []


class TrajectoryMetrics(_Metrics):
    prompts: int | None = None
    steps: int | None = None
    computed: int | None = None
    reused: int | None = None
    seconds_encode: float | None = None
    seconds_sample: float | None = None


class TrainMetrics(_Metrics):
    steps: int | None = None
    trajectories: int | None = None
    loss_weighting: str | None = None
    objective_start: float | None = None
    objective_end: float | None = None
    velocity_mse_on: float | None = None
    velocity_mse_off: float | None = None
    diverged_at: int | None = None
    reason: str | None = None
    last_good_checkpoint: str | None = None


class G3Metrics(_Metrics):
    metric: Literal["lpips", "latent_mse", "psnr"] | None = None
    metric_note: str = ""
    mean: dict[str, dict[str, float]] = {}
    comparison: str = ""
    reference_comparison: str | None = None
    grid: str | None = None
    manifest: str | None = None


STAGE_METRICS: dict[str, type[_Metrics]] = {
    "g2": G2Metrics,
    "trajectories": TrajectoryMetrics,
    "train": TrainMetrics,
    "g3": G3Metrics,
}
"""What each stage's metrics must hold to be read: a verdict whose numbers are strings is refused by name."""


class Verdict(VersionedModel):
    FORMAT: ClassVar[str] = "distillation verdict"
    FIX: ClassVar[str] = "run the stage again with `aipc-env distill`"
    schema_version: Literal[1] = 1
    stage: Stage
    status: Literal["pass", "fail", "ok"]
    """ok: a G3 plumbing check whose checks held (never called a pass: it judges nothing about the student)."""
    mode: Literal["quality", "plumbing"] | None = None
    """G3 only: plumbing without LPIPS or on tiny random weights (student vs naive is reported, not judged)."""
    run_id: str | None = None
    """The `aipc-env distill` invocation that wrote it (its --json lists only its own verdicts)."""
    inputs: dict[str, str] = {}
    """Hashes of what the stage read: config, model, grid, lora (aipc_env.distill.inputs)."""
    grid: dict[str, Any] | None = None
    """The teacher and student sigma grids the stage ran on, and where the teacher grid came from."""
    peak_memory: dict[str, Any] | None = None
    """{"kind": "device" | "process-rss", "bytes": N, "device": ...}: the stage's peak."""
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

    @model_validator(mode="after")
    def _typed_metrics(self) -> Verdict:
        model = STAGE_METRICS.get(self.stage)
        if model is not None:
            model.model_validate(self.metrics)
            if self.stage == "g3" and self.metrics.get("mean"):
                metric = self.metrics.get("metric")
                if any(metric not in self.metrics["mean"].get(k, {}) for k in ("student", "naive")):
                    raise ValueError(f"metrics.mean lacks {metric!r} for the student or naive")
        return self

    @property
    def passed(self) -> bool:
        """The stage did not fail (a pass, or a plumbing check that held)."""
        return self.status != "fail"

    @property
    def title(self) -> str:
        return PLUMBING_TITLE if self.mode == "plumbing" else STAGE_TITLES[self.stage]


def verdict_path(out: Path, stage: str) -> Path:
    return out / "verdicts" / f"{stage}.json"


def summary(v: Verdict) -> str:
    ok = sum(c.ok for c in v.checks)
    head = f"{v.title}: {v.status.upper()}"
    if v.checks:
        head += f" {ok}/{len(v.checks)}"
    if v.mode == "plumbing":
        head += " (artifacts and plumbing only; it judges nothing about the student)"
    lines = [head + f"  [{v.device or '?'}, {v.dtype or '?'}, {v.seconds:.1f} s]"]
    if v.grid:
        lines.append(f"  grid: teacher {_fmt(v.grid['teacher'])} ({v.grid['source']}), student {_fmt(v.grid['student'])}")
    if v.peak_memory:
        lines.append(f"  peak memory: {v.peak_memory['bytes'] / 2**20:.0f} MiB ({v.peak_memory['kind']})")
    for c in v.checks:
        mark = "ok  " if c.ok else "FAIL"
        lines.append(f"  {mark} {c.name}" + (f": {c.detail}" if c.detail else "") + (f"  [{c.error}]" if c.error else ""))
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


def _fmt(sigmas: list[float]) -> str:
    return "[" + ", ".join(f"{s:.4g}" for s in sigmas) + "]"


def write_verdict(out: Path, v: Verdict) -> Path:
    path = verdict_path(out, v.stage)
    write_model(path, v)
    atomic_write_text(path.with_suffix(".txt"), summary(v) + "\n")
    return path


def take_out_after(out: Path, stage: str) -> list[str]:
    """Remove the verdicts of the stages after `stage` (not reached in this run); returns the stages removed."""
    removed = []
    for later in STAGES[STAGES.index(stage) + 1 :]:
        path = verdict_path(out, later)
        for p in (path, path.with_suffix(".txt")):
            if p.exists():
                p.unlink()
                if p.suffix == ".json":
                    removed.append(later)
    return removed


def read_verdict(out: Path, stage: str) -> Verdict | None:
    path = verdict_path(out, stage)
    return load_versioned(Verdict, path) if path.is_file() else None


class DistillRunResult(VersionedModel):
    """`aipc-env distill STAGE --json`: the run's exit code and the verdicts it wrote (a dry run, export and publish
    write none); where its launcher and log are."""

    FORMAT: ClassVar[str] = "distillation run result"
    schema_version: Literal[1] = 1
    exit_code: int
    run_id: str
    verdicts: list[Verdict]
    stages: list[str] = []
    """What ran (gates and stages, or export / publish)."""
    dry_run: bool = False
    launcher: str | None = None
    log: str | None = None


class G3Entry(StrictModel):
    prompt: str
    seed: int
    files: dict[str, str]
    distance_to_teacher: dict[str, dict[str, float]]
    """naive/student (/reference) -> metric -> value."""


class G3Manifest(VersionedModel):
    """<output_dir>/g3/manifest.json: what G3 compared, with which LoRA, and the numbers."""

    FORMAT: ClassVar[str] = "G3 manifest"
    schema_version: Literal[1] = 1
    mode: Literal["quality", "plumbing"]
    metric: Literal["lpips", "latent_mse", "psnr"]
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
    reference_lora: str | None = None
    reference_lora_sha256: str | None = None
