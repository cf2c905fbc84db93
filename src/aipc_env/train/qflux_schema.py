"""The rules of qwen-image-finetune's config schema (qflux.data.config, main@460ba1a), mirrored as strict models,
so configs aipc-env writes for the qflux engine are checked here before qflux rejects them on the AI PC.
Only what the facts about that schema state is mirrored; qflux itself stays the authority."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["QfluxConfig", "CACHE_KEYS"]

CACHE_KEYS = {"prompt_embeds", "prompt_embeds_mask", "empty_prompt_embeds", "empty_prompt_embeds_mask"}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Lora(_Strict):
    r: int = 16
    lora_alpha: int = 16
    init_lora_weights: Literal["gaussian", "normal", "zero"] = "gaussian"
    target_modules: list[str] = ["to_k", "to_q", "to_v", "to_out.0"]
    pretrained_weight: str | None = None
    adapter_name: str | None = None


class _Model(_Strict):
    pretrained_model_name_or_path: str = "Qwen/Qwen-Image-Edit"
    pretrained_embeddings: dict | None = None
    lora: _Lora = _Lora()
    quantize: bool = False
    use_vlm_prompt_enhancer: bool = False


class _Processor(_Strict):
    process_type: Literal["resize", "center_padding", "right_padding", "center_crop", "fixed_pixels"] = "resize"
    target_size: list[int] | None = None
    controls_size: list[list[int]] | None = None
    target_pixels: int | None = None
    controls_pixels: int | None = None
    multi_resolutions: list | None = None
    max_aspect_ratio: float | None = None


class _InitArgs(_Strict):
    dataset_path: str | list
    caption_dropout_rate: float = 0.0
    prompt_image_dropout_rate: float = 0.0
    cache_dir: str | None = None
    use_cache: bool = True
    use_edit_mask: bool = False
    selected_control_indexes: list[int] | None = None
    prompt_empty_drop_keys: list[str] | None = None
    processor: _Processor = _Processor()

    @field_validator("prompt_empty_drop_keys")
    @classmethod
    def _keys(cls, value: list[str] | None) -> list[str] | None:
        if value and not set(value) <= CACHE_KEYS:
            raise ValueError(f"unknown cache keys {sorted(set(value) - CACHE_KEYS)} (KeyError during training)")
        return value


class _Data(_Strict):
    class_path: str
    init_args: _InitArgs
    batch_size: int = Field(gt=0)
    num_workers: int = Field(gt=0)
    shuffle: bool = True


class _Devices(_Strict):
    vae: str | None = None
    vae_encoder: str | None = None
    text_encoder: str | None = None
    text_encoder_2: str | None = None
    dit: str | None = None
    prompt_enhancer: str | None = None

    @field_validator("*")
    @classmethod
    def _no_cuda(cls, value: str | None) -> str | None:
        if value is not None and value.startswith("cuda"):
            raise ValueError("a cuda device fails validation where CUDA is absent")
        return value


class _Cache(_Strict):
    devices: _Devices = _Devices()
    use_cache: bool = True
    cache_dir: str | None = None
    prompt_empty_drop_keys: list[str] = ["prompt_embed", "prompt_embeds_mask"]

    @field_validator("prompt_empty_drop_keys")
    @classmethod
    def _keys(cls, value: list[str]) -> list[str]:
        if not set(value) <= CACHE_KEYS:
            raise ValueError(f"unknown cache keys {sorted(set(value) - CACHE_KEYS)} (KeyError during training)")
        return value


class _Train(_Strict):
    gradient_accumulation_steps: int = Field(4, gt=0)
    max_train_steps: int = Field(1000, gt=0)
    num_epochs: int = Field(3, gt=0)
    checkpointing_steps: int = Field(500, gt=0)
    checkpoints_total_limit: int | None = Field(None, gt=0)
    max_grad_norm: float | None = None
    mixed_precision: Literal["fp16", "bf16", "no"] = "bf16"
    gradient_checkpointing: bool = False
    low_memory: bool = False
    fit_device: str | None = None


class _Optimizer(_Strict):
    class_path: str
    init_args: dict = {}


class _Scheduler(_Strict):
    scheduler_type: Literal["linear", "cosine", "cosine_with_restarts", "polynomial", "constant",
                            "constant_with_warmup"] = "constant"
    warmup_steps: int = 0
    num_cycles: float | None = None
    power: float | None = None


class _Logging(_Strict):
    output_dir: str
    report_to: Literal["tensorboard", "wandb", "swanlab", "none"] = "tensorboard"
    tracker_project_name: str


class QfluxConfig(_Strict):
    trainer: Literal["QwenImageEdit", "QwenImageEditPlus", "FluxKontext", "DreamOmni2", "Flux2Klein"] = "QwenImageEdit"
    resume: str | None = None
    mode: str | None = None
    model: _Model
    data: _Data
    validation: dict = {}
    logging: _Logging
    optimizer: _Optimizer
    lr_scheduler: _Scheduler = _Scheduler()
    train: _Train = _Train()
    cache: _Cache = _Cache()
    predict: dict | None = None
    loss: dict | None = None
