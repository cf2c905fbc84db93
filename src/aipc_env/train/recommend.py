"""Recommend a training config from the machine (runbook §5), pure: facts in, config and reasons out."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from aipc_env.core.formats import VersionedModel
from aipc_env.dataset.split import HELDOUT_MIN
from aipc_env.errors import AipcError, ExitCode, InputError
from aipc_env.facts.memory import ram_tier_gb
from aipc_env.facts.model import Facts

__all__ = [
    "SMOKE_FIX",
    "SMOKE_STEPS",
    "TODO_MODEL",
    "TODO_OUTPUT",
    "Machine",
    "ProbeJson",
    "RecommendReport",
    "Recommendation",
    "SelectedPattern",
    "get_dotted",
    "machine_from_facts",
    "machine_from_probe",
    "qflux_config",
    "recommend",
    "set_dotted",
    "smoke_config",
]

TODO_MODEL = "TODO: local Qwen-Image-Edit-2511 folder (huggingface-cli download Qwen/Qwen-Image-Edit-2511 --local-dir ...)"
TODO_MODEL_QFLUX = (
    "TODO: local Qwen-Image-Edit-2509 folder (huggingface-cli download Qwen/Qwen-Image-Edit-2509 "
    "--local-dir ...); not 2511 with this engine"
)
QFLUX_VARIANTS = ("edit", "edit-2509")
"""The model variants the qflux engine trains as themselves. Not 2511: upstream's QwenImageTransformer2DModel has
no zero_cond_t, so it ignores the flag in a 2511 checkpoint's config and would train another model."""
QFLUX_NO_2511 = (
    "qflux engine: Qwen-Image-Edit-2509 (or the original Edit), not 2511: upstream's transformer "
    "class has no zero_cond_t and ignores that setting of a 2511 checkpoint, so the run would train "
    "another model; train 2511 with the built-in engine"
)
TODO_CACHE = "TODO: cache folder (embeddings and latents)"
TODO_OUTPUT = "TODO: output folder for checkpoints, the LoRA and logs"
TODO_DATASET = "TODO: dataset folder, parquet folder or CSV (aipc-env dataset validate PATH)"
TODO_TE = "TODO: NF4 text encoder folder (aipc-env quantize text-encoder --src MODEL --dst DIR)"


@dataclass
class Machine:
    ram_bytes: int | None
    gpu_names: list[str] = field(default_factory=list)
    free_disk_bytes: int | None = None
    xpu_available: bool | None = None
    device: str = "auto"


class ProbeJson(BaseModel):
    """The runbook's probe_hw.py output; unknown keys are ignored (the probe evolves)."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)
    xpu_available: bool | None = None
    torch_version: str | None = None
    bnb_version: str | None = None
    ram_gb: float | None = Field(None, ge=0, le=2**20)
    total_ram_gb: float | None = Field(None, ge=0, le=2**20)
    gpu_name: str | None = None
    free_disk_gb: float | None = Field(None, ge=0, le=2**30)


def machine_from_facts(facts: Facts) -> Machine:
    gpus = [g.name for g in facts.gpus if g.is_intel]
    probe = facts.device_probe
    return Machine(
        ram_bytes=facts.memory.total_bytes,
        gpu_names=gpus,
        free_disk_bytes=facts.disk.free_bytes if facts.disk else None,
        xpu_available=probe.xpu_available if probe and probe.ran else None,
    )


def machine_from_probe(probe: ProbeJson) -> Machine:
    gb = probe.ram_gb if probe.ram_gb is not None else probe.total_ram_gb
    return Machine(
        ram_bytes=int(gb * 2**30) if gb is not None else None,
        gpu_names=[probe.gpu_name] if probe.gpu_name else [],
        free_disk_bytes=int(probe.free_disk_gb * 2**30) if probe.free_disk_gb is not None else None,
        xpu_available=probe.xpu_available,
    )


@dataclass
class Recommendation:
    config: dict[str, Any]
    selected: list[tuple[str, str]]
    """(§7 pattern, why) pairs."""
    notes: list[str]
    tier_gb: int


def _dataset_kind(path: str | None) -> str | None:
    if not path:
        return None
    p = Path(path)
    if p.is_file() and p.suffix.lower() == ".csv":
        return "csv"
    if (p / "data").is_dir() and any((p / "data").glob("train-*.parquet")):
        return "parquet"
    return "local"


SMOKE_FIX = (
    "to try the whole path on this machine first: `aipc-env recommend --smoke --out smoke.yaml`, then "
    "`aipc-env train smoke.yaml` (this machine's settings on the built-in tiny model, under a minute)"
)


def recommend(
    machine: Machine,
    *,
    dataset_path: str | None = None,
    force: bool = False,
    fast: bool = False,
    model_path: str | None = None,
    output_dir: str | None = None,
    smoke: bool = False,
) -> Recommendation:
    """The §5 config for the machine's RAM tier. Below 32 GB it is refused unless forced, or written for the
    tiny model (`smoke`: see smoke_config)."""
    if machine.ram_bytes is None:
        raise InputError("the machine's RAM is unknown", fix="pass facts from `aipc-env doctor --save-facts`")
    tier = ram_tier_gb(machine.ram_bytes)
    notes: list[str] = []
    selected: list[tuple[str, str]] = []
    if tier < 32:
        if not (force or smoke):
            raise AipcError(
                f"{tier} GB machines are not supported: the NF4 transformer alone needs ~10 GB of GPU "
                "allocation, leaving no room for activations on unified memory; no config was written",
                fix=f"use a 32 GB (or larger) machine, or pass --force to write a config anyway; {SMOKE_FIX}",
                exit_code=ExitCode.PROBLEMS,
            )
        notes.append(
            f"{tier} GB is below the supported minimum (32 GB); "
            + ("a smoke config for the tiny model only" if smoke else "forced")
        )
    if fast:
        size = [256, 448]
    elif tier >= 64:
        size = [512, 768]
    else:
        size = [384, 672]
    if size == [512, 768] and tier <= 32:
        notes.append("[512, 768] is tight on 32 GB")
    model: dict[str, Any] = {"path": model_path or TODO_MODEL, "quantize": "nf4"}
    if tier <= 32:
        model["text_encoder_path"] = TODO_TE
        selected.append(
            (
                "7.2 pre-quantize the text encoder (NF4)",
                f"{tier} GB RAM: cuts the cache phase's RAM by ~8 GB (Qwen2.5-VL ~15 GB -> ~5.5 GB)",
            )
        )
    elif tier <= 64:
        notes.append("7.2 (NF4 text encoder) is optional at 32-64 GB")
    selected.append(
        (
            "7.1 pre-quantize the transformer (NF4)",
            "optional: saves one quantization pass per run when you train more than once (set model.transformer_path)",
        )
    )
    selected.append(
        (
            "7.3 mode-aware loading",
            "always: the cache phase never loads the transformer, the fit phase never loads the text encoder or VAE",
        )
    )
    selected.append(("7.4 cache first", "always: embeddings and latents are computed once per sample"))
    kind = _dataset_kind(dataset_path)
    config = {
        "schema_version": 1,
        "engine": "builtin",
        "model": model,
        "lora": {"rank": 16, "alpha": 16, "target_modules": ["to_q", "to_k", "to_v", "to_out.0"], "init": "gaussian"},
        "data": {
            "datasets": [dataset_path or TODO_DATASET],
            "target_size": size,
            "batch_size": 1,
            "num_workers": 1,
            "caption_dropout_rate": 0.05,
            "heldout_count": HELDOUT_MIN,  # runbook §3: set aside by a recorded rule; the judge phase uses them
        },
        "train": {
            "max_train_steps": 1000,
            "gradient_accumulation_steps": 2,
            "gradient_checkpointing": True,
            "learning_rate": 1e-4,
            "lr_scheduler": "constant_with_warmup",
            "warmup_steps": 20,
            "seed": 42,
            "checkpointing_steps": 250,
            "checkpoints_total_limit": 3,
            "mixed_precision": "no",
        },
        "optimizer": {"type": "adam8bit"},
        "output_dir": output_dir or TODO_OUTPUT,
        "device": machine.device,
        "compute_dtype": "auto",
    }
    if kind:
        notes.append(f"dataset format: {kind}")
    if machine.xpu_available is False:
        notes.append("the probe saw no XPU device: training would run on the CPU (fix the driver first)")
    return Recommendation(config=config, selected=selected, notes=notes, tier_gb=tier)


SMOKE_STEPS = 200
SMOKE_LEARNING_RATE = 1e-2
"""The built-in default's: what the tiny model learns its edit with."""


def get_dotted(tree: dict[str, Any], dotted: str) -> object:
    """tree["a"]["b"] for "a.b"; None where a part is missing."""
    node: object = tree
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def set_dotted(tree: dict[str, Any], dotted: str, value: object, *, remove: bool = False) -> None:
    """Set (or with `remove`, drop) tree["a"]["b"] for "a.b", creating missing parents."""
    *parents, leaf = dotted.split(".")
    node = tree
    for part in parents:
        node = node.setdefault(part, {})
    if remove:
        node.pop(leaf, None)
    else:
        node[leaf] = value


def smoke_config(rec: Recommendation, *, output_dir: str) -> tuple[dict[str, Any], list[str]]:
    """The recommended config changed only where the built-in tiny model must: the model and data (the tiny model,
    the built-in edit's samples, 64 px), the step counts and learning rate the tiny model learns the edit with (the
    run judges it on held-out samples), no workers, and the output folder. Optimizer, LoRA, gradient
    checkpointing and accumulation, caption dropout and the device stay as recommended. Returns the config and
    the keys it changed."""
    import copy

    from aipc_env.train.config import BUILTIN_SYNTHETIC, BUILTIN_TINY

    cfg = copy.deepcopy(rec.config)
    changed = {
        "model.path": BUILTIN_TINY,
        "data.datasets": [BUILTIN_SYNTHETIC],
        "data.target_size": [64, 64],
        "data.synthetic_samples": 16,
        "data.num_workers": 0,
        "train.max_train_steps": SMOKE_STEPS,
        "train.learning_rate": SMOKE_LEARNING_RATE,
        "train.warmup_steps": 2,
        "train.checkpointing_steps": SMOKE_STEPS // 2,
        "output_dir": output_dir,
    }
    for dotted, value in changed.items():
        set_dotted(cfg, dotted, value)
    dropped = [f"model.{key}" for key in ("text_encoder_path", "transformer_path") if cfg["model"].pop(key, None)]
    dropped += ["data.heldout_count"] if cfg["data"].pop("heldout_count", None) else []  # the edit holds its own
    return cfg, sorted([*changed, *dropped])


def qflux_config(
    rec: Recommendation, *, dataset_path: str | None, plus: bool = True, cache_dir: str | None = None
) -> dict[str, Any]:
    """The same recommendation in qwen-image-finetune's own layout, as its loader (after `aipc-env adapt`) reads it:
    the processor nested as {class_path, init_args}; NF4 as model.quantize_type (quantize: true is bnb's 8-bit
    path); every path given is filled (cache_dir defaults to <output_dir>/cache); a parquet folder in the dict
    form {repo_id: <folder>, split: train}, which the adapted loader reads through `datasets`. Devices follow
    the machine (xpu:0, or cpu)."""
    cfg = rec.config
    kind = _dataset_kind(dataset_path)
    ds = dataset_path or TODO_DATASET
    dataset_value: object = [{"repo_id": ds, "split": "train"}] if kind == "parquet" else ds
    output_dir = cfg["output_dir"]
    if cache_dir is None:
        cache_dir = TODO_CACHE if output_dir.startswith("TODO") else str(Path(output_dir) / "cache")
    device = "cpu" if cfg.get("device") == "cpu" else "xpu:0"
    path = TODO_MODEL_QFLUX if cfg["model"]["path"] == TODO_MODEL else cfg["model"]["path"]
    model: dict[str, Any] = {
        "pretrained_model_name_or_path": path,
        "quantize": False,
        "quantize_type": "nf4",
        "lora": {
            "r": cfg["lora"]["rank"],
            "lora_alpha": int(cfg["lora"]["alpha"]),
            "init_lora_weights": "gaussian",
            "target_modules": cfg["lora"]["target_modules"],
        },
    }
    for key in ("transformer_path", "text_encoder_path"):
        if cfg["model"].get(key):
            model[key] = cfg["model"][key]
    drop_keys = ["empty_prompt_embeds", "empty_prompt_embeds_mask"]
    height, width = cfg["data"]["target_size"]
    return {
        "trainer": "QwenImageEditPlus" if plus else "QwenImageEdit",
        "model": model,
        "data": {
            "class_path": "qflux.data.dataset.ImageDataset",
            "batch_size": 1,
            "num_workers": 1,
            "shuffle": True,
            "init_args": {
                "dataset_path": dataset_value,
                "caption_dropout_rate": cfg["data"]["caption_dropout_rate"],
                "cache_dir": cache_dir,
                "use_cache": True,
                "prompt_empty_drop_keys": drop_keys,
                "processor": {
                    "class_path": "qflux.data.preprocess.ImageProcessor",
                    "init_args": {
                        "process_type": "center_crop",
                        "target_size": [height, width],
                        "controls_size": [[height, width]],
                    },
                },
            },
        },
        "cache": {
            "devices": {"vae": device, "text_encoder": device},
            "use_cache": True,
            "cache_dir": cache_dir,
            "prompt_empty_drop_keys": drop_keys,
        },
        "train": {
            "gradient_accumulation_steps": cfg["train"]["gradient_accumulation_steps"],
            "max_train_steps": cfg["train"]["max_train_steps"],
            "num_epochs": 1000,
            "checkpointing_steps": cfg["train"]["checkpointing_steps"],
            "checkpoints_total_limit": cfg["train"]["checkpoints_total_limit"],
            "mixed_precision": "no",
            "gradient_checkpointing": True,
        },
        "optimizer": {"class_path": "bitsandbytes.optim.Adam8bit", "init_args": {"lr": 1e-4, "betas": [0.9, 0.999]}},
        "lr_scheduler": {"scheduler_type": "constant_with_warmup", "warmup_steps": 20},
        "validation": {"enabled": False},
        "logging": {"output_dir": output_dir, "report_to": "tensorboard", "tracker_project_name": "aipc-lora"},
    }


class SelectedPattern(BaseModel):
    pattern: str
    why: str


class RecommendReport(VersionedModel):
    """`aipc-env recommend --json`: the config, the §7 patterns selected and why, and notes."""

    FORMAT: ClassVar[str] = "recommendation"
    schema_version: Literal[1] = 1
    engine: Literal["builtin", "qflux"]
    tier_gb: int
    config: dict[str, Any]
    selected: list[SelectedPattern]
    notes: list[str]
