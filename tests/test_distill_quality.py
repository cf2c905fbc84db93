"""G3 in quality mode on the trained tiny teacher (builtin:tiny-qwen-image-2.1-trained), in-process: the teacher is
trained once per test run (tests/conftest.py built_once) into a cache folder the built-in name resolves to, the
student trains on its trajectories, and G3 judges it on the latent distance to teacher@8: a trained student passes,
the same student turned against the teacher fails by name. The teacher build dominates its time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from aipc_env.distill.config import default_distill_config, load_distill_config
from tests.conftest import built_once

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def teacher_cache(tmp_path_factory) -> Path:
    """A per-user cache folder holding the trained tiny teacher, built once per test run."""
    from aipc_env.distill.shapes import TRAINED21_VERSION
    from aipc_env.workers.distill.models import ensure_trained_tiny

    def build(folder: Path) -> None:
        ensure_trained_tiny(folder / "models" / f"tiny-qwen-image-2.1-trained-v{TRAINED21_VERSION}", log=lambda m: None)

    return built_once(tmp_path_factory, "tiny21-trained", build)


@pytest.fixture(scope="module")
def quiet():
    from aipc_env.workers.distill.worker import _quiet

    _quiet()


def _config(out: Path) -> Path:
    """The tiny-trained profile as shipped (its row in docs/distillation.md: endpoint weighting, lr 3e-4, no
    on-policy phase): fewer trajectories, steps or eval pairs made the verdict hang on a few outlier pairs."""
    out.mkdir(parents=True)
    (out / "distill.yaml").write_text(yaml.safe_dump(default_distill_config(out, profile="tiny-trained")))
    return out / "distill.yaml"


def test_g3_quality_mode_on_the_trained_tiny_teacher(teacher_cache, tmp_path, monkeypatch, quiet):
    import torch
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    from aipc_env.workers.distill.models import is_tiny_trained, model_dir
    from aipc_env.workers.distill.worker import run_stage

    monkeypatch.setenv("AIPC_ENV_CACHE_DIR", str(teacher_cache))
    cfg = load_distill_config(_config(tmp_path / "run"))
    built: list[str] = []
    assert is_tiny_trained(model_dir(cfg, log=built.append)) and built == []  # the cached teacher, not rebuilt
    mark = json.loads((model_dir(cfg) / "aipc_tiny.json").read_text())["trained"]
    assert mark["teacher8_to_data"] <= 0.1 * mark["untrained8_to_data"]
    for stage in ("trajectories", "train"):
        verdict = run_stage(cfg, stage, frozenset(), log=lambda m: None)
        assert verdict.passed, verdict
    g3 = run_stage(cfg, "g3", frozenset(), log=lambda m: None)
    checks = {c.name: c for c in g3.checks}
    assert g3.mode == "quality" and g3.metrics["metric"] == "latent_mse", g3
    assert g3.status == "pass" and checks["student-beats-naive"].ok, g3.metrics["comparison"]
    stats = g3.metrics["statistics"]
    assert stats["pairs"] == 64 and stats["student_mean"] <= stats["naive_mean"] - 0.0005
    assert "the trained tiny teacher" in g3.metrics["mode_reason"]

    lora = tmp_path / "run" / "lora" / "pytorch_lora_weights.safetensors"
    with safe_open(str(lora), framework="pt") as fh:
        meta = fh.metadata()
    turned = {k: -3 * v if "lora_B" in k else v for k, v in load_file(str(lora)).items()}  # away from the teacher
    save_file(turned, str(lora), metadata=meta)
    g3 = run_stage(cfg, "g3", frozenset(), log=lambda m: None)
    failed = {c.name: c.error for c in g3.checks if not c.ok}
    assert g3.status == "fail" and g3.mode == "quality"
    assert failed == {"student-beats-naive": "student-not-better-than-naive"}, g3.metrics["comparison"]
    assert torch.isfinite(torch.tensor(g3.metrics["statistics"]["student_mean"]))
