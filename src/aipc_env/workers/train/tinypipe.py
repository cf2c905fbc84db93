"""Build a tiny, random, fully offline Qwen-Image-Edit (or Edit-Plus) pipeline directory (~3 MB).

Every component is the real diffusers/transformers class with tiny sizes: a byte-level BPE tokenizer trained
here on the prompt templates (with Qwen2's pre-tokenizer and special tokens), a Qwen2.5-VL text encoder, a
Qwen-Image VAE and transformer, the flow-match scheduler. The pipelines' own encode/generate code runs on it.
Used by tests, by `verify`, and as `builtin:tiny-pipeline` for the built-in default run.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tokenizers import Tokenizer

__all__ = ["EDIT_TEMPLATE_PREFIX_TOKENS", "SPECIAL_TOKENS", "build_tiny_pipeline"]

SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
]
QWEN2_PRETOKENIZE = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
    r"\s*[\r\n]+|\s+(?!\S)|\s+"
)
EDIT_TEMPLATE_PREFIX_TOKENS = 64
"""The pipelines drop this many leading tokens (the system prompt); the tiny tokenizer reproduces that length."""


def _system_prefix() -> str:
    """The part of the pipelines' prompt template before the image and prompt (what they drop)."""
    return (
        "<|im_start|>system\nDescribe the key features of the input image (color, shape, size, texture, "
        "objects, background), then explain how the user's text instruction should alter or modify the image. "
        "Generate a new image that meets the user's requirements while maintaining consistency with the "
        "original input where appropriate.<|im_end|>\n<|im_start|>user\n"
    )


def _train_tokenizer(target_prefix_tokens: int = EDIT_TEMPLATE_PREFIX_TOKENS) -> Tokenizer:
    """Train byte-level BPEs of growing size until the system prefix is exactly `target_prefix_tokens` long."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    corpus = [
        _system_prefix() * 3,
        "Add the character to the image. Make the sky red. Remove the cat. " * 5,
        "Picture 1: Picture 2: <|vision_start|><|image_pad|><|vision_end|><|im_end|>\n<|im_start|>assistant\n",
    ]
    best = None
    for vocab_size in range(300, 700, 4):
        tok = Tokenizer(models.BPE(unk_token=None))
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=SPECIAL_TOKENS,
            show_progress=False,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        )
        tok.train_from_iterator(corpus, trainer)
        n = len(tok.encode(_system_prefix()).ids)
        if n == target_prefix_tokens:
            best = tok
            break
        if n < target_prefix_tokens:
            break
    if best is None:
        raise RuntimeError(f"could not train a tokenizer whose system prefix is exactly {target_prefix_tokens} tokens")
    return best


def build_tiny_pipeline(out: Path, *, plus: bool = False, seed: int = 0) -> Path:
    """Write a tiny Qwen-Image-Edit(-Plus) pipeline to `out` (atomically: a temp folder renamed at the end)."""
    import torch
    import transformers
    from diffusers import (
        AutoencoderKLQwenImage,
        FlowMatchEulerDiscreteScheduler,
        QwenImageEditPipeline,
        QwenImageEditPlusPipeline,
        QwenImageTransformer2DModel,
    )
    from transformers import (
        Qwen2_5_VLConfig,
        Qwen2_5_VLForConditionalGeneration,
        Qwen2VLImageProcessor,
        Qwen2VLProcessor,
    )

    legacy = int(transformers.__version__.split(".")[0]) < 5
    """transformers 4.x (qwen-image-finetune pins 4.52.4): the fast tokenizer class, rope_scaling for mrope."""
    Qwen2Tokenizer = transformers.Qwen2TokenizerFast if legacy else transformers.Qwen2Tokenizer  # 4.x only

    from aipc_env.workers.train.compat import processor_without_video
    from aipc_env.workers.train.tiny import TINY_TRANSFORMER_CONFIG
    from aipc_env.workers.train.tinyparts import (
        DYNAMIC_SCHEDULER,
        as_qwen2_tokenizer,
        save_tiny_pipeline,
        special_ids,
        tiny_vae_config,
        vl_config,
    )

    processor_without_video()
    torch.manual_seed(seed)
    tokenizer = as_qwen2_tokenizer(_train_tokenizer(), eos="<|endoftext|>", special=SPECIAL_TOKENS[1:], cls=Qwen2Tokenizer)
    ids = special_ids(tokenizer, SPECIAL_TOKENS)
    image_processor = Qwen2VLImageProcessor(
        patch_size=14, temporal_patch_size=2, merge_size=2, min_pixels=3136, max_pixels=1003520
    )
    processor = Qwen2VLProcessor(image_processor=image_processor, tokenizer=tokenizer)
    hidden = TINY_TRANSFORMER_CONFIG["joint_attention_dim"]
    assert isinstance(hidden, int)
    rope = (
        {"rope_scaling": {"type": "mrope", "mrope_section": [4, 6, 6]}, "rope_theta": 1e6}
        if legacy
        else {"rope_parameters": {"rope_type": "default", "mrope_section": [4, 6, 6], "rope_theta": 1e6}}
    )
    config = Qwen2_5_VLConfig(
        **vl_config(
            tokenizer,
            ids,
            hidden,
            text=dict(bos_token_id=ids["<|endoftext|>"], **rope),
            vision=dict(hidden_size=64, intermediate_size=128, patch_size=14, window_size=112, fullatt_block_indexes=[1]),
        )
    )
    text_encoder = Qwen2_5_VLForConditionalGeneration(config).eval()
    vae = AutoencoderKLQwenImage(**tiny_vae_config(16, dim_mult=[1, 2, 4, 4], temperal_downsample=[False, True, True]))
    transformer = QwenImageTransformer2DModel(**TINY_TRANSFORMER_CONFIG)
    scheduler = FlowMatchEulerDiscreteScheduler(**DYNAMIC_SCHEDULER)
    cls = QwenImageEditPlusPipeline if plus else QwenImageEditPipeline
    # to a type checker diffusers exports its dummy placeholder classes, which lack the pipelines' methods
    pipe: Any = cls(
        scheduler=scheduler, vae=vae, text_encoder=text_encoder, tokenizer=tokenizer, processor=processor, transformer=transformer
    )
    return save_tiny_pipeline(pipe, out, {"seed": seed, "plus": plus})


def main(argv: list[str] | None = None) -> int:
    """The `tiny-model` phase of `aipc-env train CONFIG --model tiny` (launch.hops.TinyModel). Builds once (a folder
    that has model_index.json is kept), with a line at least every 5 s while it builds."""
    from aipc_env.errors import ExitCode
    from aipc_env.launch.hops import TinyModel, run_worker

    args = TinyModel.parse(argv)

    def build() -> int:
        import time

        from aipc_env.core.heartbeat import Heartbeat

        if (args.out / "model_index.json").is_file():
            print(f"tiny-model: {args.out} is built (kept)", flush=True)
            return ExitCode.OK
        kind = f"Qwen-Image-Edit{'-Plus' if args.plus else ''}"
        print(f"tiny-model: building a tiny random {kind} in the diffusers layout ...", flush=True)
        started = time.monotonic()
        beat = Heartbeat(lambda line: print(line, flush=True), "tiny-model: still building").start()
        try:
            build_tiny_pipeline(args.out, plus=args.plus)
        finally:
            beat.stop()
        print(f"tiny-model: {args.out} built in {time.monotonic() - started:.1f} s", flush=True)
        return ExitCode.OK

    return run_worker("the tiny-model phase", build)


if __name__ == "__main__":
    raise SystemExit(main())
