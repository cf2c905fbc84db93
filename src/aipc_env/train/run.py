"""Plan a training run: the phases of each engine, the accelerate config, the built-in default config."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from aipc_env.core.fileio import atomic_write_text
from aipc_env.core.runfolder import ACCELERATE_CONFIG
from aipc_env.launch.accelerate import accelerate_config_text
from aipc_env.launch.hops import EnginePhase, HeldOutPhase, MonitorRun, TinyModel
from aipc_env.launch.plan import Phase
from aipc_env.launch.service import Chosen, RunRequest
from aipc_env.train.config import BUILTIN_SYNTHETIC, BUILTIN_TINY, TrainConfig

__all__ = [
    "ACCELERATE_CONFIG",
    "default_config",
    "engine_phases",
    "heldout_notice",
    "training_request",
    "write_default_config",
]


def engine_phases(
    cfg: TrainConfig, config_path: Path, python: str, accelerate_config: Path, *, build_tiny: bool = False
) -> list[Phase]:
    # --quiet: a failing phase has already said why in one line; without it accelerate adds a CalledProcessError
    # traceback (the runner still reports the phase's failure and its log)
    accel = [python, "-m", "accelerate.commands.launch", "--quiet", "--config_file", str(accelerate_config), "-m"]
    if cfg.engine == "qflux":
        assert cfg.qflux
        src = str(Path(cfg.qflux.clone) / "src")
        qcfg = cfg.qflux.config
        return [
            Phase(name="cache", argv=[python, "-m", "qflux.main", "--config", qcfg, "--cache"], cwd=src),
            Phase(name="fit", argv=[*accel, "qflux.main", "--config", qcfg], cwd=src),
        ]
    config = Path(config_path)
    tiny = [Phase(name="tiny-model", argv=TinyModel(out=Path(cfg.model.path)).argv(python))] if build_tiny and cfg.model else []
    phases = [
        *tiny,
        Phase(name="cache", argv=EnginePhase(phase="cache", config=config).argv(python)),
        Phase(name="fit", argv=EnginePhase(phase="fit", config=config).argv(python, *accel)),
    ]
    if cfg.data and (cfg.data.heldout or cfg.data.heldout_count):
        phases.append(Phase(name="judge", argv=HeldOutPhase(config=config).argv(python)))
    return phases


def heldout_notice(cfg: TrainConfig) -> str | None:
    """What a run that will not be judged says at its start, with the fix (None: it will be judged)."""
    if cfg.engine != "builtin" or not cfg.data or not cfg.model or cfg.model.path == BUILTIN_TINY:
        return None
    if cfg.data.heldout or cfg.data.heldout_count:
        return None
    return (
        "aipc-env: no held-out samples (data.heldout_count or data.heldout): this run will not say whether the LoRA "
        "learned the edit; fix: add `heldout_count: 3` under data: in the config (aipc-env dataset validate "
        f'"{cfg.data.datasets[0]}" --heldout 3 checks the split)'
    )


def training_request(cfg: TrainConfig, config_path: Path, *, build_tiny: bool = False, **options: Any) -> RunRequest:
    """The run service's request for a training run: the engine's phases (cache, fit under accelerate), the memory
    monitor beside them, the accelerate config, the config's device and env; a qflux config runs in its clone's
    qflux env. `options`: the request's env_flag, pair_flag, matrix_path, dry_run, check, stdout, announce."""
    run_dir = Path(cfg.output_dir)

    def background(chosen: Chosen) -> list[Phase]:
        return (
            [Phase(name="monitor", argv=MonitorRun(out=str(run_dir / "memory.csv"), interval=1.0).argv(chosen.python))]
            if cfg.monitor
            else []
        )

    return RunRequest(
        command="train",
        run_dir=run_dir,
        log_file=run_dir / "train.log",
        phases=lambda chosen: engine_phases(cfg, config_path, chosen.python, run_dir / ACCELERATE_CONFIG, build_tiny=build_tiny),
        background=background,
        device=cfg.device if cfg.device != "auto" else None,
        engine=cfg.engine,
        qflux_clone=Path(cfg.qflux.clone) if cfg.engine == "qflux" and cfg.qflux else None,
        extra_env=dict(cfg.env),
        files={ACCELERATE_CONFIG: accelerate_config_text(cfg.device)},
        resume=resume_hint(cfg, config_path),
        **options,
    )


def resume_hint(cfg: TrainConfig, config_path: Path) -> str:
    """How a stopped run goes on: the same command, from the last checkpoint where the config resumes (train.resume:
    auto); else it says to set that (a run without it starts over)."""
    from aipc_env.core.invocation import command

    again = command("train", *([] if cfg.model and cfg.model.path == BUILTIN_TINY else [_quoted(str(config_path))]))
    if cfg.engine == "builtin" and cfg.train.resume is None and not (cfg.model and cfg.model.path == BUILTIN_TINY):
        return f"{again} (set train.resume: auto in {config_path} first, or it starts over)"
    return again


def _quoted(text: str) -> str:
    return f'"{text}"' if any(c in text for c in " &()%!;'") else text


def default_config(run_dir: Path) -> dict[str, Any]:
    """The built-in default: the tiny trained model learns a synthetic edit, judged on held-out samples; no download,
    any device."""
    return {
        "schema_version": 1,
        "engine": "builtin",
        "model": {"path": BUILTIN_TINY, "quantize": "nf4"},
        "lora": {"rank": 8, "alpha": 8},
        "data": {
            "datasets": [BUILTIN_SYNTHETIC],
            "target_size": [64, 64],
            "batch_size": 2,
            "num_workers": 0,
            "synthetic_samples": 16,
            "heldout_samples": 16,
        },
        "train": {
            "max_train_steps": 200,
            "gradient_accumulation_steps": 1,
            "gradient_checkpointing": True,
            "learning_rate": 1e-2,
            "lr_scheduler": "constant",
            "seed": 7,
            "checkpointing_steps": 100,
            "checkpoints_total_limit": 2,
        },
        "optimizer": {"type": "adam8bit"},
        "output_dir": str(run_dir),
        "device": "auto",
    }


def write_default_config(run_dir: Path) -> Path:
    path = run_dir / "config.yaml"
    atomic_write_text(
        path,
        "# aipc-env built-in default run (tiny model, synthetic edit with held-out samples)\n"
        + yaml.safe_dump(default_config(run_dir), sort_keys=False, allow_unicode=True),
    )
    return path
