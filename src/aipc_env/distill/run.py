"""The distillation's runs as functions: stages (gates, trajectories, train, report) and export / publish, each in
the training env through the run service, each returning the run's result (exit code, the verdicts this run
wrote, launcher and log). `aipc-env distill` parses and calls them."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from aipc_env.distill.config import DistillConfig
from aipc_env.distill.verdict import DistillRunResult
from aipc_env.launch.plan import Phase

if TYPE_CHECKING:
    from aipc_env.launch.service import Chosen

__all__ = ["ExportRequest", "RunOptions", "run_export", "run_stages"]


@dataclass(frozen=True)
class RunOptions:
    """What every distill run takes from the command line."""

    env_flag: Path | None = None
    pair_flag: str | None = None
    matrix_path: Path | None = None
    dry_run: bool = False
    inject: list[str] = field(default_factory=list)
    stdout: TextIO | None = None
    """Where the launcher's own output goes (None: stdout)."""
    say: Callable[[str], None] | None = None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _run(
    cfg: DistillConfig,
    phases: Callable[[Chosen], list[Phase]],
    opts: RunOptions,
    *,
    stages: list[str],
    run_id: str,
    device: str | None = None,
    files: dict[str, str] | None = None,
) -> DistillRunResult:
    """One distill run through the run service; its result, without verdicts."""
    from aipc_env.launch.service import RunRequest, start_run

    outcome = start_run(
        RunRequest(
            command="distill",
            run_dir=cfg.out,
            log_file=cfg.out / "distill.log",
            phases=phases,
            env_flag=opts.env_flag,
            pair_flag=opts.pair_flag,
            matrix_path=opts.matrix_path,
            device=device,
            dry_run=opts.dry_run,
            stdout=opts.stdout,
            say=opts.say,
            files=files or {},
        )
    )
    return DistillRunResult(
        exit_code=int(outcome.exit_code),
        run_id=run_id,
        verdicts=[],
        stages=stages,
        dry_run=opts.dry_run,
        launcher=str(outcome.script),
        log=outcome.plan.log_file,
    )


def run_stages(cfg: DistillConfig, config_path: Path, stages: list[str], opts: RunOptions) -> DistillRunResult:
    """The stages in order (the runner stops at the first that fails); the verdicts are this run's only."""
    from aipc_env.core.runfolder import DISTILL_ACCELERATE_CONFIG as ACCELERATE_CONFIG
    from aipc_env.distill.phases import worker_phases
    from aipc_env.distill.verdict import read_verdict
    from aipc_env.launch.accelerate import accelerate_config_text

    run_id = uuid.uuid4().hex[:12]
    out = cfg.out

    def phases(chosen: Chosen) -> list[Phase]:
        return worker_phases(
            chosen.python, config_path, stages, run_id=run_id, inject=opts.inject, accelerate_config=out / ACCELERATE_CONFIG
        )

    files = (
        {ACCELERATE_CONFIG: accelerate_config_text(cfg.device, cfg.student.processes, _free_port())} if "train" in stages else {}
    )
    device = cfg.device if cfg.device != "auto" else None
    result = _run(cfg, phases, opts, stages=stages, run_id=run_id, device=device, files=files)
    if not opts.dry_run:
        result.verdicts = [v for s in stages if s != "report" and (v := read_verdict(out, s)) is not None and v.run_id == run_id]
    return result


@dataclass(frozen=True)
class ExportRequest:
    stage: str
    """export or publish."""
    format: str = "comfyui"
    out: Path | None = None
    repo: str | None = None
    folder: Path | None = None
    endpoint: str | None = None
    public: bool = False


def run_export(cfg: DistillConfig, config_path: Path, req: ExportRequest, opts: RunOptions) -> DistillRunResult:
    """Export or publish in the training env (tensors; huggingface_hub), through the launcher."""
    from aipc_env.launch.hops import DistillExport, DistillPublish, WorkerArgs

    config = Path(config_path)
    spec: WorkerArgs
    if req.stage == "export":
        spec = DistillExport(config=config, format=req.format, out=req.out, repo=req.repo)
    else:
        assert req.repo is not None  # argparse requires --repo for publish
        spec = DistillPublish(config=config, repo=req.repo, folder=req.folder, endpoint=req.endpoint, public=req.public)

    def phases(chosen: Chosen) -> list[Phase]:
        return [Phase(name=req.stage, argv=spec.argv(chosen.python))]

    return _run(cfg, phases, opts, stages=[req.stage], run_id="")
