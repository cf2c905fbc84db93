"""Plan a training run: the phases of each engine, the accelerate config, the built-in default config."""

from __future__ import annotations

from pathlib import Path

import yaml

from aipc_env.facts.model import MsvcInfo, OneApiInfo
from aipc_env.fileio import atomic_write_text
from aipc_env.launch.plan import LaunchPlan, Phase, plan_run
from aipc_env.matrix import Pair
from aipc_env.paths import package_root
from aipc_env.platforms import Platform
from aipc_env.train.config import BUILTIN_SYNTHETIC, BUILTIN_TINY, TrainConfig

__all__ = ["accelerate_config_text", "engine_phases", "plan_training", "default_config", "write_default_config",
           "ACCELERATE_CONFIG"]

ACCELERATE_CONFIG = "accelerate_config.yaml"


def accelerate_config_text(device: str) -> str:
    """Single process, no distributed backend, no accelerate-side mixed precision (the engines autocast
    themselves), no dynamo. 'no' and 'NO' are quoted: unquoted YAML turns them into booleans."""
    return (
        "# written by aipc-env: single device, no distributed backend\n"
        "compute_environment: LOCAL_MACHINE\n"
        "debug: false\n"
        "distributed_type: 'NO'\n"
        "mixed_precision: 'no'\n"
        "dynamo_backend: 'no'\n"
        "num_machines: 1\n"
        "num_processes: 1\n"
        "machine_rank: 0\n"
        "main_training_function: main\n"
        f"use_cpu: {'true' if device == 'cpu' else 'false'}\n"
    )


def engine_phases(cfg: TrainConfig, config_path: Path, python: str, accelerate_config: Path) -> list[Phase]:
    # --quiet: a failing phase has already said why in one line; without it accelerate adds a CalledProcessError
    # traceback (the runner still reports the phase's failure and its log)
    accel = [python, "-m", "accelerate.commands.launch", "--quiet", "--config_file", str(accelerate_config), "-m"]
    if cfg.engine == "qflux":
        assert cfg.qflux
        src = str(Path(cfg.qflux.clone) / "src")
        qcfg = cfg.qflux.config
        return [Phase(name="cache", argv=[python, "-m", "qflux.main", "--config", qcfg, "--cache"], cwd=src),
                Phase(name="fit", argv=[*accel, "qflux.main", "--config", qcfg], cwd=src)]
    cfg_arg = str(Path(config_path).absolute())
    return [Phase(name="cache", argv=[python, "-m", "aipc_env.train.engine", "--phase", "cache", "--config", cfg_arg]),
            Phase(name="fit", argv=[*accel, "aipc_env.train.engine", "--phase", "fit", "--config", cfg_arg])]


def plan_training(cfg: TrainConfig, config_path: Path, *, python: str, pair: Pair | None, oneapi: OneApiInfo,
                  msvc: MsvcInfo | None, platform: Platform) -> LaunchPlan:
    run_dir = Path(cfg.output_dir)
    background = [Phase(name="monitor", argv=[python, "-m", "aipc_env.tools.monitor", "--out",
                                              str(run_dir / "memory.csv"), "--interval", "1"])] if cfg.monitor else []
    return plan_run(platform=platform, run_dir=str(run_dir), python=python, pair=pair, oneapi=oneapi, msvc=msvc,
                    phases=engine_phases(cfg, config_path, python, run_dir / ACCELERATE_CONFIG),
                    log_file=str(run_dir / "train.log"), pythonpath=[str(package_root())],
                    device=cfg.device if cfg.device != "auto" else None, engine=cfg.engine, extra_env=cfg.env,
                    background=background, files={ACCELERATE_CONFIG: accelerate_config_text(cfg.device)})


def default_config(run_dir: Path) -> dict:
    """The built-in default: a tiny random model on a small synthetic dataset, no download, any device."""
    return {
        "schema_version": 1,
        "engine": "builtin",
        "model": {"path": BUILTIN_TINY, "quantize": "nf4"},
        "lora": {"rank": 8, "alpha": 8},
        "data": {"datasets": [BUILTIN_SYNTHETIC], "target_size": [64, 64], "batch_size": 2, "num_workers": 0,
                 "synthetic_samples": 8},
        "train": {"max_train_steps": 40, "gradient_accumulation_steps": 1, "gradient_checkpointing": True,
                  "learning_rate": 2e-2, "lr_scheduler": "constant", "seed": 7, "checkpointing_steps": 20,
                  "checkpoints_total_limit": 2},
        "optimizer": {"type": "adam8bit"},
        "output_dir": str(run_dir),
        "device": "auto",
    }


def write_default_config(run_dir: Path) -> Path:
    path = run_dir / "config.yaml"
    atomic_write_text(path, "# aipc-env built-in default run (tiny random model, synthetic data)\n"
                      + yaml.safe_dump(default_config(run_dir), sort_keys=False, allow_unicode=True))
    return path
