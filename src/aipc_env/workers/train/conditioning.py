"""How a Qwen-Image-Edit pipeline conditions an edit at inference: the one home of that rule for training, the
built-in held-out check and every sampler that judges a LoRA.

diffusers 0.42.1 (/work/shared/facts/conditioning.md has the line numbers):
- QwenImageEditPipeline ("edit"): the control is resized, aspect kept, to about 1024x1024 pixels
  (`calculate_dimensions(1024 * 1024, w / h)`, sides rounded to 32); that one image feeds the VAE and the
  Qwen2.5-VL text encoder. The pipeline takes one control.
- QwenImageEditPlusPipeline ("edit-plus", 2509/2511): each control goes to the VAE at about `VAE_IMAGE_SIZE`
  (1024x1024) pixels and to the text encoder at about `CONDITION_IMAGE_SIZE` (384x384), both aspect kept and
  rounded to 32; `img_shapes` holds the target's grid then each control's own.
Neither pipeline has an argument for those sizes. The functions here call the pipeline's own pieces
(`calculate_dimensions` of its module, its `image_processor`, `encode_prompt`, `prepare_latents`) in the pipeline's
order; tests/test_conditioning_parity.py runs the real pipelines beside them and finds the transformer's inputs
bit-identical.

`data.control_pixels` below the pipeline's area is a memory choice: `pipeline_control_pixels` makes a loaded
pipeline condition at that area too, so a LoRA is judged the way it was trained.

The areas are train/areas.py; the size functions are pure; the encoders import torch/diffusers lazily (training side only).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal

from aipc_env.train.areas import PIPELINE_CONTROL_PIXELS, PIPELINE_VL_PIXELS

if TYPE_CHECKING:
    import torch
    from PIL import Image

__all__ = [
    "Conditioning",
    "Variant",
    "bucket_size",
    "control_cost_warning",
    "control_size",
    "encode_conditioning",
    "encode_target",
    "latent_grid",
    "pipeline_control_pixels",
    "variant_of",
    "vl_size",
]

Variant = Literal["edit", "edit-plus"]


_VARIANTS: Final[dict[str, Variant]] = {"QwenImageEditPipeline": "edit", "QwenImageEditPlusPipeline": "edit-plus"}


def variant_of(class_name: str) -> Variant:
    """The variant of a diffusers pipeline class name (model_index.json's `_class_name`)."""
    try:
        return _VARIANTS[class_name]
    except KeyError:
        raise ValueError(
            f"{class_name or 'no pipeline class'} is not a Qwen-Image-Edit pipeline ({', '.join(_VARIANTS)})"
        ) from None


def _calculate_dimensions(variant: Variant, area: int, ratio: float) -> tuple[int, int]:
    """(width, height): the variant module's own `calculate_dimensions` (aspect kept, rounded to 32)."""
    if variant == "edit":
        from diffusers.pipelines.qwenimage import pipeline_qwenimage_edit as module
    else:
        from diffusers.pipelines.qwenimage import pipeline_qwenimage_edit_plus as module  # type: ignore[no-redef]  # one name for either variant's module
    dims = module.calculate_dimensions(area, ratio)
    return int(dims[0]), int(dims[1])


def control_size(image_wh: tuple[int, int], control_pixels: int, variant: Variant = "edit-plus") -> tuple[int, int]:
    """(width, height) a control of `image_wh` pixels is resized to for the VAE at `control_pixels`."""
    return _calculate_dimensions(variant, control_pixels, image_wh[0] / image_wh[1])


def vl_size(image_wh: tuple[int, int], variant: Variant, control_pixels: int = PIPELINE_CONTROL_PIXELS) -> tuple[int, int]:
    """(width, height) of the control image the text encoder sees: Plus ~384x384, Edit the VAE control itself."""
    if variant == "edit-plus":
        return _calculate_dimensions(variant, PIPELINE_VL_PIXELS, image_wh[0] / image_wh[1])
    return control_size(image_wh, control_pixels, variant)


def bucket_size(image_wh: tuple[int, int], target_pixels: int) -> tuple[int, int]:
    """(width, height) of the aspect-ratio bucket of a target of `image_wh`: about `target_pixels`, aspect kept,
    sides multiples of 32 (the pipelines' own rounding; at least 32)."""
    ratio = image_wh[0] / image_wh[1]
    width = math.sqrt(target_pixels * ratio)
    height = width / ratio
    return max(32, round(width / 32) * 32), max(32, round(height / 32) * 32)


def latent_grid(size_wh: tuple[int, int]) -> tuple[int, int, int]:
    """The `img_shapes` entry of an image of `size_wh` pixels: (1, h, w) in 2x2-packed latent units (16 pixels)."""
    return (1, size_wh[1] // 16, size_wh[0] // 16)


def control_cost_warning(control_pixels: int) -> str | None:
    """The warning of a control area below the pipeline's (None at the pipeline's own)."""
    if control_pixels >= PIPELINE_CONTROL_PIXELS:
        return None
    share = control_pixels / PIPELINE_CONTROL_PIXELS
    return (
        f"data.control_pixels {control_pixels} is {share:.0%} of the pipeline's {PIPELINE_CONTROL_PIXELS} "
        "(1024x1024): controls are trained with fewer, coarser tokens than diffusers and ComfyUI give the model at "
        "inference, so the LoRA sees the control at another scale there (less detail kept, edits that drift). The "
        "held-out check, the judge and compare use the same reduced size; use the LoRA at that size, or leave "
        "control_pixels at the default when memory allows"
    )


@dataclass(frozen=True)
class Conditioning:
    """What the transformer receives besides the target, as the pipeline makes it (fp32 unless the encoders run
    in another dtype; the cache stores fp16)."""

    controls: list[Any]
    """Packed control latents, one [1, Nc, 64] per control."""
    shapes: list[tuple[int, int, int]]
    """Each control's `img_shapes` entry (after the target's)."""
    prompt_embeds: Any
    """[1, L, D]."""
    prompt_mask: Any
    """[1, L] or None (nothing padded)."""
    empty_prompt_embeds: Any
    empty_prompt_mask: Any


def _prompt_images(pipe: Any, images: list[Image.Image], variant: Variant, control_pixels: int) -> tuple[Any, list[Any]]:
    """(image argument of encode_prompt, VAE inputs [1, 3, 1, H, W] per control), in the pipeline's steps."""
    if variant == "edit":
        if len(images) != 1:
            raise ValueError(f"QwenImageEditPipeline conditions on one control image; this sample has {len(images)}")
        w, h = control_size(images[0].size, control_pixels, variant)
        resized = pipe.image_processor.resize(images[0], h, w)  # the pipeline: resize, then VL and VAE both use it
        return resized, [pipe.image_processor.preprocess(resized, h, w).unsqueeze(2)]
    vl, vae = [], []
    for img in images:
        cw, ch = vl_size(img.size, variant)
        w, h = control_size(img.size, control_pixels, variant)
        vl.append(pipe.image_processor.resize(img, ch, cw))
        vae.append(pipe.image_processor.preprocess(img, h, w).unsqueeze(2))
    return vl, vae


def _unused_noise() -> Any:
    """A generator for the noise prepare_latents also draws (discarded here): the global RNG stays untouched. The
    VAE's latents are its distribution's mode, as in the pipelines, so no generator changes them."""
    import torch

    return torch.Generator().manual_seed(0)


def encode_conditioning(
    pipe: Any, images: list[Image.Image], prompt: str, *, variant: Variant, control_pixels: int, device: Any
) -> Conditioning:
    """The control latents, their grids and the prompt embeddings (prompt and empty prompt) the variant's pipeline
    gives its transformer for `images` and `prompt`, at `control_pixels` (the pipeline's own: PIPELINE_CONTROL_PIXELS).
    `pipe` is the loaded pipeline (its transformer may be None)."""
    import torch

    prompt_image, vae_inputs = _prompt_images(pipe, images, variant, control_pixels)
    with torch.no_grad():  # a distillation lesson: never attach the text encoder's graph
        pe, pm = pipe.encode_prompt(prompt, image=prompt_image, device=device)
        ee, em = pipe.encode_prompt("", image=prompt_image, device=device)
        controls, shapes = [], []
        for x in vae_inputs:  # the Plus pipeline encodes controls one by one, as here
            _, packed = pipe.prepare_latents(
                [x] if variant == "edit-plus" else x, 1, pipe.latent_channels, 16, 16, pe.dtype, device, _unused_noise()
            )
            controls.append(packed)
            shapes.append(latent_grid((x.shape[-1], x.shape[-2])))
    return Conditioning(controls, shapes, pe, pm, ee, em)


def encode_target(pipe: Any, image: Image.Image, size_wh: tuple[int, int], device: Any, dtype: Any) -> torch.Tensor:
    """Packed target latents [1, N, 64] at `size_wh` (its bucket), through the pipeline's image processor and VAE
    (the same path as a control's)."""
    import torch

    x = pipe.image_processor.preprocess(image, size_wh[1], size_wh[0]).unsqueeze(2)
    with torch.no_grad():
        packed: torch.Tensor = pipe.prepare_latents(x, 1, pipe.latent_channels, 16, 16, dtype, device, _unused_noise())[1]
    return packed


_PATCH_LOCK = threading.Lock()


@contextmanager
def pipeline_control_pixels(pipe: Any, control_pixels: int) -> Iterator[None]:
    """Within the block, `pipe` (a loaded QwenImageEdit(Plus)Pipeline) conditions its controls at `control_pixels`
    instead of its hard-coded 1024x1024, the way the cache did: every sampler that judges a LoRA trained at a
    reduced `data.control_pixels` calls the pipeline inside this (the judge, compare). At the pipeline's own area it
    changes nothing. The pipelines have no argument for it, so the area is swapped in their module for the block:
    for the Plus pipeline its `VAE_IMAGE_SIZE`, for the Edit pipeline the area its `calculate_dimensions` is called
    with (callers pass `height`/`width`: the default output size would follow it too)."""
    if control_pixels == PIPELINE_CONTROL_PIXELS:
        yield
        return
    variant = variant_of(type(pipe).__name__)
    if variant == "edit-plus":
        from diffusers.pipelines.qwenimage import pipeline_qwenimage_edit_plus as plus

        with _PATCH_LOCK:
            saved = plus.VAE_IMAGE_SIZE
            plus.VAE_IMAGE_SIZE = control_pixels
            try:
                yield
            finally:
                plus.VAE_IMAGE_SIZE = saved
        return
    from diffusers.pipelines.qwenimage import pipeline_qwenimage_edit as edit

    original: Any = edit.calculate_dimensions

    def at_control_area(target_area: int, ratio: float) -> Any:
        return original(control_pixels if target_area == PIPELINE_CONTROL_PIXELS else target_area, ratio)

    with _PATCH_LOCK:
        edit.calculate_dimensions = at_control_area
        try:
            yield
        finally:
            edit.calculate_dimensions = original
