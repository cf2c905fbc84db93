"""The cache conditions a sample exactly as the user's diffusers pipeline does at inference.

The real QwenImageEditPipeline and QwenImageEditPlusPipeline (diffusers, tiny random weights built offline) run on
the same images and prompts as the cache's encoder; hooks on their transformer and text encoder catch what the
models receive. Control latents, prompt embeddings and mask, and `img_shapes` must be bit-identical (CPU, fp32),
the stored entry must be exactly their fp16 rounding (the cache's storage format), and the text encoder must see
the same VL image pixels. Aspect ratios 2:3 and 16:9, one and two controls, sizes that are not multiples of 16.

The pipelines' own 1024x1024 control area is used in the `slow` cases (one Edit, one Plus with two controls: each
1 MP encode of the tiny VAE and text encoder takes ~25 s on two CPU threads). The fast cases run the pipeline
under `pipeline_control_pixels` at a reduced area, the path the judge and compare take when data.control_pixels
is reduced: they prove that path and the cache agree at any area.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from tests.conftest import built_once

PROMPT = "Make the sky red and add a small boat"


@pytest.fixture(scope="module")
def pipes(tmp_path_factory) -> dict[str, Path]:
    from aipc_env.workers.train.tinypipe import build_tiny_pipeline

    return {
        kind: built_once(
            tmp_path_factory, f"tiny-pipe-{kind}", lambda folder, k=kind: build_tiny_pipeline(folder / k, plus=k == "plus")
        )
        / kind
        for kind in ("edit", "plus")
    }


def _load(path: Path) -> Any:
    import torch
    from diffusers import DiffusionPipeline

    from aipc_env.workers.train.compat import processor_without_video

    processor_without_video()
    pipe = DiffusionPipeline.from_pretrained(str(path), torch_dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def _image(w: int, h: int, seed: int) -> Image.Image:
    return Image.fromarray(np.random.default_rng(seed).integers(0, 255, (h, w, 3), dtype=np.uint8))


class _Seen(Exception):
    """Raised by the transformer hook once it has what the pipeline gives the model (the rest is not needed)."""


def _pipeline_inputs(pipe: Any, controls: list[Image.Image], plus: bool) -> dict[str, Any]:
    """What the real pipeline gives its text encoder and transformer for `controls` and PROMPT."""
    import torch

    seen: dict[str, Any] = {}

    def on_text(_m: Any, _a: Any, kwargs: dict[str, Any]) -> None:
        seen.setdefault("pixel_values", kwargs.get("pixel_values"))
        seen.setdefault("image_grid_thw", kwargs.get("image_grid_thw"))

    def on_transformer(_m: Any, _a: Any, kwargs: dict[str, Any]) -> None:
        seen["transformer"] = kwargs
        raise _Seen

    hooks = [
        pipe.text_encoder.register_forward_pre_hook(on_text, with_kwargs=True),
        pipe.transformer.register_forward_pre_hook(on_transformer, with_kwargs=True),
    ]
    try:
        pipe(
            image=controls if plus else controls[0],
            prompt=PROMPT,
            height=64,
            width=96,
            num_inference_steps=2,
            true_cfg_scale=1.0,
            generator=torch.Generator().manual_seed(0),
            output_type="latent",
        )
    except _Seen:
        pass
    finally:
        for h in hooks:
            h.remove()
    return seen


def _cache_entry(
    pipe: Any, controls: list[Image.Image], tmp_path: Path, plus: bool, control_pixels: int, monkeypatch: Any
) -> tuple[Any, Any, dict]:
    """The cache's entry for the same sample, the fp32 conditioning it was made from (a spy on the cache's call of
    encode_conditioning that calls through), and what its text encoder saw."""
    import torch

    from aipc_env.dataset import Sample
    from aipc_env.workers.train import conditioning
    from aipc_env.workers.train.cache import _encode_sample

    made: list[Any] = []
    real = conditioning.encode_conditioning

    def spy(*args: Any, **kwargs: Any) -> Any:
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(conditioning, "encode_conditioning", spy)

    paths = []
    for i, c in enumerate(controls):
        paths.append(tmp_path / f"control {i}.png")
        c.save(paths[-1])
    target = tmp_path / "target.png"
    _image(120, 90, 99).save(target)
    seen: dict[str, Any] = {}

    def on_text(_m: Any, _a: Any, kwargs: dict[str, Any]) -> None:
        seen.setdefault("pixel_values", kwargs.get("pixel_values"))
        seen.setdefault("image_grid_thw", kwargs.get("image_grid_thw"))

    hook = pipe.text_encoder.register_forward_pre_hook(on_text, with_kwargs=True)
    try:
        entry = _encode_sample(
            pipe,
            Sample(id="s", target=target, controls=list(paths), prompt=PROMPT),
            96 * 64,
            control_pixels,
            torch.device("cpu"),
            "edit-plus" if plus else "edit",
        )
    finally:
        hook.remove()
    (cond,) = made
    return entry, cond, seen


def _assert_parity(
    pipe: Any, controls: list[Image.Image], tmp_path: Path, plus: bool, control_pixels: int, monkeypatch: Any
) -> None:
    import torch

    from aipc_env.workers.train.conditioning import control_size, latent_grid, pipeline_control_pixels

    with pipeline_control_pixels(pipe, control_pixels):
        ref = _pipeline_inputs(pipe, controls, plus)
    kw = ref["transformer"]
    expected_grids = [latent_grid(control_size(c.size, control_pixels)) for c in controls]
    assert kw["img_shapes"][0][1:] == expected_grids  # each control keeps its own aspect-ratio grid
    n_target = kw["img_shapes"][0][0][1] * kw["img_shapes"][0][0][2]
    ref_controls = kw["hidden_states"][:, n_target:]
    entry, cond, text_seen = _cache_entry(pipe, controls, tmp_path, plus, control_pixels, monkeypatch)
    # the cache's conditioning, bit-identical to what the pipeline's transformer receives
    assert torch.equal(torch.cat(cond.controls, dim=1), ref_controls)
    assert cond.shapes == kw["img_shapes"][0][1:]
    assert torch.equal(cond.prompt_embeds, kw["encoder_hidden_states"])
    mask = kw["encoder_hidden_states_mask"]
    assert (cond.prompt_mask is None and mask is None) or torch.equal(cond.prompt_mask, mask)
    # the cache's stored entry: exactly the fp16 rounding of the same tensors, the shapes after its target's
    sizes = [c.shape[1] for c in cond.controls]
    for stored, ours in zip(entry["controls"], torch.split(ref_controls[0], sizes)):
        assert torch.equal(stored, ours.half())
    assert torch.equal(entry["prompt_embeds"], kw["encoder_hidden_states"][0].half())
    assert entry["shapes"][1:] == kw["img_shapes"][0][1:]
    assert entry["shapes"][0] == (1, 64 // 16, 96 // 16)  # the 4:3 target in its bucket of 96x64's area
    # the text encoder saw the same VL image(s)
    assert torch.equal(text_seen["pixel_values"], ref["pixel_values"])
    assert torch.equal(text_seen["image_grid_thw"], ref["image_grid_thw"])


# --- the pipelines' own area (1024x1024): slow, one case per pipeline ---------------------------------------------


@pytest.mark.slow
def test_edit_pipeline_parity_at_its_own_area_2_3(pipes, tmp_path, monkeypatch):
    from aipc_env.train.areas import PIPELINE_CONTROL_PIXELS

    _assert_parity(_load(pipes["edit"]), [_image(200, 300, 1)], tmp_path, False, PIPELINE_CONTROL_PIXELS, monkeypatch)


@pytest.mark.slow
def test_plus_pipeline_parity_at_its_own_area_two_controls_16_9_and_odd_2_3(pipes, tmp_path, monkeypatch):
    from aipc_env.train.areas import PIPELINE_CONTROL_PIXELS

    controls = [_image(320, 180, 2), _image(203, 305, 3)]  # 16:9, and ~2:3 of sides not multiples of 16
    _assert_parity(_load(pipes["plus"]), controls, tmp_path, True, PIPELINE_CONTROL_PIXELS, monkeypatch)


# --- a reduced data.control_pixels: the pipeline under pipeline_control_pixels, every case ------------------------


@pytest.mark.parametrize(
    ("sizes", "plus"),
    [
        ([(200, 300)], False),  # 2:3
        ([(321, 181)], False),  # ~16:9, odd sides
        ([(200, 300)], True),
        ([(320, 180), (203, 305)], True),  # two controls of different aspect ratios
    ],
)
def test_parity_at_a_reduced_control_area(pipes, tmp_path, sizes, plus, monkeypatch):
    controls = [_image(w, h, i) for i, (w, h) in enumerate(sizes)]
    _assert_parity(_load(pipes["plus" if plus else "edit"]), controls, tmp_path, plus, 128 * 128, monkeypatch)


def test_the_rule_is_the_pipelines(pipes):
    """The constants the config validates against are diffusers' own; the size rule is the pipeline module's."""
    from diffusers.pipelines.qwenimage import pipeline_qwenimage_edit as edit
    from diffusers.pipelines.qwenimage import pipeline_qwenimage_edit_plus as plus

    from aipc_env.workers.train import conditioning as c

    assert c.PIPELINE_CONTROL_PIXELS == plus.VAE_IMAGE_SIZE and c.PIPELINE_VL_PIXELS == plus.CONDITION_IMAGE_SIZE
    for wh in [(200, 300), (1920, 1080), (203, 305), (64, 64)]:
        assert c.control_size(wh, c.PIPELINE_CONTROL_PIXELS, "edit") == edit.calculate_dimensions(1024 * 1024, wh[0] / wh[1])[:2]
        assert c.vl_size(wh, "edit-plus") == plus.calculate_dimensions(384 * 384, wh[0] / wh[1])
        assert c.vl_size(wh, "edit") == c.control_size(wh, c.PIPELINE_CONTROL_PIXELS, "edit")


def test_pipeline_control_pixels_restores_the_pipeline(pipes):
    from diffusers.pipelines.qwenimage import pipeline_qwenimage_edit as edit
    from diffusers.pipelines.qwenimage import pipeline_qwenimage_edit_plus as plus

    from aipc_env.workers.train.conditioning import pipeline_control_pixels

    before = (edit.calculate_dimensions, plus.VAE_IMAGE_SIZE)
    for kind in ("edit", "plus"):
        pipe = _load(pipes[kind])
        with pytest.raises(RuntimeError), pipeline_control_pixels(pipe, 64 * 64):
            raise RuntimeError("a failed generation")
        assert (edit.calculate_dimensions, plus.VAE_IMAGE_SIZE) == before


def test_the_held_out_sampler_takes_each_controls_own_grid(pipes):
    """sample_edit_latents with one grid per control returns the Plus pipeline's latents bit for bit for two
    controls of different aspect ratios (at a reduced area, through pipeline_control_pixels): the built-in check's
    control grids come from the conditioning rule, not from the target."""
    import torch

    from aipc_env.workers.train.conditioning import pipeline_control_pixels
    from aipc_env.workers.train.sampling import sample_edit_latents

    pipe = _load(pipes["plus"])
    seen: dict[str, Any] = {}
    hook = pipe.transformer.register_forward_pre_hook(lambda _m, _a, kw: seen.setdefault("kw", kw) and None, with_kwargs=True)
    try:
        with pipeline_control_pixels(pipe, 128 * 128):
            expected = pipe(
                image=[_image(320, 180, 0), _image(203, 305, 1)],
                prompt=PROMPT,
                height=64,
                width=96,
                num_inference_steps=3,
                true_cfg_scale=1.0,
                generator=torch.Generator().manual_seed(4),
                output_type="latent",
            ).images
    finally:
        hook.remove()
    kw = seen["kw"]
    grids = [(2 * h, 2 * w) for _, h, w in kw["img_shapes"][0][1:]]
    assert grids[0] != grids[1] and grids[0] != (8, 12)  # each control's own grid, neither the target's
    got = sample_edit_latents(
        pipe.transformer,
        pipe.scheduler,
        controls=kw["hidden_states"][:, expected.shape[1] :],
        prompt_embeds=kw["encoder_hidden_states"],
        prompt_mask=kw["encoder_hidden_states_mask"],
        target_hw=(8, 12),
        control_hw=grids,
        steps=3,
        generator=torch.Generator().manual_seed(4),
    )
    assert torch.equal(got, expected)
