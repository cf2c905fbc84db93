"""Aspect-ratio buckets and the control area: a dataset of mixed aspect ratios is cached without squashing (each
target in a bucket of about target_size's area, each control at data.control_pixels by the pipeline's rule), batches
come from one bucket, the bucket counts are printed and recorded; data.control_pixels is bounded and warned about."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from tests.conftest import built_once, run_cli

# --- the bucket rule ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("wh", "expected"), [((200, 300), (512, 768)), ((1920, 1080), (864, 480)), ((640, 640), (640, 640))])
def test_buckets_keep_the_aspect_ratio_at_about_the_target_area(wh, expected):
    from aipc_env.workers.train.conditioning import bucket_size

    got = bucket_size(wh, 640 * 640)
    assert got == expected
    assert got[0] % 32 == 0 and got[1] % 32 == 0


@settings(max_examples=200, deadline=None)
@given(w=st.integers(16, 8000), h=st.integers(16, 8000), area=st.integers(64 * 64, 2048 * 2048))
def test_bucket_size_is_the_pipelines_rounding_of_the_aspect(w, h, area):
    """Any picture: sides multiples of 32, area near the target's, aspect kept up to the 32-pixel rounding."""
    from diffusers.pipelines.qwenimage.pipeline_qwenimage_edit_plus import calculate_dimensions

    from aipc_env.workers.train.conditioning import bucket_size

    bw, bh = bucket_size((w, h), area)
    assert bw % 32 == 0 and bh % 32 == 0 and bw >= 32 and bh >= 32
    cw, ch = calculate_dimensions(area, w / h)
    assert (bw, bh) == (max(32, cw), max(32, ch))  # the pipeline's own rule, floored at one 32-pixel cell


def test_batches_come_from_one_bucket_and_cover_every_sample_each_epoch():
    from aipc_env.workers.train.fit import _positions, bucket_groups, bucket_positions

    shapes = [[(1, 20, 30), (1, 64, 64)] if i % 3 else [(1, 30, 20), (1, 64, 64)] for i in range(11)]
    groups = bucket_groups(shapes, 11)
    assert sorted(len(g) for g in groups) == [4, 7]
    per_epoch = 3 + 2  # ceil(7/3) + ceil(4/3) with batch 3
    seen: set[int] = set()
    for step in range(per_epoch):
        batch = bucket_positions(step, 3, groups, seed=5)
        assert len(batch) == 3 and len({tuple(map(tuple, shapes[i])) for i in batch}) == 1
        seen |= set(batch)
    assert seen == set(range(11))
    assert [bucket_positions(s, 3, groups, 5) for s in range(9)] == [bucket_positions(s, 3, groups, 5) for s in range(9)]
    # one bucket (or an index without shapes): the plain per-epoch permutation, as before buckets
    one = bucket_groups(None, 6)
    assert [bucket_positions(s, 2, one, 7) for s in range(6)] == [_positions(s, 2, 6, 7) for s in range(6)]


# --- data.control_pixels: bounds and warning --------------------------------------------------------------------


def _cfg(**data):
    from aipc_env.train.config import TrainConfig

    return TrainConfig.model_validate({"model": {"path": "/m"}, "data": {"datasets": ["/d"], **data}, "output_dir": "/o"})


@pytest.mark.parametrize(
    ("value", "ok"),
    [(64 * 64 - 1, False), (64 * 64, True), (512 * 512, True), (1024 * 1024, True), (1024 * 1024 + 1, False), (0, False)],
)
def test_control_pixels_bounds(value, ok):
    from pydantic import ValidationError

    if ok:
        assert _cfg(control_pixels=value).control_area() == value
    else:
        with pytest.raises(ValidationError, match="control_pixels"):
            _cfg(control_pixels=value)


def test_control_area_defaults_to_the_pipelines_and_the_builtin_model_refuses_one():
    from pydantic import ValidationError

    from aipc_env.train.config import TrainConfig

    assert _cfg().control_area() == 1024 * 1024
    builtin = {"model": {"path": "builtin:tiny"}, "output_dir": "/o"}
    assert (
        TrainConfig.model_validate(
            {**builtin, "data": {"datasets": ["builtin:synthetic"], "target_size": [64, 64]}}
        ).control_area()
        == 64 * 64
    )
    with pytest.raises(ValidationError, match="builtin:tiny"):
        TrainConfig.model_validate({**builtin, "data": {"datasets": ["builtin:synthetic"], "control_pixels": 4096}})


def test_a_reduced_control_area_is_warned_with_its_cost():
    from aipc_env.workers.train.conditioning import control_cost_warning

    assert control_cost_warning(1024 * 1024) is None
    text = control_cost_warning(1024 * 1024 - 1) or ""
    assert "inference" in text
    text = control_cost_warning(512 * 512) or ""
    assert "25%" in text and "judge" in text and "inference" in text


# --- `aipc-env train` on 2:3 and 16:9 pictures ------------------------------------------------------------------


def _picture(path: Path, wh: tuple[int, int], seed: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.random.default_rng(seed).integers(0, 255, (wh[1], wh[0], 3), dtype=np.uint8)).save(path)


@pytest.mark.slow
def test_train_caches_mixed_aspect_ratios_without_squashing(tmp_path_factory, tmp_path):
    from aipc_env.workers.train.tinypipe import build_tiny_pipeline

    model = built_once(tmp_path_factory, "tiny-pipe-edit", lambda folder: build_tiny_pipeline(folder / "edit")) / "edit"
    data = tmp_path / "mixed ü"
    sizes = {"portrait0": (200, 300), "portrait1": (400, 600), "wide0": (320, 180), "wide1": (640, 360), "wide2": (480, 270)}
    for i, (stem, wh) in enumerate(sizes.items()):
        _picture(data / "training_images" / f"{stem}.png", wh, i)
        (data / "training_images" / f"{stem}.txt").write_text("Make the sky red")
        _picture(data / "control_images" / f"{stem}.png", wh, 100 + i)
    cfg = {
        "engine": "builtin",
        "model": {"path": str(model)},
        "lora": {"rank": 4, "alpha": 4},
        "data": {
            "datasets": [str(data)],
            "target_size": [192, 288],
            "batch_size": 2,
            "num_workers": 0,
            "control_pixels": 128 * 128,
        },
        "train": {"max_train_steps": 2, "gradient_accumulation_steps": 1, "checkpointing_steps": 10},
        "output_dir": str(tmp_path / "run"),
        "device": "cpu",
    }
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(cfg))
    result = run_cli("train", str(config), timeout=900)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    # printed: the reduced control area's cost, then the buckets with their counts (target | control, pixels)
    assert "WARNING: data.control_pixels 16384" in out
    assert "5 samples in 2 aspect-ratio bucket(s)" in out
    assert "pipeline_control_pixels(pipe, 16384)" in out  # how to edit with the LoRA as it was trained
    assert "192x288 | 96x160: 2" in out  # 2:3 targets and controls keep 2:3
    assert "320x192 | 160x96: 3" in out  # 16:9 (to the 32-pixel rounding at this small area), not squashed to 2:3
    index = json.loads((tmp_path / "run" / "cache" / "index.json").read_text())
    assert index["buckets"] == {"192x288 | 96x160": 2, "320x192 | 160x96": 3} and index["control_pixels"] == 128 * 128
    for key, shapes in zip(index["keys"], index["shapes"]):
        assert shapes[0] in ([1, 18, 12], [1, 12, 20]), (key, shapes)


def test_the_original_edit_model_refuses_a_sample_with_two_controls(tmp_path):
    from aipc_env.dataset import Sample
    from aipc_env.errors import InputError
    from aipc_env.workers.train.cache import refuse_extra_controls

    one = Sample(id="one", target=b"t", controls=[b"c"])
    two = Sample(id="two", target=b"t", controls=[b"c", b"d"], where="two.png")
    refuse_extra_controls("edit", [one], tmp_path)
    refuse_extra_controls("edit-plus", [one, two], tmp_path)
    with pytest.raises(InputError, match="two has 2 control images") as err:
        refuse_extra_controls("edit", [one, two], tmp_path)
    assert "Edit-Plus" in (err.value.fix or "")


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(
    shapes=st.one_of(
        _json,
        st.lists(st.lists(st.tuples(st.integers(-2, 40), st.integers(-2, 40), st.integers(-2, 40)), max_size=3), max_size=4),
    ),
    keys=st.lists(st.sampled_from(["a" * 32, "b" * 32, "c" * 32, "../x", "A" * 32]), max_size=4),
    buckets=_json,
)
def test_a_hostile_cache_index_is_read_or_named(tmp_path_factory, shapes, keys, buckets):
    """The index the cache wrote is read back as untrusted: shapes, keys and buckets of any JSON give the entries
    or an AipcError naming the file, never a traceback."""
    from aipc_env.errors import AipcError
    from aipc_env.workers.train.cache import entry_path, load_cache_index

    folder = tmp_path_factory.mktemp("index")
    cfg = _cfg().model_copy(update={"cache_dir": str(folder)})
    for key in ("a" * 32, "b" * 32):
        entry_path(folder, key).write_bytes(b"x")
    (folder / "index.json").write_text(json.dumps({"schema_version": 1, "keys": keys, "shapes": shapes, "buckets": buckets}))
    try:
        paths, index = load_cache_index(cfg)
    except AipcError as exc:
        assert "index.json" in str(exc.path) or str(folder) in str(exc.path)
        return
    assert [p.parent for p in paths] == [folder] * len(keys)
    assert index.shapes is None or len(index.shapes) == len(paths)


def test_a_cache_index_with_shapes_loads_and_a_path_key_is_refused(tmp_path):
    from aipc_env.errors import AipcError
    from aipc_env.workers.train.cache import entry_path, load_cache_index

    cfg = _cfg().model_copy(update={"cache_dir": str(tmp_path)})
    entry_path(tmp_path, "a" * 32).write_bytes(b"x")
    index = {"schema_version": 1, "keys": ["a" * 32], "shapes": [[[1, 2, 3], [1, 4, 4]]], "buckets": {"48x32 | 64x64": 1}}
    (tmp_path / "index.json").write_text(json.dumps(index))
    paths, loaded = load_cache_index(cfg)
    assert paths == [entry_path(tmp_path, "a" * 32)] and loaded.shapes == [[(1, 2, 3), (1, 4, 4)]]
    (tmp_path / "index.json").write_text(json.dumps({**index, "shapes": [[[1, 2, 3]], [[1, 2, 3]]]}))
    with pytest.raises(AipcError, match="shapes do not match"):
        load_cache_index(cfg)
    (tmp_path / "index.json").write_text(json.dumps({**index, "keys": ["../" + "a" * 29]}))
    with pytest.raises(AipcError, match="keys"):
        load_cache_index(cfg)
