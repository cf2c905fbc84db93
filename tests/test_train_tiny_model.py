"""`aipc-env train CONFIG --model tiny`: your config and dataset on a tiny random Qwen-Image-Edit in the real
diffusers layout, built by the run's first phase (no download). It says up front what it proves and what it cannot,
leaves your config as it was, keeps the tiny run apart from a real one, and ends with a LoRA diffusers loads."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from aipc_env.errors import ExitCode
from tests.conftest import ROOT, run_cli

CONFIG = {
    "schema_version": 1,
    "engine": "builtin",
    "model": {"path": "models/Qwen-Image-Edit-2511", "quantize": "nf4"},
    "data": {"datasets": ["my-dataset"], "target_size": [64, 64], "batch_size": 2, "num_workers": 0},
    "train": {"max_train_steps": 2, "checkpointing_steps": 2},
    "output_dir": "runs/first",
    "device": "cpu",
}
"""A user's config before the model is downloaded: model.path names a folder that does not exist yet."""


def _user_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "my work (x86)"
    folder.mkdir()
    sys.path.insert(0, str(ROOT / "docs"))
    try:
        from gen_outputs import _write_dataset
    finally:
        sys.path.remove(str(ROOT / "docs"))
    _write_dataset(folder / "my-dataset")
    (folder / "config.yaml").write_text(yaml.safe_dump(CONFIG, sort_keys=False), encoding="utf-8")
    return folder


def test_without_the_model_the_refusal_names_the_download_and_the_tiny_model(tmp_path: Path) -> None:
    folder = _user_folder(tmp_path)
    result = run_cli("train", "config.yaml", "--dry-run", cwd=folder)
    assert result.returncode == ExitCode.USAGE
    assert "huggingface-cli download Qwen/Qwen-Image-Edit-2511 --local-dir" in result.stderr
    assert "--model tiny" in result.stderr


def test_the_plan_builds_the_tiny_model_first_and_leaves_the_config_alone(tmp_path: Path) -> None:
    folder = _user_folder(tmp_path)
    before = (folder / "config.yaml").read_bytes()
    result = run_cli("train", "config.yaml", "--model", "tiny", "--dry-run", cwd=folder)
    assert result.returncode == ExitCode.OK, result.stderr
    assert "it cannot show that a model learns your edit" in result.stdout
    assert (folder / "config.yaml").read_bytes() == before
    derived = yaml.safe_load((folder / "config.tiny.yaml").read_text(encoding="utf-8"))
    assert derived["output_dir"] == "runs/first-tiny" and derived["model"]["path"] == "runs/first-tiny/tiny-model"
    assert derived["data"] == CONFIG["data"]
    plan = json.loads((folder / "runs" / "first-tiny" / "launch.json").read_text(encoding="utf-8"))
    assert [p["name"] for p in plan["phases"]] == ["tiny-model", "cache", "fit"]
    assert plan["phases"][0]["argv"][-1] == str(folder / "runs" / "first-tiny" / "tiny-model")


def test_without_a_config_it_says_what_to_give() -> None:
    result = run_cli("train", "--model", "tiny")
    assert result.returncode == ExitCode.USAGE
    assert "give the config" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.slow
def test_your_dataset_trains_on_the_tiny_model_end_to_end(tmp_path: Path) -> None:
    folder = _user_folder(tmp_path)
    result = run_cli("train", "config.yaml", "--model", "tiny", "--env", sys.prefix, cwd=folder, timeout=900)
    out = result.stdout + result.stderr
    assert result.returncode == ExitCode.OK, out[-4000:]
    run = folder / "runs" / "first-tiny"
    index = json.loads((run / "tiny-model" / "model_index.json").read_text(encoding="utf-8"))
    assert index["_class_name"] == "QwenImageEditPipeline"  # the real diffusers layout
    assert {"transformer", "text_encoder", "vae", "tokenizer", "processor", "scheduler"} <= set(index)
    assert "tiny-model: building" in out and "cache: 6 written" in out
    assert "your data went through the whole path" in out

    from diffusers import QwenImageEditPipeline

    from aipc_env.workers.train.compat import processor_without_video

    processor_without_video()  # as the engine loads it: transformers 5 asks an image-only processor for video
    pipe = QwenImageEditPipeline.from_pretrained(str(run / "tiny-model"))
    pipe.load_lora_weights(str(run / "lora"))  # the LoRA loads where a person uses it
    assert any("lora" in name for name, _ in pipe.transformer.named_parameters())
