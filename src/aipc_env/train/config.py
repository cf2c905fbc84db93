"""The training config (YAML, pydantic-validated). Unknown keys, wrong types and TODO placeholders are errors
naming the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Final, Literal

from pydantic import Field, field_validator, model_validator

from aipc_env.core.fileio import read_yaml
from aipc_env.core.formats import InputModel, Seed, VersionedInput, validate_versioned
from aipc_env.dataset.split import HELDOUT_MAX, HELDOUT_MIN, HELDOUT_RULE, HeldOutRule
from aipc_env.errors import InputError
from aipc_env.train.areas import MIN_CONTROL_PIXELS, PIPELINE_CONTROL_PIXELS

__all__ = [
    "BUILTIN_SYNTHETIC",
    "BUILTIN_TINY",
    "CONFIG_VERSION",
    "HELDOUT_STEPS_MIN",
    "PATH_BASE_HELP",
    "TrainConfig",
    "absolute_path",
    "find_todos",
    "load_config",
    "refuse_todos",
    "resolve_path_keys",
]

CONFIG_VERSION: Final = 1
MAX_CONFIG_BYTES = 1 << 20
MAX_ENV_VALUE = 8192
"""Bytes per `env:` value: environments have limits (32767 characters per variable on Windows, a few MiB in all on
Linux, where exceeding them fails only when the launcher starts the interpreter)."""
PATH_BASE_HELP = (
    "relative paths in a config (model, datasets, output_dir, cache_dir, resume, qflux) are resolved "
    "against the folder of the config file"
)
BUILTIN_TINY = "builtin:tiny"
"""A tiny Qwen-Image-Edit transformer built from a config and trained once on this machine: no download
(aipc_env.workers.train.tinyedit)."""
HELDOUT_STEPS_MIN = 2
"""The fewest sampling steps of the judge phase: FlowMatchEulerDiscreteScheduler with shift_terminal (Qwen-Image's
scheduler config) turns the one-step schedule [1.0] into NaN (tests/test_heldout_default.py samples both)."""
BUILTIN_SYNTHETIC = "builtin:synthetic"
"""A small synthetic edit of latents and prompt embeddings, with held-out samples (for the built-in default run)."""


class ModelSection(InputModel):
    path: str = Field(description="local diffusers Qwen-Image-Edit dir, or builtin:tiny")
    quantize: Literal["nf4"] = "nf4"
    transformer_path: str | None = Field(None, description="pre-quantized NF4 transformer dir (aipc-env quantize)")
    text_encoder_path: str | None = Field(None, description="pre-quantized NF4 text encoder dir")


class LoraSection(InputModel):
    rank: int = Field(16, ge=1, le=256)
    alpha: float = Field(16, gt=0)
    target_modules: list[str] = ["to_q", "to_k", "to_v", "to_out.0"]
    init: Literal["gaussian", "default"] = "gaussian"


class DataSection(InputModel):
    datasets: list[str] = Field(min_length=1)
    target_size: tuple[int, int] = (384, 672)
    # The VAE controls' pixel area (None: the pipeline's own, 1024 * 1024); smaller is a memory choice that costs
    # fidelity. Added here so `recommend` can write it; the conditioning-parity work defines the same field.
    batch_size: int = Field(1, ge=1)
    num_workers: int = Field(1, ge=0)
    synthetic_samples: int = Field(16, ge=1, le=100_000, description="only for builtin:synthetic: training samples")
    heldout_samples: int = Field(
        4,
        ge=2,
        le=64,
        description="only for builtin:synthetic: held-out samples of the "
        "edit (never trained on) that judge whether the LoRA learned it",
    )
    heldout: str | None = Field(
        None,
        description="held-out samples (any dataset format, each with a control, a "
        "prompt and a target) the fit never sees: after the fit, the judge phase generates "
        "them with the base model and with the LoRA, from the same noise, and says whether "
        "the LoRA learned the edit",
    )
    heldout_count: int | None = Field(
        None,
        ge=HELDOUT_MIN,
        le=HELDOUT_MAX,
        description="hold out this many samples of data.datasets (chosen by data.heldout_rule from their ids): "
        "the cache and the fit skip them, and the judge phase generates them after the fit (at least 3: "
        "runbook §3)",
    )
    heldout_rule: HeldOutRule = Field(
        HELDOUT_RULE, description="how data.heldout_count picks its samples (aipc_env.dataset.split)"
    )
    heldout_steps: int = Field(
        20,
        ge=HELDOUT_STEPS_MIN,
        le=200,
        description="sampling steps of the judge phase (at least 2: with one step, Qwen-Image's scheduler "
        "stretches its sigmas to the terminal value by dividing by zero and samples a NaN timestep)",
    )
    heldout_max_samples: int = Field(4, ge=1, le=64, description="the judge phase uses at most this many samples")
    caption_dropout_rate: float = Field(0.0, ge=0, le=1, description="share of steps trained on the empty prompt")
    mask_weight: float | None = Field(None, gt=0, description="loss weight of masked tokens (1 = unmasked weight)")
    control_pixels: int | None = Field(
        None,
        ge=MIN_CONTROL_PIXELS,
        le=PIPELINE_CONTROL_PIXELS,
        description="pixel area each control image is resized to (aspect kept, sides rounded to 32) for the VAE, as "
        "the diffusers pipeline does at inference; unset = the pipeline's own 1048576 (1024x1024). Smaller saves "
        "memory but trains controls at a scale inference does not use (a warning says so); the held-out check, "
        "the judge and compare then condition at the same area. Targets are trained in aspect-ratio buckets of "
        "about target_size's area.",
    )

    @field_validator("target_size")
    @classmethod
    def _mult16(cls, value: tuple[int, int]) -> tuple[int, int]:
        if any(v < 16 or v % 16 for v in value):
            raise ValueError("both sides must be multiples of 16 (the VAE's 8x times the 2x2 packing)")
        return value

    @model_validator(mode="after")
    def _one_heldout(self) -> DataSection:
        if self.heldout is not None and self.heldout_count is not None:
            raise ValueError("data.heldout (a folder) and data.heldout_count (samples set aside) exclude each other: keep one")
        return self


class TrainSection(InputModel):
    max_train_steps: int = Field(1000, ge=1)
    gradient_accumulation_steps: int = Field(2, ge=1)
    gradient_checkpointing: bool = True
    learning_rate: float = Field(1e-4, gt=0)
    lr_scheduler: Literal["constant", "constant_with_warmup", "cosine", "linear"] = "constant"
    warmup_steps: int = Field(0, ge=0)
    seed: Seed = 42
    checkpointing_steps: int = Field(250, ge=1)
    checkpoints_total_limit: int | None = Field(3, ge=1)
    mixed_precision: Literal["no"] = "no"
    max_grad_norm: float | None = Field(1.0, gt=0)
    resume: str | None = Field(None, description="'auto' (latest checkpoint in output_dir) or a checkpoint dir")


class OptimizerSection(InputModel):
    type: Literal["adam8bit", "adamw"] = "adam8bit"
    weight_decay: float = Field(0.0, ge=0)
    betas: tuple[float, float] = (0.9, 0.999)


class QfluxSection(InputModel):
    clone: str = Field(description="a qwen-image-finetune clone (its src/ holds the qflux package)")
    config: str = Field(description="the qflux training config (its own schema)")


class TrainConfig(VersionedInput):
    """A training config (YAML). Paths are absolute after `load_config` (relative ones are resolved against the
    config file's folder)."""

    FORMAT: ClassVar[str] = "training config"
    LEGACY_KEYS: ClassVar[dict[str, str]] = {"config_version": "schema_version"}
    FIX: ClassVar[str] = "`aipc-env recommend` writes a complete config for this machine"
    schema_version: Literal[1] = CONFIG_VERSION
    engine: Literal["builtin", "qflux"] = "builtin"
    model: ModelSection | None = None
    lora: LoraSection = LoraSection()
    data: DataSection | None = None
    train: TrainSection = TrainSection()
    optimizer: OptimizerSection = OptimizerSection()
    cache_dir: str | None = None
    output_dir: str
    device: str = Field(default="auto", pattern=r"^(auto|cpu|xpu(:\d+)?|cuda(:\d+)?)$")
    compute_dtype: Literal["auto", "bfloat16", "float16", "float32"] = "auto"
    env: dict[str, str] = {}
    monitor: bool = Field(default=False, description="sample system and device memory beside the run (memory.csv/.png)")
    qflux: QfluxSection | None = None

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        import re

        for key, val in value.items():
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
                raise ValueError(f"{key!r} is not an environment variable name (letters, digits, _; not first a digit)")
            if any(c in val for c in "\r\n\x00") or val.startswith("="):
                raise ValueError(f"the value of {key} cannot hold a line break or start with '='")
            if len(val.encode("utf-8")) > MAX_ENV_VALUE:
                raise ValueError(f"the value of {key} is {len(val.encode('utf-8'))} bytes; at most {MAX_ENV_VALUE}")
        return value

    @model_validator(mode="after")
    def _engine_sections(self) -> TrainConfig:
        if self.engine == "qflux" and self.qflux is None:
            raise ValueError("engine qflux needs a 'qflux' section with 'clone' and 'config'")
        if self.engine == "builtin" and (self.model is None or self.data is None):
            raise ValueError("engine builtin needs 'model' and 'data' sections")
        return self

    @model_validator(mode="after")
    def _builtin_control(self) -> TrainConfig:
        if self.model and self.model.path == BUILTIN_TINY and self.data and self.data.control_pixels is not None:
            raise ValueError(
                "data.control_pixels does not apply to builtin:tiny: its synthetic controls are made at the "
                "target's size (leave control_pixels unset)"
            )
        return self

    def control_area(self) -> int:
        """The pixel area every control is conditioned at, in training and in every sampler that judges the LoRA:
        data.control_pixels, else the pipeline's own (1024x1024); builtin:tiny's synthetic controls are made at
        the target's size, so its area is target_size's."""
        if self.model and self.model.path == BUILTIN_TINY and self.data:
            return self.data.target_size[0] * self.data.target_size[1]
        if self.data and self.data.control_pixels is not None:
            return self.data.control_pixels
        return PIPELINE_CONTROL_PIXELS

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


def refuse_todos(raw: Any, path: str | Path) -> None:
    """A config with a TODO placeholder left is an input error naming the first such key."""
    todos = find_todos(raw)
    if todos:
        raise InputError(
            f"placeholder left to fill: {', '.join(todos)}",
            path=path,
            key=todos[0],
            fix="replace each TODO with a real value (a path on this machine)",
        )


_PATH_KEYS = (
    "model.path",
    "model.transformer_path",
    "model.text_encoder_path",
    "cache_dir",
    "output_dir",
    "train.resume",
    "qflux.clone",
    "qflux.config",
    "data.heldout",
)


def absolute_path(value: str | None, base: Path) -> str | None:
    """A config path made absolute against `base` (builtin:* values, 'auto' and None are kept)."""
    if value is None or value.startswith("builtin:") or value == "auto":
        return value
    p = Path(value).expanduser()
    return str(p if p.is_absolute() else (base / p).absolute())


def resolve_path_keys(data: dict[str, Any], keys: tuple[str, ...], base: Path) -> None:
    """Make the dotted `keys` ("section.name" or "name") of a dumped config absolute against `base`, in place."""
    for key in keys:
        section, _, name = key.rpartition(".")
        holder = data.get(section) if section else data
        if isinstance(holder, dict) and name in holder:
            holder[name] = absolute_path(holder[name], base)


def _resolve_paths(cfg: TrainConfig, base: Path) -> TrainConfig:
    """Every path of the config, made absolute against `base` (the config file's folder); a path that is not UTF-8
    text (a folder name of other bytes) is refused naming its key: the launcher could not pass it on."""
    from aipc_env.core.fileio import check_text_path

    data = cfg.model_dump()
    resolve_path_keys(data, _PATH_KEYS, base)
    if data.get("data"):
        data["data"]["datasets"] = [absolute_path(d, base) for d in data["data"]["datasets"]]
    for key in _PATH_KEYS:
        section, _, name = key.rpartition(".")
        holder = data.get(section) if section else data
        if isinstance(holder, dict) and isinstance(holder.get(name), str):
            check_text_path(holder[name], "the path", key=key)
    for i, dataset in enumerate((data.get("data") or {}).get("datasets") or []):
        if isinstance(dataset, str):
            check_text_path(dataset, "the dataset", key=f"data.datasets[{i}]")
    return TrainConfig.model_validate(data)


def load_config(path: str | Path) -> TrainConfig:
    """Read and validate a config: UTF-8 (with or without BOM) or UTF-16 with BOM; unknown keys, wrong types and
    TODO placeholders are errors naming the key; relative paths become absolute against the config's folder."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError:
        size = 0  # read_yaml names the problem
    if size > MAX_CONFIG_BYTES:
        raise InputError(
            f"the config is {size / 2**20:.1f} MiB; a training config is a few KiB (limit {MAX_CONFIG_BYTES // 2**20} MiB)",
            path=path,
            fix="pass the training config, not a dataset or a model file",
        )
    raw = read_yaml(path, "training config")
    if raw is None:
        raise InputError(
            "the config is empty",
            path=path,
            fix="`aipc-env recommend > FILE` leaves FILE empty when it writes no config (it says why on "
            "the terminal: a machine below 32 GB, for one); run it again with --out FILE, or try the "
            "whole path first: aipc-env recommend --smoke --out smoke.yaml",
        )
    if not isinstance(raw, dict):
        raise InputError("expected a mapping of sections (model, data, train, ...)", path=path, fix=TrainConfig.FIX)
    refuse_todos(raw, path)
    if "schema_version" not in raw and "config_version" not in raw:
        raw = {"schema_version": CONFIG_VERSION, **raw}
    if isinstance(raw.get("output_dir"), str) and not raw["output_dir"].strip():
        raise InputError(
            "output_dir is empty",
            path=path,
            key="output_dir",
            fix="name a folder for the run (checkpoints, the LoRA and logs go there)",
        )
    cfg = validate_versioned(TrainConfig, raw, path)
    return _resolve_paths(cfg, path.absolute().parent)
