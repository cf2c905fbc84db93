"""The built-in default's model and edit: a tiny Qwen-Image-Edit transformer that already knows how to generate,
and an edit it does not know yet, with held-out samples the fit never sees.

Why a trained base: a LoRA nudges a model that can already generate; a random transformer cannot, and a rank-8
LoRA on its attention does not learn flow matching from nothing (measured: the loss stays at the level of
predicting nothing, and held-out samples stay as far from their targets as the base's). So the base is trained
first, full weights and in fp32 on the CPU, on a prior: images of one flat colour, with a control image that has
nothing to do with them (the base learns to ignore the control). It is built once per machine
(deterministic for its recipe, about 800 small steps) and cached in the per-user cache folder.

The edit the LoRA learns (`edit_sample`): the control is a colour plus a strong texture (EDIT_TEXTURE, 2.0, against
a colour of standard deviation 1); the target is the control's average colour, flat ("paint it in the control's
average colour"). Returning the control unchanged keeps the texture, so it lands farther from the target than the
base's flat colour does (measured on 16 held-out samples: control copied 1.99, base 1.38, latent RMS): a LoRA that
learned to copy cannot pass. The base paints some flat colour; only a LoRA that reads each control paints the right
one, so held-out samples tell a LoRA that learned the edit from one that learned to copy, or only what targets look
like (the baselines of aipc_env.train.verdict; tests/test_learning.py trains each of them).

Latents are packed 2x2 tokens of the tiny transformer (16 channels, 64 per token), as the pipelines pack them.
Imports torch: training side only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from aipc_env.train.tinybase import BASE_CACHE, BASE_RECIPE, BASE_RECORD, check_base_cache

__all__ = [
    "EDIT_VERSION",
    "HELDOUT_SEED",
    "TRAIN_SEED",
    "EditSample",
    "edit_inputs",
    "edit_sample",
    "load_tiny_base",
    "scheduler_for_tiny",
]


TRAIN_SEED = 1000
"""Training sample i is edit_sample(TRAIN_SEED + i); held-out sample j is edit_sample(HELDOUT_SEED + j)."""
HELDOUT_SEED = 500_000
TEXT_LEN = 12
EDIT_VERSION = 2
"""The edit's version, part of each cached sample's key: a cache made for an earlier edit is not reused."""
EDIT_TEXTURE = 2.0
"""Standard deviation of the edit's control texture (the prior's is 0.5): returning the control unchanged keeps a
texture this strong, farther from the flat target than the base's flat colour (decisions: the built-in edit)."""


@dataclass(frozen=True)
class EditSample:
    control: Any
    """Packed control latents [N, 64]."""
    target: Any
    """Packed target latents [N, 64]."""
    prompt_embeds: Any
    """[TEXT_LEN, 64]."""
    latent_hw: int


def _sample(seed: int, latent_hw: int, *, prior: bool) -> EditSample:
    import torch

    from aipc_env.workers.train.tiny import TINY_TRANSFORMER_CONFIG, pack_latents

    g = torch.Generator().manual_seed(seed)
    colour = torch.randn(1, 16, 1, 1, generator=g)
    texture = (0.5 if prior else EDIT_TEXTURE) * torch.randn(1, 16, latent_hw, latent_hw, generator=g)
    control = colour + texture
    if prior:  # a flat colour unrelated to the control
        target = torch.randn(1, 16, 1, 1, generator=g).expand_as(control)
    else:  # the edit: the control's average colour, flat
        target = control.mean(dim=(2, 3), keepdim=True).expand_as(control)
    text_dim = TINY_TRANSFORMER_CONFIG["joint_attention_dim"]
    assert isinstance(text_dim, int)
    prompt = torch.randn(TEXT_LEN, text_dim, generator=g)
    return EditSample(pack_latents(control.contiguous())[0], pack_latents(target.contiguous())[0], prompt, latent_hw)


def edit_sample(seed: int, latent_hw: int = 8) -> EditSample:
    """One sample of the edit (a pure function of its seed)."""
    return _sample(seed, latent_hw, prior=False)


def edit_inputs(samples: list[EditSample], device: Any = "cpu", dtype: Any = None) -> dict[str, Any]:
    """A batch of samples as inputs of aipc_env.workers.train.objective.flow_matching_loss."""
    import torch

    hw = samples[0].latent_hw // 2
    dtype = dtype or torch.float32
    return {
        "target": torch.stack([s.target for s in samples]).to(device, dtype),
        "controls": torch.stack([s.control for s in samples]).to(device, dtype),
        "prompt_embeds": torch.stack([s.prompt_embeds for s in samples]).to(device, dtype),
        "prompt_mask": None,
        "img_shapes": [[(1, hw, hw), (1, hw, hw)]] * len(samples),
        "token_mask": None,
    }


def scheduler_for_tiny() -> Any:
    """The flow-match scheduler of the tiny pipeline (aipc_env.workers.train.tinypipe builds it from the same values)."""
    from diffusers import FlowMatchEulerDiscreteScheduler

    from aipc_env.workers.train.tinyparts import DYNAMIC_SCHEDULER

    return FlowMatchEulerDiscreteScheduler(**DYNAMIC_SCHEDULER)


def _train_base(log: Callable[[str], object]) -> Any:
    """Full-weight flow-matching training of the tiny transformer on the prior (fp32, CPU, deterministic)."""
    import torch

    from aipc_env.workers.train.objective import flow_matching_loss
    from aipc_env.workers.train.tiny import build_tiny_transformer

    r = BASE_RECIPE
    model = build_tiny_transformer(seed=r.init_seed).float()
    pool = [_sample(7_000_000 + i, r.latent_hw, prior=True) for i in range(r.pool)]
    opt = torch.optim.AdamW(model.parameters(), lr=r.lr)
    model.train()
    for step in range(r.steps):
        g = torch.Generator().manual_seed(step)
        idx = torch.randint(0, len(pool), (r.batch,), generator=g).tolist()
        loss = flow_matching_loss(model, edit_inputs([pool[i] for i in idx]), g)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if (step + 1) % 200 == 0:
            log(f"tiny base: step {step + 1}/{r.steps}, loss {float(loss.detach()):.3f}")
    return model.eval()


def load_tiny_base(cache_root: Path, *, log: Callable[[str], object] = print) -> Any:
    """The trained tiny base (fp32, CPU), built into `cache_root` on first use and reused while its record holds
    this recipe and the hash of every file (aipc_env.train.buildcache)."""
    from diffusers import QwenImageTransformer2DModel

    from aipc_env.train.buildcache import build_once

    def build(tmp: Path) -> None:
        log(f"tiny base: training the built-in model once for this machine ({BASE_RECIPE.steps} steps on the CPU) ...")
        _train_base(log).save_pretrained(str(tmp), safe_serialization=True)

    folder = check_base_cache(cache_root)
    if build_once(folder, record=BASE_RECORD, recipe=asdict(BASE_RECIPE), build=build, what=BASE_CACHE, log=log):
        log(f"tiny base: cached in {folder}")
    return QwenImageTransformer2DModel.from_pretrained(str(folder)).float().eval()
