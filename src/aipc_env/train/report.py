"""What `aipc-env train --json` prints: the run's plan, where it ran, its exit code, the LoRA it wrote and, for the
built-in engine, the held-out verdict (the fit's fit_summary.json)."""

from __future__ import annotations

from typing import ClassVar, Literal

from aipc_env.core.formats import StrictModel, VersionedModel
from aipc_env.launch.plan import LaunchPlan
from aipc_env.train.verdict import LearningVerdict

__all__ = ["RunEnv", "TrainRunReport"]


class RunEnv(StrictModel):
    prefix: str
    python: str
    source: str
    """Why this env (flag, state, used, conda, tool, qflux, current)."""


class TrainRunReport(VersionedModel):
    FORMAT: ClassVar[str] = "train run report"
    schema_version: Literal[1] = 1
    config: str
    engine: Literal["builtin", "qflux"]
    builtin_default: bool
    """No config was given: the built-in default ran."""
    dry_run: bool
    exit_code: int
    """The training's own (the command exits with it)."""
    started: bool
    """The launcher ran far enough to open its log."""
    launcher: str
    log: str
    env: RunEnv
    pair: str | None
    pair_why: str
    plan: LaunchPlan
    lora: str | None = None
    """The LoRA file, when the run wrote one."""
    heldout: LearningVerdict | None = None
    """The built-in engine's held-out verdict (None: not judged, or a qflux run)."""
