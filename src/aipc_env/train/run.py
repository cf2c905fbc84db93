"""Plan a training run: the phases of each engine, the accelerate config, the built-in default config."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from aipc_env.core.fileio import atomic_write_text
from aipc_env.core.runfolder import ACCELERATE_CONFIG
from aipc_env.launch.hops import EnginePhase, JudgeHeldOut
from aipc_env.launch.plan import Phase
from aipc_env.launch.service import Chosen, RunRequest
from aipc_env.train.config import BUILTIN_SYNTHETIC, BUILTIN_TINY, TrainConfig

__all__ = [
    "ACCELERATE_CONFIG",
    "accelerate_config_text",
    "default_config",
    "engine_phases",
    "heldout_notice",
    "training_request",
    "write_default_config",
]


def accelerate_config_text(device: str, processes: int = 1, port: int | None = None) -> str:
    """No accelerate-side mixed precision (the engines autocast themselves), no dynamo. One process: no distributed
    backend. More than one: torchrun's launcher (accelerate's MULTI_GPU type starts it; on the CPU the worker's
    Accelerator(cpu=True) then joins a gloo group), MULTI_XPU on XPUs. 'no' and 'NO' are quoted: unquoted YAML
    turns them into booleans."""
    if processes == 1:
        head, kind = "# written by aipc-env: single device, no distributed backend\n", "'NO'"
    else:
        head = f"# written by aipc-env: {int(processes)} processes\n"
        kind = "MULTI_XPU" if device.startswith("xpu") else "MULTI_GPU"
    return (
        head + "compute_environment: LOCAL_MACHINE\n"
        "debug: false\n"
        f"distributed_type: {kind}\n"
        "mixed_precision: 'no'\n"
        "dynamo_backend: 'no'\n"
        "num_machines: 1\n"
        f"num_processes: {int(processes)}\n"
        "machine_rank: 0\n" + (f"main_process_port: {int(port)}\n" if port is not None else "") + "main_training_function: main\n"
        f"use_cpu: {'true' if device == 'cpu' and processes == 1 else 'false'}\n"
    )


def engine_phases(cfg: TrainConfig, config_path: Path, python: str, accelerate_config: Path) -> list[Phase]:
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
    phases = [
        Phase(name="cache", argv=EnginePhase(phase="cache", config=config).argv(python)),
        Phase(name="fit", argv=EnginePhase(phase="fit", config=config).argv(python, *accel)),
    ]
    if cfg.data and (cfg.data.heldout or cfg.data.heldout_count):
        phases.append(Phase(name="judge", argv=JudgeHeldOut(config=config).argv(python)))
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


def training_request(cfg: TrainConfig, config_path: Path, **options: Any) -> RunRequest:
    """The run service's request for a training run: the engine's phases (cache, fit under accelerate), the memory
    monitor beside them, the accelerate config, the config's device and env; a qflux config runs in its clone's
    qflux env. `options`: the request's env_flag, pair_flag, matrix_path, dry_run, check, stdout, announce."""
    run_dir = Path(cfg.output_dir)

    def background(chosen: Chosen) -> list[Phase]:
        return (
            [
                Phase(
                    name="monitor",
                    argv=[chosen.python, "-m", "aipc_env.tools.monitor", "--out", str(run_dir / "memory.csv"), "--interval", "1"],
                )
            ]
            if cfg.monitor
            else []
        )

    return RunRequest(
        command="train",
        run_dir=run_dir,
        log_file=run_dir / "train.log",
        phases=lambda chosen: engine_phases(cfg, config_path, chosen.python, run_dir / ACCELERATE_CONFIG),
        background=background,
        device=cfg.device if cfg.device != "auto" else None,
        engine=cfg.engine,
        qflux_clone=Path(cfg.qflux.clone) if cfg.engine == "qflux" and cfg.qflux else None,
        extra_env=dict(cfg.env),
        files={ACCELERATE_CONFIG: accelerate_config_text(cfg.device)},
        **options,
    )


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
