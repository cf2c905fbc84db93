"""Resuming a built-in run: where its checkpoints live, their state file (CheckpointState), and whether a config
may resume from one. Torch-free: the train command checks a resume before any phase starts; the fit worker
(workers/train/checkpoint.py) saves and restores the tensors."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import ClassVar, Literal

from aipc_env.core.formats import VersionedModel, load_versioned
from aipc_env.errors import InputError
from aipc_env.train.config import BUILTIN_TINY, TrainConfig

STATE_FILE = "state.json"


class CheckpointState(VersionedModel):
    """<output_dir>/checkpoints/step-NNNNNNN/state.json."""

    FORMAT: ClassVar[str] = "checkpoint state"
    FIX: ClassVar[str] = "resume from another checkpoint, or start over without train.resume"
    schema_version: Literal[1] = 1
    step: int
    smoothed_loss: float | None
    lora_rank: int
    lora_alpha: float
    target_modules: list[str]
    model: str
    """Identity of the base model (hash of its configs; 'builtin:tiny' for the tiny default)."""
    fingerprint: str
    """Hash of every config value that shapes the training math (not step counts or checkpoint cadence)."""


def model_identity(model_dir: str, *, extra: tuple[str, ...] = ()) -> str:
    """Identify a model dir by its configs (not its path), so a moved model keeps its cache and checkpoints.
    `extra` adds more of its files (e.g. the scheduler config, where the grid depends on it)."""
    if model_dir.startswith("builtin:"):
        return model_dir
    h = hashlib.sha256()
    root = Path(model_dir)
    for rel in ("model_index.json", "transformer/config.json", "text_encoder/config.json", "vae/config.json", *extra):
        p = root / rel
        h.update(p.read_bytes() if p.is_file() else rel.encode())
    return h.hexdigest()[:16]


def training_fingerprint(cfg: TrainConfig) -> str:
    """What must not change between a checkpoint and its resume: the model, LoRA, data and optimizer setup."""
    assert cfg.data is not None
    data = cfg.data.model_dump(mode="json")
    shaping = {
        "lora": cfg.lora.model_dump(mode="json"),
        "data": {
            k: data[k]
            for k in ("datasets", "target_size", "batch_size", "caption_dropout_rate", "mask_weight", "synthetic_samples")
        },
        "train": cfg.train.model_dump(
            mode="json",
            include={"gradient_accumulation_steps", "learning_rate", "lr_scheduler", "warmup_steps", "seed", "max_grad_norm"},
        ),
        "optimizer": cfg.optimizer.model_dump(mode="json"),
        "compute_dtype": cfg.compute_dtype,
    }
    if data.get("control_pixels") is not None:  # only when set: older checkpoints keep their fingerprint
        shaping["control_pixels"] = data["control_pixels"]
    return hashlib.sha256(json.dumps(shaping, sort_keys=True).encode()).hexdigest()[:16]


def checkpoint_dirs(out: Path) -> list[Path]:
    root = out / "checkpoints"
    if not root.is_dir():
        return []
    dirs = [p for p in root.glob("step-*") if p.is_dir() and p.name[5:].isdigit()]
    return sorted(dirs, key=lambda p: int(p.name.split("-")[1]))


def find_resume(output_dir: str | Path, resume: str | None, *, key: str) -> Path | None:
    """The checkpoint a run resumes from: the newest one in output_dir for 'auto' (None if there is none yet), or
    the one named (which must be a checkpoint; `key` names the setting in the error)."""
    if not resume:
        return None
    if resume == "auto":
        dirs = checkpoint_dirs(Path(output_dir))
        return dirs[-1] if dirs else None
    path = Path(resume)
    if not (path / STATE_FILE).is_file():
        raise InputError(
            f"{path} is not an aipc-env checkpoint (no {STATE_FILE})",
            key=key,
            fix="point it at <output_dir>/checkpoints/step-NNNNNNN, or use 'auto'",
        )
    return path


def resume_dir(cfg: TrainConfig) -> Path | None:
    """find_resume for a training config."""
    return find_resume(cfg.output_dir, cfg.train.resume, key="train.resume")


def check_resume(cfg: TrainConfig, config_path: Path) -> CheckpointState | None:
    """The state to resume from, after proving the checkpoint fits this config (named error otherwise)."""
    if cfg.model is None or cfg.data is None:
        return None
    path = resume_dir(cfg)
    if path is None:
        return None
    state = load_versioned(CheckpointState, path / STATE_FILE)
    wrong = []
    if (state.lora_rank, state.lora_alpha, sorted(state.target_modules)) != (
        cfg.lora.rank,
        cfg.lora.alpha,
        sorted(cfg.lora.target_modules),
    ):
        wrong.append(
            f"LoRA rank/alpha/targets {state.lora_rank}/{state.lora_alpha:g}/{','.join(state.target_modules)}"
            f" vs {cfg.lora.rank}/{cfg.lora.alpha:g}/{','.join(cfg.lora.target_modules)} in the config"
        )
    if state.model != model_identity(cfg.model.path if cfg.model.path != BUILTIN_TINY else BUILTIN_TINY):
        wrong.append("another base model")
    if not wrong and state.fingerprint != training_fingerprint(cfg):
        wrong.append("other data, optimizer or schedule settings (the config changed since the checkpoint)")
    if wrong:
        raise InputError(
            f"cannot resume from {path}: it was trained with {'; '.join(wrong)}",
            path=config_path,
            key="train.resume",
            fix="restore the settings the checkpoint was made with, or remove "
            "train.resume (or use a new output_dir) to start over",
        )
    return state
