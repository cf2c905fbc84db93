"""The distillation config (YAML, pydantic): model, grids, prompts, student training, evaluation. Torch-free.
Relative paths are resolved against the config file's folder, as for training configs."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

import yaml
from pydantic import Field, field_validator, model_validator

from aipc_env.core.fileio import atomic_write_text, check_writable, read_yaml
from aipc_env.core.formats import InputModel, Seed, VersionedInput, validate_versioned
from aipc_env.core.runfolder import LORA_WEIGHTS
from aipc_env.distill.grid import check_sigmas, student_grid
from aipc_env.distill.shapes import EVAL_SEEDS
from aipc_env.errors import InputError
from aipc_env.train.config import refuse_todos, resolve_path_keys

__all__ = [
    "BUILTIN_EVAL_PROMPTS",
    "BUILTIN_MODELS",
    "BUILTIN_PROMPTS",
    "BUILTIN_SHAPES_EVAL_PROMPTS",
    "BUILTIN_SHAPES_PROMPTS",
    "BUILTIN_TINY21",
    "BUILTIN_TINY21_TRAINED",
    "PROFILES",
    "DistillConfig",
    "default_distill_config",
    "default_run_dir",
    "load_distill_config",
    "write_default_distill_config",
]

BUILTIN_TINY21 = "builtin:tiny-qwen-image-2.1"
"""A tiny random Qwen-Image-2.1 pipeline built offline (aipc_env.workers.distill.tinypipe21): no download."""
BUILTIN_TINY21_TRAINED = "builtin:tiny-qwen-image-2.1-trained"
"""The tiny pipeline with its transformer trained on a synthetic distribution (aipc_env.workers.distill.tinytrained21),
built once per user into the cache: a teacher whose student G3 can judge."""
BUILTIN_MODELS = (BUILTIN_TINY21, BUILTIN_TINY21_TRAINED)
BUILTIN_PROMPTS = "builtin:prompts"
BUILTIN_EVAL_PROMPTS = "builtin:eval-prompts"
BUILTIN_SHAPES_PROMPTS = "builtin:shapes-prompts"
BUILTIN_SHAPES_EVAL_PROMPTS = "builtin:shapes-eval-prompts"


class PromptsSection(InputModel):
    train: str = Field(default=BUILTIN_PROMPTS, description='JSONL, one {"prompt": ...} per line ("seed" optional)')
    eval: str = Field(default=BUILTIN_EVAL_PROMPTS, description="held-out prompts for G3, same format")
    limit: int | None = Field(default=None, ge=1, description="use only the first N training prompts")


class DivergenceSection(InputModel):
    """When a training run is stopped as diverged (the recorded 128-prompt run went to loss 1.2 and a velocity MSE
    2.2 while it kept training)."""

    spike_factor: float = Field(
        default=4.0,
        gt=1,
        description="a pair's velocity error above this times the median of the last `window` errors of the same student step",
    )
    window: int = Field(default=8, ge=2)
    velocity_every: int = Field(default=10, ge=1, description="measure the velocity MSE on the training pairs every N steps")
    velocity_tolerance: float = Field(default=1.5, gt=1, description="stop when it exceeds the best so far times this")


class OnPolicySection(InputModel):
    """The recorded project's next step 2: roll the student to sigma_2k, take the teacher two steps from there, train on that."""

    start_step: int = Field(0, ge=0, description="on-policy pairs are used from this optimizer step on")
    fraction: float = Field(0.5, ge=0, le=1, description="share of micro-batches that are on-policy")


class StudentSection(InputModel):
    max_train_steps: int = Field(default=1000, ge=1)
    learning_rate: float = Field(default=1e-4, gt=0)
    batch_size: int = Field(
        default=1, ge=1, description="pairs per optimizer step in all (split over the processes and the accumulation steps)"
    )
    processes: int = Field(
        default=1, ge=1, le=64, description="training processes under `accelerate launch` (gloo on CPU); an AI PC has one XPU: 1"
    )
    gradient_accumulation_steps: int = Field(default=1, ge=1, le=1024)
    log_with: Literal["tensorboard"] | None = Field(
        default=None, description="accelerate tracker for loss, velocity MSE and G3 grids (offline, under output_dir/logs)"
    )
    loss_weighting: Literal["uniform", "endpoint"] = Field(
        default="endpoint", description="uniform velocity MSE, or endpoint: each step's error times its delta-sigma squared"
    )
    rank: int = Field(default=64, ge=1, le=512)
    alpha: float = Field(default=128, gt=0)
    target_modules: list[str] = ["to_q", "to_k", "to_v", "to_out.0"]
    base: Literal["nf4", "full"] = Field(default="nf4", description="the frozen base in training: NF4 (QLoRA) or as loaded")
    optimizer: Literal["adamw", "adam8bit"] = "adamw"
    max_grad_norm: float | None = Field(default=1.0, gt=0)
    gradient_checkpointing: bool = True
    checkpointing_steps: int = Field(default=100, ge=1)
    checkpoints_total_limit: int | None = Field(default=3, ge=1)
    resume: str | None = Field(default=None, description="'auto' (latest checkpoint) or a checkpoint folder")
    on_policy: OnPolicySection | None = None
    divergence: DivergenceSection = DivergenceSection()

    @model_validator(mode="after")
    def _split(self) -> StudentSection:
        per = self.processes * self.gradient_accumulation_steps
        if self.batch_size % per:
            raise ValueError(
                f"batch_size {self.batch_size} does not split into processes {self.processes} x "
                f"gradient_accumulation_steps {self.gradient_accumulation_steps} equal micro-batches"
            )
        return self


class TeacherSection(InputModel):
    """How the teacher (the base model, in trajectories and gates) is loaded."""

    base: Literal["full", "nf4"] = Field(
        default="full",
        description="the sampling transformer as saved, or NF4 (the "
        "engine's loader; on an AI PC's shared memory the full bf16 one may not fit)",
    )
    offload: Literal["none", "model"] = Field(
        default="none", description="model: diffusers' model CPU offload (each component on the device only while it runs)"
    )
    offload_text_encoder: bool = Field(
        default=True, description="move the text encoder off the device once prompts are encoded (seed: 16 GB -> 1.3 GB)"
    )


class EvalSection(InputModel):
    mode: Literal["auto", "quality", "plumbing"] = Field(
        default="auto",
        description="quality needs LPIPS weights and a real model, or the trained tiny teacher (judged on the "
        "latent MSE to teacher@8); auto: quality when lpips_weights is set and the model is not a tiny random one "
        "(aipc_tiny.json), or on the trained tiny teacher, else plumbing",
    )
    seeds: list[Seed] = Field(default=[0], min_length=1, description="noise seeds per eval prompt")
    margin: float = Field(
        default=0.0,
        ge=0,
        description="quality: the student's mean distance to the teacher (LPIPS; the latent "
        "MSE on the trained tiny teacher) must be below naive's minus this, "
        "and (with reference_lora) not above the reference's plus this",
    )
    reference_lora: str | None = Field(
        default=None,
        description="a public 4-step LoRA for the same model (a .safetensors file, or a folder with "
        f"{LORA_WEIGHTS}; any layout diffusers loads, e.g. Lightning's): G3 samples it from the "
        "same prompts, seeds and noise, and quality mode passes only if the student is not worse than it by more "
        "than margin",
    )
    min_win_rate: float = Field(
        default=0.5, ge=0, le=1, description="quality: share of prompt x seed pairs where the student's LPIPS is below naive's"
    )
    lpips_weights: str | None = Field(
        default=None,
        description="folder with LPIPS weights (lpips package layout); without it G3 measures PSNR/MSE to the teacher",
    )
    decode_device: str = Field(
        default="cpu",
        description="where the VAE decodes (distillation lesson 3: the bf16 GPU decode of "
        "this video VAE needs ~76 GB of transients at 512 px)",
    )


class DistillConfig(VersionedInput):
    """A distillation config (YAML). Paths are absolute after loading."""

    FORMAT: ClassVar[str] = "distillation config"
    FIX: ClassVar[str] = "start from `aipc-env distill init` (writes the built-in default) and edit it"
    schema_version: Literal[1] = 1
    model: str = Field(
        BUILTIN_TINY21,
        description="a local diffusers Qwen-Image-2.1(-Turbo) folder, or a built-in tiny one (random, or trained on shapes)",
    )
    output_dir: str
    device: str = Field("auto", pattern=r"^(auto|cpu|xpu(:\d+)?|cuda(:\d+)?)$")
    compute_dtype: Literal["auto", "bfloat16", "float16", "float32"] = "auto"
    height: int = Field(512, ge=32)
    width: int = Field(512, ge=32)
    teacher_sigmas: list[float] | None = Field(
        None,
        description="the teacher grid without the terminal 0; default: the model's sample_sigmas "
        "(model_index.json), else the pipeline's linspace(1, 1/8)",
    )
    student_stride: int = Field(2, ge=2, description="student step k spans teacher steps stride*k .. stride*(k+1)")
    use_kv_cache: bool = True
    seed: Seed = 0
    threads: int | None = Field(None, ge=1, description="torch CPU threads (pin in CI: timings vary 20x otherwise)")
    prompts: PromptsSection = PromptsSection()
    teacher: TeacherSection = TeacherSection()
    student: StudentSection = StudentSection()
    eval: EvalSection = EvalSection()

    @field_validator("height", "width")
    @classmethod
    def _mult32(cls, value: int) -> int:
        if value % 32:
            raise ValueError("must be a multiple of 32 (the pipeline floors sizes to 32; below 32 it crashes)")
        return value

    @model_validator(mode="after")
    def _grid(self) -> DistillConfig:
        if self.teacher_sigmas is not None and (problem := check_sigmas(self.teacher_sigmas, self.student_stride)):
            raise ValueError(f"teacher_sigmas: {problem}")
        return self

    @property
    def teacher_grid(self) -> list[float]:
        """The teacher grid, only after it is resolved (resolve_grid); teacher_sigmas is None until then."""
        if self.teacher_sigmas is None:
            raise RuntimeError("the teacher grid is not resolved yet (resolve_grid)")
        return self.teacher_sigmas

    @property
    def student_sigmas(self) -> list[float]:
        """The student grid (aipc_env.distill.grid.student_grid), only after the grid is resolved (resolve_grid)."""
        if self.teacher_sigmas is None:
            raise RuntimeError("the teacher grid is not resolved yet (resolve_grid)")
        return student_grid(self.teacher_sigmas, self.student_stride)

    @property
    def out(self) -> Path:
        return Path(self.output_dir)


_PATH_KEYS = (
    "model",
    "output_dir",
    "prompts.train",
    "prompts.eval",
    "student.resume",
    "eval.lpips_weights",
    "eval.reference_lora",
)


def load_distill_config(path: str | Path) -> DistillConfig:
    """Read, validate and resolve a distillation config; every problem names the file and key."""
    path = Path(path)
    raw = read_yaml(path, "distillation config")
    if not isinstance(raw, dict):
        raise InputError("expected a mapping (model, output_dir, prompts, student, eval, ...)", path=path, fix=DistillConfig.FIX)
    refuse_todos(raw, path)
    raw = {"schema_version": 1, **raw}
    cfg = validate_versioned(DistillConfig, raw, path)
    data = cfg.model_dump()
    resolve_path_keys(data, _PATH_KEYS, path.absolute().parent)
    cfg = DistillConfig.model_validate(data)
    _check_paths(cfg, path)
    return cfg


def _check_paths(cfg: DistillConfig, path: Path) -> None:
    if not cfg.model.startswith("builtin:") and not (Path(cfg.model) / "model_index.json").is_file():
        raise InputError(
            f"{cfg.model} is not a diffusers model folder (no model_index.json)",
            path=path,
            key="model",
            fix="download Qwen/Qwen-Image-2.1-Turbo (or point at its local copy)",
        )
    for key in ("train", "eval"):
        value = getattr(cfg.prompts, key)
        if not value.startswith("builtin:") and not Path(value).is_file():
            raise InputError(
                f"prompts file {value!r} does not exist",
                path=path,
                key=f"prompts.{key}",
                fix='point it at a JSONL file with one {"prompt": "..."} per line',
            )
    if cfg.model.startswith("builtin:") and cfg.model not in BUILTIN_MODELS:
        raise InputError(
            f"unknown built-in model {cfg.model!r}",
            path=path,
            key="model",
            fix=f"use {' or '.join(BUILTIN_MODELS)}, or a model folder",
        )
    if cfg.eval.mode == "quality" and not cfg.eval.lpips_weights and not _trained_tiny(cfg.model):
        raise InputError(
            "eval.mode quality needs LPIPS: G3 decides on LPIPS to the teacher",
            path=path,
            key="eval.lpips_weights",
            fix="set eval.lpips_weights to a folder holding hub/checkpoints/alexnet-owt-7be5be79.pth, or set eval.mode: plumbing",
        )
    if cfg.eval.mode == "quality" and cfg.model == BUILTIN_TINY21:
        raise InputError(
            "the built-in tiny model has random weights: G3 on it can only be a plumbing check",
            path=path,
            key="eval.mode",
            fix="set eval.mode: plumbing (or auto), or point model at the real Qwen-Image-2.1-Turbo",
        )
    check_writable(cfg.output_dir, "output_dir", folder=True, key="output_dir", config=path)


def _trained_tiny(model: str) -> bool:
    """The trained tiny teacher (built-in, or a folder whose tiny mark records its training): judged without LPIPS."""
    if model == BUILTIN_TINY21_TRAINED:
        return True
    if model.startswith("builtin:"):
        return False
    from aipc_env.distill.identity import is_tiny_trained

    return is_tiny_trained(Path(model))


PROFILES = ("tiny", "tiny-trained", "turbo")
TINY_TRAINED_STUDENT = {
    "max_train_steps": 400,
    "learning_rate": 3e-4,
    "rank": 8,
    "alpha": 16,
    "batch_size": 16,
    "loss_weighting": "endpoint",
    "base": "full",
    "gradient_checkpointing": False,
    "checkpointing_steps": 100,
    "checkpoints_total_limit": 1,
    "divergence": {"spike_factor": 1000.0, "window": 8, "velocity_every": 25, "velocity_tolerance": 3.0},
}
"""The student on the trained tiny teacher (profile tiny-trained)."""
TINY_TRAINED_MARGIN = 0.0005
"""G3's margin on it, in latent MSE to teacher@8: about a tenth of naive@4's distance (0.005 on the 64 pairs)."""


def default_distill_config(run_dir: Path, profile: str = "tiny") -> dict[str, Any]:
    """A profile's config. tiny (the built-in default): the tiny random 2.1 pipeline at 64x64, built-in prompts,
    CPU-sized training. turbo: the image21-turbo-trajectories settings for the real Qwen-Image-2.1-Turbo (rank 64, alpha 128, the
    endpoint weighting that helped, lr 1e-4: the recorded 3e-4 diverged at 128 prompts and its next step is a sweep
    at 1e-4 / 5e-5), its own sample_sigmas grid, an NF4 teacher and the text encoder offloaded."""
    if profile == "turbo":
        return {
            "schema_version": 1,
            "model": "TODO: your local copy of Qwen/Qwen-Image-2.1-Turbo (a folder with model_index.json)",
            "output_dir": str(run_dir),
            "device": "auto",
            "height": 512,
            "width": 512,
            "seed": 0,
            "prompts": {"train": "TODO: prompts_train.jsonl", "eval": "TODO: prompts_eval.jsonl"},
            "teacher": {"base": "nf4", "offload": "none", "offload_text_encoder": True},
            "student": {
                "max_train_steps": 1000,
                "learning_rate": 1e-4,
                "rank": 64,
                "alpha": 128,
                "loss_weighting": "endpoint",
                "base": "nf4",
                "batch_size": 1,
                "checkpointing_steps": 100,
                "checkpoints_total_limit": 3,
            },
            "eval": {
                "mode": "quality",
                "seeds": [0, 1],
                "lpips_weights": "TODO: folder holding hub/checkpoints/alexnet-owt-7be5be79.pth",
                "decode_device": "cpu",
            },
        }
    tiny = {"output_dir": str(run_dir), "device": "auto", "height": 64, "width": 64, "seed": 0, "threads": 1}
    """What both tiny profiles share (CPU-sized, no download)."""
    if profile == "tiny-trained":
        return {
            "schema_version": 1,
            "model": BUILTIN_TINY21_TRAINED,
            **tiny,
            "prompts": {"train": BUILTIN_SHAPES_PROMPTS, "eval": BUILTIN_SHAPES_EVAL_PROMPTS},
            "student": TINY_TRAINED_STUDENT,
            "eval": {"mode": "quality", "seeds": list(EVAL_SEEDS), "margin": TINY_TRAINED_MARGIN},
        }
    if profile != "tiny":
        raise ValueError(f"unknown profile {profile!r}")
    return {
        "schema_version": 1,
        "model": BUILTIN_TINY21,
        **tiny,
        "prompts": {"train": BUILTIN_PROMPTS, "eval": BUILTIN_EVAL_PROMPTS},
        "student": {
            "max_train_steps": 20,
            "learning_rate": 3e-3,
            "rank": 8,
            "alpha": 16,
            "loss_weighting": "endpoint",
            "base": "nf4",
            "checkpointing_steps": 10,
            "checkpoints_total_limit": 2,
            "divergence": {"spike_factor": 10.0, "window": 8, "velocity_every": 5, "velocity_tolerance": 3.0},
        },
        "eval": {"seeds": [0, 1]},
    }


def default_run_dir() -> Path:
    """The one default run folder of every `distill` stage (init writes its config there; the stages read it)."""
    from aipc_env.paths import data_dir

    return data_dir() / "runs" / "distill"


def write_default_distill_config(run_dir: Path, *, replace: bool = False, profile: str = "tiny") -> Path:
    """Write run_dir/distill.yaml from a profile, with output_dir "." (the config's own folder, so the run lands
    beside it however the folder was typed). An existing distill.yaml is the user's: refused, or with `replace`
    kept as distill.yaml.bak first."""
    path = Path(run_dir) / "distill.yaml"
    check_writable(path, "the config")
    if path.exists() and not replace:
        raise InputError(
            "a distillation config is already there (perhaps edited); it was left as it is",
            path=path,
            fix=f'edit it and run `aipc-env distill all --config "{path}"`, choose '
            "another folder, or pass --force to replace it (the old one is kept as distill.yaml.bak)",
        )
    head = {
        "tiny": "# aipc-env distill built-in default (tiny random Qwen-Image-2.1, no download)\n",
        "tiny-trained": "# aipc-env distill, profile tiny-trained: the tiny Qwen-Image-2.1 teacher trained on "
        "colored shapes (built once per user, no download); G3 judges the student\n",
        "turbo": "# aipc-env distill, profile turbo: the image21-turbo-trajectories settings for "
        "Qwen-Image-2.1-Turbo; fill each TODO\n",
    }[profile]
    text = (
        head
        + "# relative paths are resolved against this file's folder\n"
        + yaml.safe_dump(default_distill_config(Path("."), profile), sort_keys=False, allow_unicode=True)
    )
    if not path.exists():
        atomic_write_text(path, text)
        return path
    from aipc_env.core.outputs import JOURNAL_SUFFIX, commit_files

    backup = path.with_name("distill.yaml.bak")
    if backup.is_symlink():  # the link itself is replaced, never written through
        backup.unlink()
    elif backup.exists() and not backup.is_file():
        raise InputError(
            "is not a regular file: the old config cannot be kept there", path=backup, fix="move it away, then run again"
        )
    # the backup and the new config both, or neither (Ctrl-C): the user's config is never lost
    commit_files({backup: path.read_bytes(), path: text.encode("utf-8")}, path.with_name(f".distill.yaml{JOURNAL_SUFFIX}"))
    return path
