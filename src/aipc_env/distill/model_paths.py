"""Where a distillation's model folder is and its identity for trajectory keys: torch-free, read by the stage
inputs and the report; the folder is built and loaded by workers/distill/models.py."""

from __future__ import annotations

from pathlib import Path

from aipc_env.core.runfolder import TINY_MARK
from aipc_env.distill.config import BUILTIN_TINY21, BUILTIN_TINY21_TRAINED, DistillConfig


def trained_tiny_path() -> Path:
    """Where the trained tiny teacher is cached: once per user and version (training it takes about a minute)."""
    from aipc_env.distill.shapes import TRAINED21_VERSION
    from aipc_env.paths import cache_dir

    return cache_dir() / "models" / f"tiny-qwen-image-2.1-trained-v{TRAINED21_VERSION}"


def model_path(cfg: DistillConfig) -> Path:
    """Where the model folder is (the built-in tiny random one lives in the run folder, the trained one in the
    per-user cache); builds nothing."""
    if cfg.model == BUILTIN_TINY21:
        return cfg.out / "tiny-qwen-image-2.1"
    return trained_tiny_path() if cfg.model == BUILTIN_TINY21_TRAINED else Path(cfg.model)


def model_key(path: Path) -> str:
    """The model's identity for trajectory keys: its configs (the scheduler's included), not its location."""
    from aipc_env.train.resume import model_identity

    return model_identity(str(path), extra=("scheduler/scheduler_config.json", TINY_MARK))
