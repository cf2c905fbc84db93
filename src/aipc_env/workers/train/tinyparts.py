"""What the two tiny pipeline builders share: aipc_env.workers.train.tinypipe (Qwen-Image-Edit / Edit-Plus, a Qwen2.5-VL
text encoder) and aipc_env.workers.distill.tinypipe21 (Qwen-Image-2.1, a Qwen3-VL text encoder). Each keeps only what
differs (its tokenizer's vocabulary, its model classes and sizes); here are the tokenizer's conversion to the
pipelines' class, the vision-language config's tiny shape, the tiny VAE's shape, the dynamic-shifting scheduler
settings and the atomic save with the tiny mark (aipc_tiny.json).

Imports torch (through transformers) inside its functions: training side only.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aipc_env.core.fileio import atomic_dir
from aipc_env.core.runfolder import TINY_MARK

__all__ = [
    "DYNAMIC_SCHEDULER",
    "as_qwen2_tokenizer",
    "save_tiny_pipeline",
    "special_ids",
    "tiny_vae_config",
    "vl_config",
]

DYNAMIC_SCHEDULER: dict[str, Any] = dict(
    shift=1.0,
    use_dynamic_shifting=True,
    base_shift=0.5,
    max_shift=0.9,
    base_image_seq_len=256,
    max_image_seq_len=8192,
    shift_terminal=0.02,
    time_shift_type="exponential",
)
"""The tiny pipelines' flow-match scheduler with dynamic shifting (the tiny hub repos' setting): the Edit pipeline's,
the built-in default's held-out check (aipc_env.workers.train.tinyedit.scheduler_for_tiny) and the 2.1 pipeline built with
dynamic_shifting (distillation lesson 7)."""


def as_qwen2_tokenizer(tok: Any, *, eos: str, special: list[str], cls: Any = None) -> Any:
    """A `tokenizers` tokenizer built here, wrapped (end-of-text as pad and unknown token, 4096 tokens at most),
    saved and loaded back as the pipelines' Qwen2 tokenizer class (transformers' Qwen2Tokenizer unless `cls` names
    another: transformers 4.x's Qwen2TokenizerFast)."""
    from transformers import PreTrainedTokenizerFast

    if cls is None:
        from transformers import Qwen2Tokenizer

        cls = Qwen2Tokenizer
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=eos,
        pad_token="<|endoftext|>",
        unk_token="<|endoftext|>",
        model_max_length=4096,
        additional_special_tokens=special,
    )
    with tempfile.TemporaryDirectory() as tmp:
        fast.save_pretrained(tmp)
        return cls.from_pretrained(tmp)


def special_ids(tokenizer: Any, tokens: list[str]) -> dict[str, int]:
    """{special token: its id in tokenizer}."""
    return {t: tokenizer.convert_tokens_to_ids(t) for t in tokens}


def vl_config(
    tokenizer: Any, ids: Mapping[str, int], hidden: int, *, text: Mapping[str, Any], vision: Mapping[str, Any]
) -> dict[str, Any]:
    """The keyword arguments of a tiny Qwen vision-language config (Qwen2_5_VLConfig, Qwen3VLConfig): a 2-layer text
    model of width `hidden` (2 heads, 1 key-value head) and a 2-block vision tower that merges 2x2 patches into that
    width, with the special tokens' ids; `text` and `vision` add each model's own settings."""
    return dict(
        text_config=dict(
            vocab_size=max(512, len(tokenizer)),
            hidden_size=hidden,
            intermediate_size=2 * hidden,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=1,
            pad_token_id=ids["<|endoftext|>"],
            eos_token_id=ids["<|im_end|>"],
            **text,
        ),
        vision_config=dict(depth=2, num_heads=2, out_hidden_size=hidden, spatial_merge_size=2, temporal_patch_size=2, **vision),
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
    )


def tiny_vae_config(z_dim: int, **own: Any) -> dict[str, Any]:
    """The keyword arguments of a tiny Qwen-Image VAE: base width 8, one residual block a level, no attention, and
    latents already normalised (mean 0, std 1 per channel); `own` adds the model's levels and downsampling."""
    return dict(
        base_dim=8,
        z_dim=z_dim,
        num_res_blocks=1,
        attn_scales=[],
        latents_mean=[0.0] * z_dim,
        latents_std=[1.0] * z_dim,
        **own,
    )


def save_tiny_pipeline(pipe: Any, out: Path, mark: Mapping[str, Any], *, files: Mapping[str, str] | None = None) -> Path:
    """Write pipe to `out` atomically (a temp folder renamed at the end), with its mark and any extra text files."""
    out = Path(out)
    with atomic_dir(out) as tmp_dir:
        pipe.save_pretrained(tmp_dir)
        for name, text in (files or {}).items():
            (tmp_dir / name).write_text(text, encoding="utf-8")
        (tmp_dir / TINY_MARK).write_text(json.dumps(dict(mark)))
    return out
