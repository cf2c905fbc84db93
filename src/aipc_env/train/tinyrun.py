"""`aipc-env train CONFIG --model tiny`: your config and your dataset on a tiny random Qwen-Image-Edit model in the
real diffusers layout, built in the run folder by the run's first phase (no download, any device). Torch-free.

What it proves: the whole path on your data (your dataset's format read, the cache phase encoding your images and
prompts with the pipeline's own text encoder and VAE, the fit conditioning the transformer as the pipeline does,
the LoRA written in the formats diffusers and ComfyUI load). What it cannot: that a model learns your edit (a random
tiny model has nothing to learn it with; a held-out "did NOT learn" is the expected verdict)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from aipc_env.core.fileio import atomic_write_text, read_yaml

__all__ = ["EXPLAINED", "NOT_LEARNED", "TINY_MODEL_DIR", "tiny_config"]

TINY_MODEL_DIR = "tiny-model"
"""The tiny model's folder in the run folder."""
EXPLAINED = (
    "tiny model: your data on a tiny random Qwen-Image-Edit in the real diffusers layout (built here, no download). "
    "It proves the path, the conditioning and the formats on your dataset; it cannot show that a model learns your "
    "edit (a random tiny model does not: a held-out 'did NOT learn' is expected)."
)
NOT_LEARNED = "expected on a random tiny model: this run proves the path, the conditioning and the formats, not learning"


def tiny_config(config: Path) -> Path:
    """Write `<config stem>.tiny.yaml` beside CONFIG (its relative paths stay right): the same config with
    model.path = <output_dir>-tiny/tiny-model and output_dir = <output_dir>-tiny (a tiny run's checkpoints never
    mix with a real model's). Returns its path."""
    raw: Any = read_yaml(config, "the config")
    if not isinstance(raw, dict):
        return config  # load_config names the problem
    out = str(raw.get("output_dir") or "output")
    tiny_out = f"{out.rstrip('/').rstrip(chr(92))}-tiny"
    model = dict(raw.get("model") or {}) if isinstance(raw.get("model"), dict) else {}
    model["path"] = f"{tiny_out}/{TINY_MODEL_DIR}"
    for key in ("transformer_path", "text_encoder_path"):  # pre-quantized folders of another model
        model.pop(key, None)
    derived = {**raw, "model": model, "output_dir": tiny_out}
    train = raw.get("train")
    if isinstance(train, dict) and train.get("resume") not in (None, "auto"):
        derived["train"] = {**train, "resume": None}
    path = config.with_name(f"{config.stem}.tiny.yaml")
    header = f"# written by `aipc-env train {config.name} --model tiny`: {config.name} on a tiny random model\n"
    atomic_write_text(path, header + yaml.safe_dump(derived, sort_keys=False, allow_unicode=True))
    return path
