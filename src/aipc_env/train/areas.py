"""The Qwen-Image-Edit pipelines' conditioning areas, in pixels (the constants the config and `recommend` check
against; the conditioning itself, which calls the pipelines' own pieces, is workers/train/conditioning.py)."""

from __future__ import annotations

from typing import Final

PIPELINE_CONTROL_PIXELS: Final = 1024 * 1024
"""The VAE control area of both Edit pipelines (the Edit module's literal `1024 * 1024`, the Plus module's
`VAE_IMAGE_SIZE`; tests/test_conditioning_parity.py reads both from diffusers)."""
PIPELINE_VL_PIXELS: Final = 384 * 384
"""The Plus pipeline's `CONDITION_IMAGE_SIZE`: the area of each control the text encoder sees."""
MIN_CONTROL_PIXELS: Final = 64 * 64
"""The least control area `data.control_pixels` accepts (one 2x2-packed 32-pixel grid cell per side ~ 2x2 tokens)."""
