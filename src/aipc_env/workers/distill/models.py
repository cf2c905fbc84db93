"""Where the model comes from and how each stage loads it: the whole pipeline for sampling and gates, the
standalone transformer (NF4 or as saved) for training — distillation lesson 5's working harness."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aipc_env.core.fileio import read_json
from aipc_env.core.runfolder import TINY_MARK
from aipc_env.distill.config import BUILTIN_TINY21, BUILTIN_TINY21_TRAINED, DistillConfig
from aipc_env.distill.identity import is_tiny_random, is_tiny_trained, tiny_kind
from aipc_env.distill.model_paths import model_key, model_path
from aipc_env.errors import InputError

if TYPE_CHECKING:
    import torch

    from aipc_env.distill.config import TeacherSection
    from aipc_env.distill.grid import Grid

__all__ = [
    "TRAINED_RECORD",
    "device_and_dtype",
    "ensure_trained_tiny",
    "is_tiny_random",
    "is_tiny_trained",
    "load_pipeline",
    "load_transformer",
    "model_dir",
    "offload_text_encoder",
    "resolve_run",
    "tiny_kind",
]

TRAINED_RECORD = "aipc_build.json"
"""The trained tiny teacher's cache record (aipc_env.train.buildcache): its recipe and the hash of every file."""


def model_dir(cfg: DistillConfig, *, log: Callable[[str], object] = print) -> Path:
    """The model folder; the tiny random pipeline is built once into the run folder, the trained tiny teacher once
    into the per-user cache (aipc_env.workers.distill.tinytrained21)."""
    if cfg.model == BUILTIN_TINY21_TRAINED:
        return ensure_trained_tiny(model_path(cfg), log=log)
    if cfg.model != BUILTIN_TINY21:
        return Path(cfg.model)
    from aipc_env.workers.distill.tinypipe21 import TINY21_VERSION, build_tiny21_pipeline

    path = model_path(cfg)
    stamp = path / TINY_MARK
    try:
        current = read_json(stamp, "tiny model mark").get("version") == TINY21_VERSION
    except (InputError, AttributeError):
        current = False
    if not current:
        log(f"distill: building the tiny random Qwen-Image-2.1 pipeline in {path}")
        build_tiny21_pipeline(path, seed=cfg.seed)
    return path


def ensure_trained_tiny(path: Path, *, log: Callable[[str], object] = print) -> Path:
    """The trained tiny teacher in `path`, trained there once (aipc_env.workers.distill.tinytrained21) and reused while its
    record holds this version and the hash of every file (aipc_env.train.buildcache)."""
    from aipc_env.distill.shapes import TRAINED21_VERSION
    from aipc_env.train.buildcache import build_once

    def build(tmp: Path) -> None:
        from aipc_env.workers.distill.tinytrained21 import build_tiny21_trained

        log(f"distill: training the tiny Qwen-Image-2.1 teacher once into {path} (about a minute on a CPU)")
        build_tiny21_trained(tmp, log=log)

    recipe = {"teacher": BUILTIN_TINY21_TRAINED, "version": TRAINED21_VERSION}
    build_once(path, record=TRAINED_RECORD, recipe=recipe, build=build, what="the tiny teacher's cache", log=log)
    return path


def resolve_run(cfg: DistillConfig, *, log: Callable[[str], object] = print) -> tuple[DistillConfig, Grid, str]:
    """(the config with its teacher grid resolved, the grid, the model key): the built-in tiny model built if
    needed, the grid from the config or the model (aipc_env.distill.grid). Every stage starts here."""
    from aipc_env.distill.grid import resolve_grid

    path = model_dir(cfg, log=log)
    grid = resolve_grid(cfg.teacher_sigmas, cfg.student_stride, path)
    return cfg.model_copy(update={"teacher_sigmas": grid.teacher}), grid, model_key(path)


def device_and_dtype(cfg: DistillConfig) -> tuple[torch.device, torch.dtype]:
    import torch

    from aipc_env.workers.train.devices import compute_dtype, require_device

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    device = require_device(cfg.device)
    return device, compute_dtype(device, cfg.compute_dtype)


def load_pipeline(path: Path, device: torch.device, dtype: torch.dtype, teacher: TeacherSection | None = None) -> Any:
    """QwenImage21Pipeline from a local folder (offline); the processor shim applies where torchvision is absent.
    `teacher` (a TeacherSection): the transformer in NF4 (the training loader), diffusers' model CPU offload."""
    from diffusers import QwenImage21Pipeline

    from aipc_env.workers.train.compat import processor_without_video

    processor_without_video()
    extra = {}
    if teacher is not None and teacher.base == "nf4":
        extra["transformer"] = load_transformer(path, device, dtype, base="nf4")
    pipe = QwenImage21Pipeline.from_pretrained(str(path), dtype=dtype, local_files_only=True, **extra)
    pipe.set_progress_bar_config(disable=True)
    if teacher is not None and teacher.offload == "model" and device.type != "cpu":
        pipe.enable_model_cpu_offload(device=device)
        return pipe
    return pipe.to(device)


def offload_text_encoder(pipe: Any, teacher: TeacherSection | None) -> bool:
    """Move the text encoder to the CPU once prompts are encoded (the recorded 16 GB -> 1.3 GB). True when moved."""
    if teacher is None or not teacher.offload_text_encoder or pipe.text_encoder.device.type == "cpu":
        return False
    pipe.text_encoder.to("cpu")
    import torch

    for backend in ("cuda", "xpu"):
        mod = getattr(torch, backend, None)
        if mod is not None and mod.is_available():
            mod.empty_cache()
    return True


def load_transformer(path: Path, device: torch.device, dtype: torch.dtype, *, base: str) -> Any:
    """The standalone transformer (QwenImage21Transformer2DModel.from_pretrained), frozen: NF4 (bitsandbytes
    quantize-on-load on a GPU/XPU; layer by layer on the CPU, where diffusers' loader refuses) or as saved."""
    import torch
    from diffusers import QwenImage21Transformer2DModel

    from aipc_env.workers.train.tiny import quantize_linear_layers_nf4

    if base == "nf4" and device.type != "cpu":
        from diffusers import BitsAndBytesConfig

        q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=dtype)
        model = QwenImage21Transformer2DModel.from_pretrained(
            str(path), subfolder="transformer", quantization_config=q, dtype=dtype, device_map={"": device}, local_files_only=True
        )
    elif base == "nf4":
        model = QwenImage21Transformer2DModel.from_pretrained(
            str(path), subfolder="transformer", dtype=torch.float32, local_files_only=True
        )
        quantize_linear_layers_nf4(model, device, dtype)
    else:
        model = QwenImage21Transformer2DModel.from_pretrained(
            str(path), subfolder="transformer", dtype=dtype, local_files_only=True
        ).to(device)
    model.requires_grad_(False)
    return model
