"""The distillation's stages as launcher phases: runs of stages share one worker process; the train stage runs
under `accelerate launch` with the run's own accelerate config."""

from __future__ import annotations

from pathlib import Path

from aipc_env.launch.hops import DistillStages
from aipc_env.launch.plan import Phase

__all__ = ["worker_phases"]


def worker_phases(
    python: str, config_path: Path, stages: list[str], *, run_id: str, inject: list[str], accelerate_config: Path
) -> list[Phase]:
    """The stages as phases, in order (the runner stops at the first that fails): each run of stages other than
    train is one worker process; train is one phase of its own under `accelerate launch`."""

    def spec(names: list[str]) -> DistillStages:
        return DistillStages(config=Path(config_path), stages=",".join(names), run_id=run_id, inject=tuple(inject))

    phases: list[Phase] = []
    group: list[str] = []

    def flush() -> None:
        if group:
            phases.append(Phase(name=f"distill-{len(phases) + 1}", argv=spec(group).argv(python)))
            group.clear()

    for stage in stages:
        if stage != "train":
            group.append(stage)
            continue
        flush()
        phases.append(
            Phase(
                name=f"distill-{len(phases) + 1}-train",
                argv=spec(["train"]).argv(
                    python, python, "-m", "accelerate.commands.launch", "--quiet", "--config_file", str(accelerate_config), "-m"
                ),
            )
        )
    flush()
    return phases
