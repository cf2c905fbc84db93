"""Held out by default: the split's rule (pure, deterministic, order-free), `dataset validate --heldout`, the
config's bounds (heldout_count at least 3; heldout_steps at least 2, where the scheduler still samples), the train
inputs' check, the notice of a run that will not be judged, and `recommend` writing the split."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aipc_env.dataset.split import HELDOUT_MIN, heldout_ids, split_samples
from tests.conftest import run_cli
from tests.test_dataset import local
from tests.test_engine import tiny_pipe  # noqa: F401 - the fixture, built once per run

# --- the rule ---------------------------------------------------------------------------------------------------


def test_the_rule_is_recorded_and_names_the_same_samples_in_any_order():
    ids = [f"s{i}" for i in range(8)]
    held = heldout_ids(ids, 3)
    assert len(held) == 3 and heldout_ids(list(reversed(ids)), 3) == held
    # the recorded rule: sha256 of the id, first in sort order (a known answer, not a re-derivation)
    assert held == ["s7", "s5", "s3"]  # printf s7 | sha256sum: 13d28f..., s5: 3b96fc..., s3: 41242b...
    train, out = split_samples(ids, ids, 3)
    assert sorted(out) == sorted(held) and not set(train) & set(out) and len(train) == 5


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=12), max_size=30), st.integers(0, 40))
def test_the_split_is_a_partition_of_the_samples(ids, count):
    train, held = split_samples(list(range(len(ids))), ids, count)
    assert sorted(train + held) == list(range(len(ids)))
    assert len({ids[i] for i in held}) == min(count, len(set(ids)))
    assert heldout_ids(ids, count) == heldout_ids(sorted(ids, reverse=True), count)


def test_the_rule_refuses_what_it_does_not_know():
    with pytest.raises(ValueError, match="unknown held-out rule"):
        heldout_ids(["a"], 1, rule="last")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="negative"):
        heldout_ids(["a"], -1)
    with pytest.raises(ValueError, match="one id per sample"):
        split_samples([1, 2], ["a"], 1)


# --- dataset validate --heldout N ------------------------------------------------------------------------------


@pytest.mark.parametrize(("n", "count", "valid"), [(8, 3, True), (7, 3, False), (8, 4, False), (9, 4, True)])
def test_validate_checks_the_split_leaves_enough_to_train(tmp_path, n, count, valid):
    from aipc_env.dataset.validate import MIN_SAMPLES, validate_dataset

    root = local(tmp_path / "ds", n=n)
    v = validate_dataset(root, (64, 64), heldout=count)
    assert v.valid is valid and len(v.heldout) == count and (n - count >= MIN_SAMPLES) is valid
    if not valid:
        assert any("leaves" in i and f"at least {MIN_SAMPLES}" in i for i in v.issues)
    assert not any("hold out at least 3" in w for w in v.warnings)  # the split is there: no advice to make one


@pytest.mark.parametrize(("count", "ok"), [(2, False), (3, True)])
def test_validate_holds_out_at_least_three(tmp_path, count, ok):
    from aipc_env.dataset.validate import validate_dataset

    v = validate_dataset(local(tmp_path / "ds", n=10), (64, 64), heldout=count)
    assert v.valid is ok
    assert ok or any("hold out at least 3" in i for i in v.issues)


def test_validate_refuses_an_incomplete_held_out_sample(tmp_path):
    from aipc_env.dataset.validate import validate_dataset

    root = local(tmp_path / "ds", n=8)
    held = heldout_ids([f"s{i}" for i in range(8)], 3)
    (root / "training_images" / f"{held[0]}.txt").unlink()
    v = validate_dataset(root, (64, 64), heldout=3)
    assert not v.valid and any("held-out split" in i and held[0] in i for i in v.issues)


def test_validate_cli_reports_the_split(tmp_path):
    root = local(tmp_path / "ds ü", n=8)
    ok = run_cli("dataset", "validate", str(root), "--target-size", "64", "64", "--heldout", "3")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["heldout"] == sorted(heldout_ids([f"s{i}" for i in range(8)], 3))
    for bad in ("2", "65", "x"):
        refused = run_cli("dataset", "validate", str(root), "--heldout", bad)
        assert refused.returncode == 2 and "--heldout" in refused.stderr
    without = run_cli("dataset", "validate", str(root), "--target-size", "64", "64")
    assert json.loads(without.stdout)["heldout"] == [] and "--heldout 3" in without.stdout


# --- the config's bounds and the train inputs ------------------------------------------------------------------


def _raw(tmp_path: Path, n: int = 8, **data) -> dict:
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "model_index.json").write_text("{}")
    train = local(tmp_path / "train set", n=n)
    return {
        "engine": "builtin",
        "model": {"path": str(model)},
        "output_dir": str(tmp_path / "out"),
        "data": {"datasets": [str(train)], "target_size": [64, 64], **data},
    }


@pytest.mark.parametrize(("count", "ok"), [(2, False), (3, True), (64, True), (65, False)])
def test_heldout_count_bounds(tmp_path, count, ok):
    from pydantic import ValidationError

    from aipc_env.train.config import TrainConfig

    raw = _raw(tmp_path, heldout_count=count)
    if ok:
        assert TrainConfig.model_validate(raw).data.heldout_count == count
    else:
        with pytest.raises(ValidationError, match="heldout_count"):
            TrainConfig.model_validate(raw)


def test_a_folder_and_a_count_exclude_each_other(tmp_path):
    from pydantic import ValidationError

    from aipc_env.train.config import TrainConfig

    with pytest.raises(ValidationError, match="exclude each other"):
        TrainConfig.model_validate(_raw(tmp_path, heldout_count=3, heldout=str(tmp_path)))


@pytest.mark.parametrize(("n", "ok"), [(8, True), (7, False)])
def test_train_inputs_check_the_split(tmp_path, n, ok):
    from aipc_env.errors import InputError
    from aipc_env.train.config import TrainConfig
    from aipc_env.train.inputs import check_run_inputs

    cfg = TrainConfig.model_validate(_raw(tmp_path, n=n, heldout_count=3))
    if ok:
        check_run_inputs(cfg, tmp_path / "c.yaml")
    else:
        with pytest.raises(InputError) as e:
            check_run_inputs(cfg, tmp_path / "c.yaml")
        assert e.value.key == "data.heldout_count" and "leaves 4 to train on" in str(e.value)


def test_the_cache_never_lists_a_held_out_sample(tmp_path):
    from aipc_env.train.config import TrainConfig
    from aipc_env.workers.train.cache import list_entries

    listed = {s.id for _, s in list_entries(TrainConfig.model_validate(_raw(tmp_path, heldout_count=3)))}
    held = set(heldout_ids([f"s{i}" for i in range(8)], 3))
    assert len(listed) == 5 and not listed & held
    assert len(list_entries(TrainConfig.model_validate(_raw(tmp_path)))) == 8


def test_a_run_without_held_out_samples_says_so_with_the_fix(tmp_path):
    from aipc_env.launch.hops import HeldOutPhase
    from aipc_env.train.config import TrainConfig
    from aipc_env.train.run import default_config, engine_phases, heldout_notice

    bare = TrainConfig.model_validate(_raw(tmp_path))
    notice = heldout_notice(bare)
    assert notice and "will not say whether the LoRA learned" in notice and "heldout_count: 3" in notice
    assert [p.name for p in engine_phases(bare, tmp_path / "c.yaml", "py", tmp_path / "a.yaml")] == ["cache", "fit"]
    held = TrainConfig.model_validate(_raw(tmp_path, heldout_count=3))
    assert heldout_notice(held) is None
    phases = engine_phases(held, tmp_path / "c.yaml", "py", tmp_path / "a.yaml")
    assert [p.name for p in phases] == ["cache", "fit", "judge"]
    assert phases[-1].argv == HeldOutPhase(config=tmp_path / "c.yaml").argv("py")
    assert heldout_notice(TrainConfig.model_validate(default_config(tmp_path))) is None  # the built-in judges itself


def test_the_judge_generates_the_split_at_the_training_size(tmp_path):
    from aipc_env.train.config import TrainConfig
    from aipc_env.workers.heldout_phase import heldout_request

    raw = _raw(tmp_path, heldout_count=3, heldout_steps=2)
    raw["data"]["target_size"] = [96, 160]
    cfg = TrainConfig.model_validate(raw)
    req = heldout_request(cfg, tmp_path / "lora", tmp_path / "out")
    assert req.size == (96, 160) and req.num_inference_steps == 2 and req.config is cfg
    assert sorted(s.id for s in req.samples) == sorted(heldout_ids([f"s{i}" for i in range(8)], 3))
    (tmp_path / "f").mkdir()
    folder = _raw(tmp_path / "f", heldout=str(tmp_path / "held"))
    req = heldout_request(TrainConfig.model_validate(folder), tmp_path / "lora", tmp_path / "out")
    assert req.samples is None and req.test_set == tmp_path / "held" and req.size == (64, 64)


def test_recommend_writes_a_held_out_split_and_the_smoke_config_drops_it(tmp_path):
    from tests.test_recommend import MACHINES

    out = tmp_path / "config.yaml"
    ds = local(tmp_path / "ds", n=8)
    result = run_cli(
        "recommend", "--facts", str(MACHINES / "win11_core_ultra_32gb.json"), "--dataset-path", str(ds), "--out", str(out)
    )
    assert result.returncode == 0, result.stderr
    import yaml

    cfg = yaml.safe_load(out.read_text(encoding="utf-8"))
    assert cfg["data"]["heldout_count"] == HELDOUT_MIN == 3
    assert run_cli("dataset", "validate", str(ds), "--heldout", str(cfg["data"]["heldout_count"])).returncode in (0, 1)


# --- heldout_steps: at least 2, where the scheduler samples -----------------------------------------------------


@pytest.mark.parametrize(("steps", "ok"), [(1, False), (2, True)])
def test_heldout_steps_bound_is_where_the_scheduler_samples(tmp_path, steps, ok):
    """At 1 step, Qwen-Image's scheduler (shift_terminal) returns a NaN timestep; at 2 every timestep is finite.
    The config refuses 1 and accepts 2."""
    import numpy as np
    import torch
    from diffusers.pipelines.qwenimage.pipeline_qwenimage_edit import calculate_shift, retrieve_timesteps
    from pydantic import ValidationError

    from aipc_env.train.config import HELDOUT_STEPS_MIN, TrainConfig
    from aipc_env.workers.train.tinyedit import scheduler_for_tiny

    scheduler = scheduler_for_tiny()
    assert scheduler.config.shift_terminal  # the Qwen-Image scheduler's setting that makes one step NaN
    sigmas = np.linspace(1.0, 1 / steps, steps).tolist()  # the pipeline's own schedule
    with np.errstate(invalid="ignore", divide="ignore"):
        timesteps, _ = retrieve_timesteps(scheduler, steps, "cpu", sigmas=sigmas, mu=calculate_shift(16, 256, 8192, 0.5, 0.9))
    assert bool(torch.isfinite(timesteps).all()) is ok
    assert (steps >= HELDOUT_STEPS_MIN) is ok
    raw = _raw(tmp_path, heldout_steps=steps)
    if ok:
        TrainConfig.model_validate(raw)
    else:
        with pytest.raises(ValidationError, match="heldout_steps"):
            TrainConfig.model_validate(raw)


# --- recommend --out on 8 pairs, then train: the run judges its held-out split -----------------------------------


@pytest.mark.slow
def test_recommend_then_train_judges_the_held_out_split(tiny_pipe, tmp_path):  # noqa: F811 - pytest fixture injection
    """`recommend --out config.yaml` on a dataset of 8 pairs holds 3 out; `train config.yaml` (the tiny pipeline, a
    few steps) trains on the other 5 and ends with the judge phase on the 3, rendered at the training size (64x64,
    though the controls are 96x96), every baseline in fit_summary.json."""
    import numpy as np
    import yaml
    from PIL import Image

    from tests.conftest import MACHINES

    ds = local(tmp_path / "pairs & co", n=8, size=(96, 96))
    for i in range(8):
        rng = np.random.default_rng(i)
        Image.fromarray(rng.integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(ds / "training_images" / f"s{i}.png")
    config, out = tmp_path / "config.yaml", tmp_path / "out run"
    rec = run_cli(
        "recommend",
        *("--facts", str(MACHINES / "win11_core_ultra_32gb.json"), "--dataset-path", str(ds)),
        *("--model-path", str(tiny_pipe), "--output-dir", str(out), "--out", str(config)),
    )
    assert rec.returncode == 0, rec.stderr
    raw = yaml.safe_load(config.read_text(encoding="utf-8"))
    assert raw["data"]["heldout_count"] == 3
    # what a 64 px run of the tiny pipeline on this CPU needs; the held-out split stays as recommend wrote it
    raw["model"].pop("text_encoder_path")
    raw["data"].update(target_size=[64, 64], num_workers=0, heldout_steps=2)
    raw["train"].update(max_train_steps=4, gradient_accumulation_steps=1, warmup_steps=0, checkpointing_steps=4)
    raw.update(device="cpu", cache_dir=str(tmp_path / "cache"))
    config.write_text(yaml.safe_dump(raw), encoding="utf-8")
    result = run_cli("train", str(config), timeout=900)
    assert result.returncode in (0, 1), result.stdout[-3000:] + result.stderr[-3000:]
    assert "no held-out samples" not in result.stdout + result.stderr
    verdict = json.loads((out / "fit_summary.json").read_text())["heldout"]
    held = heldout_ids([f"s{i}" for i in range(8)], 3)
    assert sorted(s["id"] for s in verdict["samples"]) == sorted(held)
    assert verdict["copy_mean"] > 0 and verdict["mean_target_mean"] is not None and verdict["base_mean"] > 0
    assert result.returncode == (1 if verdict["outcome"] == "not_learned" else 0)
    manifest = json.loads((out / "heldout" / "manifest.json").read_text())
    assert all(s["size"] == [64, 64] for s in manifest["samples"])  # the training size, not the controls' 96
    lines = [ln for ln in result.stdout.splitlines() if ln.startswith("judge: ")]
    assert any("held-out distance to the targets (3 samples" in ln for ln in lines), result.stdout[-3000:]
    # the fit never saw the held-out samples: 5 cached entries
    assert "cache: 5 written, 0 already cached, 0 redone; 5 entries" in result.stdout, result.stdout[-3000:]
    cached = {line.split()[1] for line in result.stdout.splitlines() if line.startswith("cache: s")}
    assert cached and not cached & set(held), cached
