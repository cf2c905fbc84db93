"""What each distill stage's verdict depends on, as hashes: the config (the sections that shape the stage), the
model's identity, the grid, and the student LoRA. A verdict whose recorded inputs differ from the current ones is
stale: `report` and `--json` ignore it and say why. Torch-free: `report` runs in the CLI's env.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from aipc_env.core.runfolder import RunFolder, lora_file_at
from aipc_env.distill.config import DistillConfig
from aipc_env.distill.grid import Grid

__all__ = [
    "all_current_inputs",
    "config_hash",
    "current_inputs",
    "file_sha256",
    "grid_hash",
    "stage_inputs",
    "stale_reasons",
]

_SAMPLING = {"compute_dtype", "height", "width", "student_stride", "use_kv_cache", "seed", "prompts", "teacher"}
_READS: dict[str, set[str]] = {
    "g0": _SAMPLING | {"student"},
    "g2": _SAMPLING,
    "trajectories": _SAMPLING,
    "train": _SAMPLING | {"student"},
    "g3": _SAMPLING | {"student", "eval"},
}
"""The config sections each stage's result depends on. Left out everywhere: model (its identity is hashed on its
own, from its configs: a moved model folder stays the same model), output_dir (it moves with the folder),
device and threads (where and how fast, not what), teacher_sigmas (the grid is hashed on its own, as resolved)."""


def _digest(data: object) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]


def config_hash(cfg: DistillConfig, stage: str) -> str:
    """The config as the stage reads it (the sections in _READS)."""
    return _digest(cfg.model_dump(mode="json", include=_READS[stage]))


def grid_hash(grid: Grid) -> str:
    return _digest({"teacher": grid.teacher, "stride": grid.stride})


def file_sha256(path: Path) -> str | None:
    """The file's sha256 (the lock's hasher), or None when it is not there."""
    from aipc_env.lock.artifacts import file_sha256 as sha256_of

    return sha256_of(path) if path.is_file() else None


def stage_inputs(cfg: DistillConfig, stage: str, *, model_key: str, grid: Grid, lora: str | None = None) -> dict[str, str]:
    """The inputs a verdict records before its stage runs (train records the LoRA it wrote, g3 the LoRA it read;
    `lora`: its hash when already read)."""
    inputs = {"config": config_hash(cfg, stage), "model": model_key, "grid": grid_hash(grid)}
    if stage == "g3":
        inputs["lora"] = lora if lora is not None else file_sha256(RunFolder(cfg.out).lora_file) or "none"
        if cfg.eval.reference_lora:
            inputs["reference_lora"] = file_sha256(reference_lora_file(cfg.eval.reference_lora)) or "none"
    return inputs


def reference_lora_file(setting: str) -> Path:
    """eval.reference_lora as a file: a .safetensors file as given, a folder's pytorch_lora_weights.safetensors."""
    return lora_file_at(setting)


def current_inputs(cfg: DistillConfig, stage: str) -> dict[str, str] | None:
    """The inputs of one stage as they are now, or None when the model folder is not there."""
    every = all_current_inputs(cfg)
    return every[stage] if every is not None else None


def all_current_inputs(cfg: DistillConfig) -> dict[str, dict[str, str]] | None:
    """Every stage's inputs as they are now (the model, its grid and the LoRA read once), or None when the model
    folder is not there (nothing can be current)."""
    from aipc_env.distill.grid import resolve_grid
    from aipc_env.distill.model_paths import model_key, model_path
    from aipc_env.distill.verdict import STAGES

    path = model_path(cfg)
    if not (path / "model_index.json").is_file():
        return None
    grid = resolve_grid(cfg.teacher_sigmas, cfg.student_stride, path)
    key = model_key(path)
    lora = file_sha256(RunFolder(cfg.out).lora_file) or "none"
    every = {stage: stage_inputs(cfg, stage, model_key=key, grid=grid, lora=lora) for stage in STAGES}
    every["train"]["lora"] = lora  # the LoRA the train stage wrote
    return every


def stale_reasons(recorded: dict[str, str], current: dict[str, str] | None) -> list[str]:
    """Which inputs changed since the verdict was written (empty: it is current)."""
    if current is None:
        return ["the model folder is gone"]
    names = {"config": "the config", "model": "the model", "grid": "the sigma grid", "lora": "the student LoRA"}
    return [f"{names.get(k, k)} changed" for k in sorted(current) if recorded.get(k) != current[k]]
