"""The files of a training run's folder, named once: what the engines write, what the launcher writes beside them,
and what `compare`, `distill`, the judge phase and the report read back. Standard library only."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["ACCELERATE_CONFIG", "DISTILL_ACCELERATE_CONFIG", "LORA_WEIGHTS", "RunFolder"]

LORA_WEIGHTS = "pytorch_lora_weights.safetensors"
"""diffusers' own LoRA weight file name (`save_lora_weights` writes it, `load_lora_weights` needs it named offline)."""
ACCELERATE_CONFIG = "accelerate_config.yaml"
"""The accelerate config a training run's launcher passes to `accelerate launch`."""
DISTILL_ACCELERATE_CONFIG = "accelerate_distill.yaml"
"""The accelerate config of a distillation run's student stage (its own name: a distillation's output folder may
also hold a training run's files)."""


@dataclass(frozen=True)
class RunFolder:
    """A run's output folder (a training config's output_dir)."""

    root: Path

    @property
    def lora_dir(self) -> Path:
        return self.root / "lora"

    @property
    def lora_file(self) -> Path:
        return self.lora_dir / LORA_WEIGHTS

    @property
    def accelerate_config(self) -> Path:
        return self.root / ACCELERATE_CONFIG

    @property
    def fit_summary(self) -> Path:
        return self.root / "fit_summary.json"
