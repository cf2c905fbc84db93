"""Build a tiny, random, fully offline Qwen-Image-2.1 pipeline (~600 KB): every component is the real
diffusers/transformers class with tiny sizes.

- tokenizer: byte-level Qwen2Tokenizer (the 256 byte characters, no merges) plus Qwen's special tokens; a plain
  chat template that adds no default system prompt (one that does silently shifts the pipeline's drop count);
- text encoder: Qwen3VLForConditionalGeneration, hidden 16, 2 layers, a tiny vision tower;
- VAE: AutoencoderKLQwenImage21 (RGBA), z_dim 8 (4 would let RGBA condition images pass for latents), five
  dim_mult entries and four temporal downsamples (the pipeline assumes 16x compression);
- transformer: QwenImage21Transformer2DModel, 2 layers, 2 heads, head_dim 16, axes (4, 6, 6);
- scheduler: FlowMatchEulerDiscreteScheduler with shift 1.0 and no dynamic shifting (the real Turbo's setting:
  passed sigmas are used verbatim). `dynamic_shifting=True` builds the tiny hub repo's setting (distillation lesson 7).

Imports torch: never import this module on the doctor's path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aipc_env.distill.licence import TINY_LICENSE

__all__ = ["CHAT_TEMPLATE", "SPECIAL_TOKENS", "TINY21_VERSION", "build_tiny21_pipeline"]

TINY21_VERSION = 2
"""Bumped when the built pipeline changes (the cached copy is rebuilt)."""
SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
]
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for c in message['content'] %}"
    "{% if c['type'] == 'text' %}{{ c['text'] }}{% elif c['type'] == 'image' %}"
    "<|vision_start|><|image_pad|><|vision_end|>{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _tokenizer() -> Any:  # transformers' Qwen2Tokenizer, as its untyped from_pretrained returns it
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    from aipc_env.workers.train.tinyparts import as_qwen2_tokenizer

    vocab = {c: i for i, c in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return as_qwen2_tokenizer(tok, eos="<|im_end|>", special=SPECIAL_TOKENS)


def build_tiny21_pipeline(
    out: Path, *, seed: int = 0, dynamic_shifting: bool = False, sample_sigmas: list[float] | None = None
) -> Path:
    """Write the tiny pipeline to `out` (atomically: a temp folder renamed at the end)."""
    import torch
    from diffusers import (
        AutoencoderKLQwenImage21,
        FlowMatchEulerDiscreteScheduler,
        QwenImage21Pipeline,
        QwenImage21Transformer2DModel,
    )
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration, Qwen3VLProcessor
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from aipc_env.workers.train.compat import processor_without_video
    from aipc_env.workers.train.tinyparts import DYNAMIC_SCHEDULER, save_tiny_pipeline, special_ids, tiny_vae_config, vl_config

    processor_without_video()
    torch.manual_seed(seed)
    tokenizer = _tokenizer()
    ids = special_ids(tokenizer, SPECIAL_TOKENS)
    image_processor = Qwen2VLImageProcessorPil(
        patch_size=16, temporal_patch_size=2, merge_size=2, min_pixels=32 * 32, max_pixels=256 * 256
    )
    processor = Qwen3VLProcessor(image_processor=image_processor, tokenizer=tokenizer, chat_template=CHAT_TEMPLATE)
    hidden = 16
    rope = {"rope_type": "default", "mrope_section": [2, 1, 1], "rope_theta": 1e6, "mrope_interleaved": True}
    config = Qwen3VLConfig(
        **vl_config(
            tokenizer,
            ids,
            hidden,
            text=dict(head_dim=8, rope_parameters=rope, bos_token_id=None),
            vision=dict(
                hidden_size=16, intermediate_size=32, patch_size=16, num_position_embeddings=64, deepstack_visual_indexes=[1]
            ),
        )
    )
    text_encoder = Qwen3VLForConditionalGeneration(config).eval()
    vae = AutoencoderKLQwenImage21(
        **tiny_vae_config(8, decoder_base_dim=8, dim_mult=[1, 1, 1, 1, 1], temperal_downsample=[False, True, True, True])
    )
    transformer = QwenImage21Transformer2DModel(
        patch_size=1,
        in_channels=8,
        out_channels=8,
        num_layers=2,
        attention_head_dim=16,
        num_attention_heads=2,
        context_in_dim=hidden,
        mlp_ratio=2,
        axes_dims_rope=(4, 6, 6),
    )
    if dynamic_shifting:  # the tiny hub repo's scheduler (distillation lesson 7)
        scheduler = FlowMatchEulerDiscreteScheduler(**DYNAMIC_SCHEDULER)
    else:  # the real Turbo's: sigmas are used verbatim
        scheduler = FlowMatchEulerDiscreteScheduler(shift=1.0, use_dynamic_shifting=False)
    pipe = QwenImage21Pipeline(
        scheduler=scheduler,
        vae=vae,
        text_encoder=text_encoder,
        processor=processor,
        transformer=transformer,
        sample_sigmas=sample_sigmas,
    )
    licence = TINY_LICENSE.read_text(encoding="utf-8")
    mark = {"kind": "qwen-image-2.1", "seed": seed, "version": TINY21_VERSION, "dynamic_shifting": dynamic_shifting}
    return save_tiny_pipeline(pipe, out, mark, files={"LICENSE": licence})  # an export copies the model's licence
