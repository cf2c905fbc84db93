"""The files of a training run's folder, named once: what the engines write, what the launcher writes beside them,
and what `compare`, `distill`, the judge phase and the report read back. Standard library only."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "ACCELERATE_CONFIG",
    "DISTILL_ACCELERATE_CONFIG",
    "LORA_WEIGHTS",
    "TINY_MARK",
    "RunFolder",
    "lora_file_at",
    "lora_file_in",
]

LORA_WEIGHTS = "pytorch_lora_weights.safetensors"
"""diffusers' own LoRA weight file name (`save_lora_weights` writes it, `load_lora_weights` needs it named offline)."""
TINY_MARK = "aipc_tiny.json"
"""The mark a tiny pipeline built here carries in its folder (aipc_env.workers.train.tinyparts writes it,
aipc_env.distill.identity reads it)."""
ACCELERATE_CONFIG = "accelerate_config.yaml"
"""The accelerate config a training run's launcher passes to `accelerate launch`."""
DISTILL_ACCELERATE_CONFIG = "accelerate_distill.yaml"
"""The accelerate config of a distillation run's student stage (its own name: a distillation's output folder may
also hold a training run's files)."""


def lora_file_in(folder: str | Path) -> Path:
    """The LoRA weight file in a LoRA folder (a run's lora/, a checkpoint, a published LoRA): diffusers' name."""
    return Path(folder) / LORA_WEIGHTS


def lora_file_at(path: str | Path) -> Path:
    """A LoRA given as a file or as a folder: the file as given, else the folder's weight file (lora_file_in)."""
    path = Path(path)
    return lora_file_in(path) if path.is_dir() else path


@dataclass(frozen=True)
class RunFolder:
    """A run's output folder (a training config's output_dir)."""

    root: Path

    @property
    def lora_dir(self) -> Path:
        return self.root / "lora"

    @property
    def lora_file(self) -> Path:
        return lora_file_in(self.lora_dir)

    @property
    def accelerate_config(self) -> Path:
        return self.root / ACCELERATE_CONFIG

    @property
    def fit_summary(self) -> Path:
        return self.root / "fit_summary.json"
