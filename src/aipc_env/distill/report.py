"""`distill report`: the gate table in the image21-turbo-trajectories project's format, the G3 evidence, the velocity
diagnostic (adapter on vs off) and the loss plot, from the verdicts the stages wrote. Only current verdicts count:
one whose inputs changed since (config, model, grid, LoRA) is stale, and one after a failed, missing or stale stage
was not reached; both are named, never shown as results. Torch-free."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal

from aipc_env.core.fileio import atomic_write_text
from aipc_env.core.formats import StrictModel, VersionedModel, write_model
from aipc_env.distill.config import BUILTIN_TINY21, BUILTIN_TINY21_TRAINED, DistillConfig
from aipc_env.distill.verdict import STAGE_TITLES, STAGES, Verdict, read_verdict

if TYPE_CHECKING:
    from aipc_env.distill.grid import Grid


class GateRow(StrictModel):
    gate: str
    result: str


class DistillReport(VersionedModel):
    """report.json beside report.md, and `aipc-env distill report --json`."""

    FORMAT: ClassVar[str] = "distillation report"
    schema_version: Literal[1] = 1
    status: str
    gates: list[GateRow]
    current: list[str]
    """The stages whose verdicts count."""
    ignored: dict[str, str]
    """stage -> why its verdict on disk does not count."""


__all__ = ["build_report", "current_verdicts", "gate_rows", "status_line"]


def current_verdicts(cfg: DistillConfig) -> tuple[dict[str, Verdict], dict[str, str]]:
    """(the verdicts that count, in stage order; stage -> why it does not count) for the stages with a verdict
    on disk that does not count."""
    from aipc_env.distill.inputs import all_current_inputs, stale_reasons

    now = all_current_inputs(cfg)
    shown: dict[str, Verdict] = {}
    ignored: dict[str, str] = {}
    blocker = None
    for stage in STAGES:
        v = read_verdict(cfg.out, stage)
        if v is None:
            blocker = blocker or f"{STAGE_TITLES[stage]} has not run"
            continue
        if blocker:
            ignored[stage] = f"not current: {blocker}"
            continue
        reasons = stale_reasons(v.inputs, now[stage] if now is not None else None)
        if reasons:
            ignored[stage] = "stale: " + ", ".join(reasons) + " since it ran"
            blocker = f"{STAGE_TITLES[stage]} is stale"
            continue
        shown[stage] = v
        if not v.passed:
            blocker = f"{STAGE_TITLES[stage]} failed"
    return shown, ignored


def _where(cfg: DistillConfig, v: Verdict) -> str:
    model = {BUILTIN_TINY21: "tiny-random", BUILTIN_TINY21_TRAINED: "tiny-trained"}.get(cfg.model, Path(cfg.model).name)
    return f"{model}, {v.dtype or '?'}, {v.device or '?'}"


def _g0(cfg: DistillConfig, v: Verdict) -> str:
    ok = sum(c.ok for c in v.checks)
    names = ", ".join(c.name for c in v.checks if c.ok)
    failed = [f"{c.name} [{c.error}]" for c in v.checks if not c.ok]
    return f"{v.status.upper()} {ok}/{len(v.checks)} — " + (names if not failed else "failed: " + "; ".join(failed))


def _g2(cfg: DistillConfig, v: Verdict) -> str:
    m = v.metrics
    parts = []
    for grid in ("teacher", "student"):
        if f"{grid}_max_abs_diff" in m:
            steps = len(m[f"{grid}_passed_sigmas"])
            parts.append(f"own {steps}-step Euler loop vs pipe(...) max diff {m[f'{grid}_max_abs_diff']:g}")
    for c in v.checks:
        if c.name.startswith("sigmas-verbatim") and c.ok:
            parts.append(f"{c.name.split('-')[-1]}: scheduler.sigmas == given grid + [0]")
        elif not c.ok:
            parts.append(f"{c.name} FAILED [{c.error}]")
    parts += m.get("behaviour", [])
    return f"{v.status.upper()} — " + "; ".join(parts)


def _g3(cfg: DistillConfig, v: Verdict) -> str:
    text = f"{v.status.upper()} — {v.metrics.get('comparison', '')}"
    if v.mode == "plumbing":
        text += " (plumbing: these numbers judge nothing about the student)"
    failed = [f"{c.name} [{c.error}]" for c in v.checks if not c.ok]
    return text + (("; failed: " + "; ".join(failed)) if failed else "")


def gate_rows(cfg: DistillConfig, verdicts: dict[str, Verdict]) -> list[tuple[str, str]]:
    rows = []
    if "g0" in verdicts:
        rows.append((f"G0 plumbing ({_where(cfg, verdicts['g0'])})", _g0(cfg, verdicts["g0"])))
    if "g2" in verdicts:
        rows.append((f"G2 sampler parity ({_where(cfg, verdicts['g2'])})", _g2(cfg, verdicts["g2"])))
    if "g3" in verdicts:
        v = verdicts["g3"]
        rows.append((f"{v.title} ({_where(cfg, v)})", _g3(cfg, v)))
    return rows


def status_line(verdicts: dict[str, Verdict]) -> str:
    for stage in STAGES:
        v = verdicts.get(stage)
        if v is not None and not v.passed:
            gate = stage.upper() if stage.startswith("g") else stage
            return f"paused at {gate}-FAIL" + (f" ({v.error.name})" if v.error else "")
    missing = [s for s in STAGES if s not in verdicts]
    if missing:
        return f"in progress: {', '.join(missing)} not run or not current"
    if verdicts["g3"].mode == "plumbing":
        return (
            "every stage ran without a failure; G3 ran as a plumbing check only (judging the student needs the "
            "real model and LPIPS)"
        )
    return "every gate passed"


def _grid(cfg: DistillConfig) -> Grid | None:
    """The run's grid as it resolves now, or None before the model is there."""
    from aipc_env.distill.grid import resolve_grid
    from aipc_env.distill.model_paths import model_path
    from aipc_env.errors import InputError

    try:
        return resolve_grid(cfg.teacher_sigmas, cfg.student_stride, model_path(cfg))
    except InputError:
        return None


def build_report(cfg: DistillConfig) -> tuple[str, Path]:
    verdicts, ignored = current_verdicts(cfg)
    grid = _grid(cfg)
    steps = (
        f"{len(grid.student)} steps matches its own {len(grid.teacher)}-step output"
        if grid
        else "the student grid matches its own teacher-grid output"
    )
    lines = [
        f"# Distillation report: {cfg.model}",
        "",
        f"Status: {status_line(verdicts)}.",
        "",
        f"Goal: a LoRA so that, with it on, the model at {steps} from the same noise.",
        "",
        "What was verified (gates)",
        "",
        "Gate\tResult",
    ]
    rows = gate_rows(cfg, verdicts)
    lines += [f"{a}\t{b}" for a, b in rows] or ["(no current gate verdict)"]
    if ignored:
        lines += ["", "Verdicts on disk that do not count"] + [f"- {STAGE_TITLES[s]}: {why}" for s, why in ignored.items()]
    grid_from = next((v.grid for v in verdicts.values() if v.grid), None)
    if grid_from:
        lines += ["", f"Grid: teacher {grid_from['teacher']} ({grid_from['source']}); student {grid_from['student']}"]
    tr, train, g3 = verdicts.get("trajectories"), verdicts.get("train"), verdicts.get("g3")
    if tr is not None:
        m = tr.metrics
        lines += [
            "",
            f"Trajectories: {m.get('prompts')} prompts x {m.get('steps')} teacher steps "
            f"({m.get('computed')} computed, {m.get('reused')} reused; encode {m.get('seconds_encode')} s, "
            f"sampling {m.get('seconds_sample')} s).",
        ]
    if g3 is not None and train is not None and "mean" in g3.metrics:
        metric = g3.metrics["metric"]
        label = metric.upper().replace("_", " ")
        m = train.metrics
        head = "G3 evidence" if g3.mode != "plumbing" else "G3 plumbing numbers (they judge nothing about the student)"
        lines += [
            "",
            f"{head} ({cfg.height}x{cfg.width}, {g3.device}, same noise, {g3.metrics['metric_note']})",
            "",
            f"Run\tPrompts\tSteps\tlr\tLoss weighting\tStudent {label}\tNaive {label}",
            f"{cfg.out.name}\t{m.get('trajectories')}\t{m.get('steps')}\t{cfg.student.learning_rate:g}\t"
            f"{m.get('loss_weighting')}\t{g3.metrics['mean']['student'][metric]:.4f}\t"
            f"{g3.metrics['mean']['naive'][metric]:.4f}",
        ]
    if train is not None:
        m = train.metrics
        if "velocity_mse_on" in m:
            lines += [
                "",
                "Velocity diagnostic (unweighted MSE of predicted velocity vs stored v* on training pairs, "
                f"adapter on vs off): {m['velocity_mse_on']:.4g} vs {m['velocity_mse_off']:.4g}"
                + (
                    " — the adapter improves velocities."
                    if m["velocity_mse_on"] < m["velocity_mse_off"]
                    else " — the adapter does not improve velocities."
                ),
            ]
        if m.get("diverged_at") is not None:
            lines += [
                "",
                f"Training diverged at step {m['diverged_at']}: {m.get('reason')}; last good checkpoint "
                f"{m.get('last_good_checkpoint')}.",
            ]
        if "objective_start" in m:
            lines += [
                "",
                f"Student objective on the training pairs: {m['objective_start']:.4g} -> "
                f"{m['objective_end']:.4g} over {m['steps']} steps ({m['loss_weighting']} weighting).",
            ]
        plot = cfg.out / "loss.png"
        if plot.is_file():
            lines += ["", f"Loss plot: {plot}"]
    if g3 is not None and g3.metrics.get("grid"):
        lines += ["", f"G3 grid: {g3.metrics['grid']}; manifest: {g3.metrics['manifest']}"]
    lines += [
        "",
        "Base model licence: Qwen Research Licence (non-commercial) — derivatives need the licence text, a "
        'change notice, and "Built with Qwen", and must not use "Qwen" as the main repo name.',
    ]
    text = "\n".join(lines) + "\n"
    path = cfg.out / "report.md"
    atomic_write_text(path, text)
    write_model(
        cfg.out / "report.json",
        DistillReport(
            status=status_line(verdicts),
            gates=[GateRow(gate=a, result=b) for a, b in rows],
            current=list(verdicts),
            ignored=ignored,
        ),
    )
    return text, path
