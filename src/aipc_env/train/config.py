"""The training config (YAML, pydantic-validated). Unknown keys, wrong types and TODO placeholders are errors
naming the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from aipc_env.errors import InputError, validation_message
from aipc_env.fileio import read_yaml
from aipc_env.models import StrictModel

__all__ = ["TrainConfig", "load_config", "find_todos", "BUILTIN_TINY", "BUILTIN_SYNTHETIC", "CONFIG_VERSION"]

CONFIG_VERSION = 1
BUILTIN_TINY = "builtin:tiny"
"""A tiny randomly initialised Qwen-Image-Edit transformer built from a config: no download."""
BUILTIN_SYNTHETIC = "builtin:synthetic"
"""A small synthetic dataset of latents and prompt embeddings (for the built-in default run)."""


class ModelSection(StrictModel):
    path: str = Field(description="local diffusers Qwen-Image-Edit dir, or builtin:tiny")
    quantize: Literal["nf4"] = "nf4"
    transformer_path: str | None = Field(None, description="pre-quantized NF4 transformer dir (aipc-env quantize)")
    text_encoder_path: str | None = Field(None, description="pre-quantized NF4 text encoder dir")


class LoraSection(StrictModel):
    rank: int = Field(16, ge=1, le=256)
    alpha: float = Field(16, gt=0)
    target_modules: list[str] = ["to_q", "to_k", "to_v", "to_out.0"]
    init: Literal["gaussian", "default"] = "gaussian"


class DataSection(StrictModel):
    datasets: list[str] = Field(min_length=1)
    target_size: tuple[int, int] = (384, 672)
    batch_size: int = Field(1, ge=1)
    num_workers: int = Field(1, ge=0)
    synthetic_samples: int = Field(8, ge=1, description="only for builtin:synthetic")
    caption_dropout_rate: float = Field(0.0, ge=0, le=1, description="share of steps trained on the empty prompt")
    mask_weight: float | None = Field(None, gt=0, description="loss weight of masked tokens (1 = unmasked weight)")

    @field_validator("target_size")
    @classmethod
    def _mult16(cls, value: tuple[int, int]) -> tuple[int, int]:
        if any(v < 16 or v % 16 for v in value):
            raise ValueError("both sides must be multiples of 16 (the VAE's 8x times the 2x2 packing)")
        return value


class TrainSection(StrictModel):
    max_train_steps: int = Field(1000, ge=1)
    gradient_accumulation_steps: int = Field(2, ge=1)
    gradient_checkpointing: bool = True
    learning_rate: float = Field(1e-4, gt=0)
    lr_scheduler: Literal["constant", "constant_with_warmup", "cosine", "linear"] = "constant"
    warmup_steps: int = Field(0, ge=0)
    seed: int = 42
    checkpointing_steps: int = Field(250, ge=1)
    checkpoints_total_limit: int | None = Field(3, ge=1)
    mixed_precision: Literal["no"] = "no"
    max_grad_norm: float | None = Field(1.0, gt=0)
    resume: str | None = Field(None, description="'auto' (latest checkpoint in output_dir) or a checkpoint dir")


class OptimizerSection(StrictModel):
    type: Literal["adam8bit", "adamw"] = "adam8bit"
    weight_decay: float = Field(0.0, ge=0)
    betas: tuple[float, float] = (0.9, 0.999)


class QfluxSection(StrictModel):
    clone: str = Field(description="a qwen-image-finetune clone (its src/ holds the qflux package)")
    config: str = Field(description="the qflux training config (its own schema)")


class TrainConfig(StrictModel):
    config_version: Literal[1] = CONFIG_VERSION
    engine: Literal["builtin", "qflux"] = "builtin"
    model: ModelSection | None = None
    lora: LoraSection = LoraSection()
    data: DataSection | None = None
    train: TrainSection = TrainSection()
    optimizer: OptimizerSection = OptimizerSection()
    cache_dir: str | None = None
    output_dir: str
    device: str = Field("auto", pattern=r"^(auto|cpu|xpu(:\d+)?|cuda(:\d+)?)$")
    compute_dtype: Literal["auto", "bfloat16", "float16", "float32"] = "auto"
    env: dict[str, str] = {}
    monitor: bool = Field(False, description="sample system and device memory beside the run (memory.csv/.png)")
    qflux: QfluxSection | None = None

    @model_validator(mode="after")
    def _engine_sections(self) -> "TrainConfig":
        if self.engine == "qflux" and self.qflux is None:
            raise ValueError("engine qflux needs a 'qflux' section with 'clone' and 'config'")
        if self.engine == "builtin" and (self.model is None or self.data is None):
            raise ValueError("engine builtin needs 'model' and 'data' sections")
        return self

    def resolved_cache_dir(self) -> Path:
        return Path(self.cache_dir) if self.cache_dir else Path(self.output_dir) / "cache"


def find_todos(raw: Any, prefix: str = "") -> list[str]:
    """Keys whose value is a TODO placeholder left by `aipc-env recommend`."""
    found = []
    if isinstance(raw, dict):
        for k, v in raw.items():
            found += find_todos(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(raw, list):
        for i, v in enumerate(raw):
            found += find_todos(v, f"{prefix}[{i}]")
    elif isinstance(raw, str) and raw.strip().upper().startswith("TODO"):
        found.append(prefix)
    return found


def _check_paths(cfg: TrainConfig, path: Path) -> None:
    def must_exist(value: str | None, key: str, what: str) -> None:
        if value and not value.startswith("builtin:") and not Path(value).exists():
            raise InputError(f"{what} {value!r} does not exist", path=path, key=key, fix="fix the path")

    if cfg.model:
        must_exist(cfg.model.path, "model.path", "model directory")
        must_exist(cfg.model.transformer_path, "model.transformer_path", "NF4 transformer directory")
        must_exist(cfg.model.text_encoder_path, "model.text_encoder_path", "NF4 text encoder directory")
    if cfg.data:
        for i, ds in enumerate(cfg.data.datasets):
            must_exist(ds, f"data.datasets[{i}]", "dataset")
    if cfg.qflux:
        must_exist(cfg.qflux.clone, "qflux.clone", "qwen-image-finetune clone")
        must_exist(cfg.qflux.config, "qflux.config", "qflux config")
        if not (Path(cfg.qflux.clone) / "src" / "qflux").is_dir():
            raise InputError(f"{cfg.qflux.clone} has no src/qflux package", path=path, key="qflux.clone",
                             fix="point qflux.clone at a clone of tsiendragon/qwen-image-finetune")


def load_config(path: str | Path) -> TrainConfig:
    path = Path(path)
    raw = read_yaml(path, "training config")
    if not isinstance(raw, dict):
        raise InputError("expected a mapping of sections (model, data, train, ...)", path=path)
    todos = find_todos(raw)
    if todos:
        raise InputError(f"placeholder left to fill: {', '.join(todos)}", path=path, key=todos[0],
                         fix="replace each TODO with a real value (a path on this machine)")
    version = raw.get("config_version", CONFIG_VERSION)
    if version != CONFIG_VERSION:
        raise InputError(f"config_version {version!r} is not supported (this aipc-env reads {CONFIG_VERSION})",
                         path=path, key="config_version")
    try:
        cfg = TrainConfig.model_validate(raw)
    except ValidationError as exc:
        raise validation_message(exc, path) from None
    _check_paths(cfg, path)
    return cfg
