"""Build the trained tiny teacher: the tiny Qwen-Image-2.1 pipeline (aipc_env.workers.distill.tinypipe21: its random text
encoder, tokenizer, VAE and scheduler) with a transformer trained from scratch, full weights, by flow matching on
a synthetic distribution in the VAE's latent space (aipc_env.distill.shapes: a colored shape whose color and kind
follow the prompt, in one of four places). Deterministic (fixed seeds, one thread), about a minute on one CPU
core, cached per user (aipc_env.workers.distill.models.model_dir). Its 8-step samples are structured: the build measures
their distance to the data distribution against an untrained transformer's and refuses to cache a teacher that did
not learn (shapes.check_structured). G3 can then judge a student on it (aipc_env.distill.g3_verdict: quality mode on the
latent distance to teacher@8).

The objective is the pipeline's own: x_t = (1 - sigma) x0 + sigma eps, the velocity target eps - x0, the timestep
sigma (the pipeline passes sigma * 1000 / 1000), through aipc_env.workers.distill.sampler.velocity (the call the sampler
makes). Imports torch: never import this module on the doctor's path.
"""

from __future__ import annotations

import itertools
import json
import math
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

import torch

from aipc_env.core.runfolder import TINY_MARK
from aipc_env.distill.shapes import COLORS, KINDS, PROMPTS, SAMPLE_SIGMAS, TRAINED21_VERSION, check_structured

if TYPE_CHECKING:
    from aipc_env.workers.distill import sampler

__all__ = ["ARCH", "TRAINING", "Shapes", "build_tiny21_trained", "distance_to_data"]

ARCH = {"num_layers": 3, "num_attention_heads": 4, "attention_head_dim": 16, "mlp_ratio": 2}
"""The trained transformer: 3 blocks, inner width 64 (the random tiny one is 2 blocks of width 32: too small to
learn both the prompt's color and the place)."""
TRAINING: dict[str, int] = {"steps": 1500, "batch": 32, "warmup": 50, "seed": 0, "data_seed": 1}
LEARNING_RATE = 2e-3
GRID = 4
"""The latent grid at 64x64 pixels (the VAE compresses 16x): 4x4 tokens of 8 channels."""
CHANNELS = 8


class Shapes:
    """The distribution: per prompt four templates [4, GRID*GRID, CHANNELS] (a color vector on the shape's cells,
    zeros elsewhere); a sample is one template, scaled by U(0.8, 1.2), plus N(0, 0.05^2) noise."""

    def __init__(self, seed: int = TRAINING["data_seed"]):
        g = torch.Generator().manual_seed(seed)
        colors = {}
        for name in COLORS:
            v = torch.randn(CHANNELS, generator=g)
            colors[name] = v / v.norm() * math.sqrt(CHANNELS) * 0.9
        masks: dict[str, list[torch.Tensor]] = {"square": [], "stripe": []}
        half = GRID // 2
        for i in (0, half):
            for j in (0, half):
                m = torch.zeros(GRID, GRID)
                m[i : i + half, j : j + half] = 1
                masks["square"].append(m)
        for r in range(GRID):
            m = torch.zeros(GRID, GRID)
            m[r, :] = 1
            masks["stripe"].append(m)
        assert set(masks) == set(KINDS)
        self.templates = []
        for prompt in PROMPTS:
            _, color, kind = prompt.split()
            self.templates.append(
                torch.stack([(m[..., None] * colors[color]).reshape(GRID * GRID, CHANNELS) for m in masks[kind]])
            )

    def sample(self, prompt_index: torch.Tensor, g: torch.Generator) -> torch.Tensor:
        n = len(prompt_index)
        modes = torch.randint(4, (n,), generator=g)
        scale = 0.8 + 0.4 * torch.rand(n, generator=g)
        x = torch.stack([self.templates[p][m] for p, m in zip(prompt_index.tolist(), modes.tolist())])
        return x * scale.view(-1, 1, 1) + 0.05 * torch.randn(x.shape, generator=g)


def distance_to_data(latents: torch.Tensor, prompt_index: list[int], shapes: Shapes) -> list[float]:
    """Per sample (packed latents [B, GRID*GRID, CHANNELS]): the MSE to the nearest point of its prompt's
    distribution's noise-free part (a template of the prompt, scaled within [0.8, 1.2])."""
    out = []
    for x, p in zip(latents.float(), prompt_index):
        best = math.inf
        for t in shapes.templates[p]:
            a = float((x * t).sum() / (t * t).sum())
            best = min(best, float(((x - t * min(max(a, 0.8), 1.2)) ** 2).mean()))
        out.append(best)
    return out


def _transformer(seed: int) -> Any:  # a diffusers QwenImage21Transformer2DModel
    from diffusers import QwenImage21Transformer2DModel

    torch.manual_seed(seed)
    return QwenImage21Transformer2DModel(
        patch_size=1, in_channels=CHANNELS, out_channels=CHANNELS, context_in_dim=16, axes_dims_rope=(4, 6, 6), **ARCH
    )


@torch.no_grad()
def _sample(
    model: Any, noise: torch.Tensor, prompted: sampler.Prompted, sigmas: list[float], shapes_one: list[tuple[int, int, int]]
) -> torch.Tensor:
    from aipc_env.workers.distill import sampler

    x = noise
    grid = [*sigmas, 0.0]
    for s, s_next in itertools.pairwise(grid):
        v = sampler.velocity(model, x, torch.tensor(s * 1000.0), prompted, [shapes_one] * x.shape[0])
        x = x + (s_next - s) * v
    return x


def build_tiny21_trained(out: Path, *, log: Callable[[str], object] = print) -> Path:
    """Train the teacher and write the pipeline into `out`, a fresh folder (aipc_env.workers.distill.models.ensure_trained_tiny
    builds it once, under a lock, and publishes it whole into the per-user cache)."""
    from diffusers import QwenImage21Pipeline

    from aipc_env.workers.distill import sampler
    from aipc_env.workers.distill.tinypipe21 import build_tiny21_pipeline
    from aipc_env.workers.train.compat import processor_without_video

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # determinism, and the timing CI plans for
    t0 = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory() as staging:
            base = build_tiny21_pipeline(Path(staging) / "pipe", seed=0, sample_sigmas=SAMPLE_SIGMAS)
            processor_without_video()  # the test-environment shim (no torchvision), as models.load_pipeline
            pipe = QwenImage21Pipeline.from_pretrained(str(base), dtype=torch.float32, local_files_only=True)
            encoded = [sampler.encode(pipe, [p], torch.device("cpu")) for p in PROMPTS]
            if len({e.embeds.shape[1] for e in encoded}) != 1 or any(e.mask is not None for e in encoded):
                raise RuntimeError("the shapes prompts must encode to one length without padding")
            embeds = torch.cat([e.embeds for e in encoded])
            pads = torch.cat([e.image_pad_mask for e in encoded])
            shapes = Shapes()
            shapes_one = [(1, GRID, GRID)]
            model = _transformer(TRAINING["seed"]).train()
            n_steps = TRAINING["steps"]
            opt = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=0.0)
            warm = TRAINING["warmup"]
            sched = torch.optim.lr_scheduler.LambdaLR(
                opt, lambda s: min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * s / n_steps))
            )
            g = torch.Generator().manual_seed(TRAINING["data_seed"] + 1)
            batch = TRAINING["batch"]
            losses = []
            for step in range(n_steps):
                idx = torch.randint(len(PROMPTS), (batch,), generator=g)
                x0 = shapes.sample(idx, g)
                eps = torch.randn(x0.shape, generator=g)
                sigma = torch.sigmoid(torch.randn(batch, generator=g))
                xt = (1 - sigma.view(-1, 1, 1)) * x0 + sigma.view(-1, 1, 1) * eps
                v = sampler.velocity(
                    model, xt, sigma * 1000, sampler.Prompted(embeds[idx], None, pads[idx]), [shapes_one] * batch
                )
                loss = ((v.float() - (eps - x0)) ** 2).mean()
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                sched.step()
                losses.append(loss.item())
                if (step + 1) % 500 == 0:
                    log(f"distill: tiny teacher step {step + 1}/{n_steps}, loss {sum(losses[-100:]) / 100:.4f}")
            model.eval()
            measured = _measure(model, embeds, pads, shapes, shapes_one)
            detail = check_structured(measured["teacher8_to_data"], measured["untrained8_to_data"])
            log(f"distill: tiny teacher trained in {time.perf_counter() - t0:.0f} s: {detail}")
            out = Path(out)
            shutil.copytree(base, out, dirs_exist_ok=True)
            shutil.rmtree(out / "transformer")
            model.save_pretrained(out / "transformer")
            mark = {
                "kind": "qwen-image-2.1",
                "seed": 0,
                "version": TRAINED21_VERSION,
                "dynamic_shifting": False,
                "trained": {
                    "data": "distill/shapes.py",
                    "prompts": list(PROMPTS),
                    "arch": ARCH,
                    "training": {**TRAINING, "lr": LEARNING_RATE, "steps": n_steps},
                    "final_loss": round(sum(losses[-100:]) / min(100, len(losses)), 5),
                    "seconds": round(time.perf_counter() - t0, 1),
                    **measured,
                },
            }
            (out / TINY_MARK).write_text(json.dumps(mark, indent=1))
    finally:
        torch.set_num_threads(threads)
    return Path(out)


class _Measured(TypedDict):
    """What _measure finds (recorded in the teacher's mark)."""

    teacher8_to_data: float
    teacher4_to_data: float
    untrained8_to_data: float
    naive4_to_teacher8: float
    teacher8_nearest_another_prompt: str


def _measure(
    model: Any,
    embeds: torch.Tensor,
    pads: torch.Tensor,
    shapes: Shapes,
    shapes_one: list[tuple[int, int, int]],
    n: int = 48,
) -> _Measured:
    """teacher@8 and @4 vs an untrained transformer@8, from the same noise (not a training draw), on the model's own
    grid (SAMPLE_SIGMAS) and every second sigma of it."""
    from aipc_env.workers.distill import sampler

    g = torch.Generator().manual_seed(12345)
    idx = [i % len(PROMPTS) for i in range(n)]
    noise = torch.randn(n, GRID * GRID, CHANNELS, generator=g)
    prompted = sampler.Prompted(embeds[idx], None, pads[idx])
    grid8 = SAMPLE_SIGMAS
    t8 = _sample(model, noise, prompted, grid8, shapes_one)
    t4 = _sample(model, noise, prompted, grid8[::2], shapes_one)
    u8 = _sample(_transformer(TRAINING["seed"] + 1).eval(), noise, prompted, grid8, shapes_one)

    def mean(values: list[float]) -> float:
        return round(sum(values) / len(values), 5)

    wrong = sum(
        1 for x, p in zip(t8, idx) if min(range(len(PROMPTS)), key=lambda q: distance_to_data(x[None], [q], shapes)[0]) != p
    )

    return {
        "teacher8_to_data": mean(distance_to_data(t8, idx, shapes)),
        "teacher4_to_data": mean(distance_to_data(t4, idx, shapes)),
        "untrained8_to_data": mean(distance_to_data(u8, idx, shapes)),
        "naive4_to_teacher8": round(float(((t4 - t8) ** 2).mean()), 5),
        "teacher8_nearest_another_prompt": f"{wrong}/{n}",
    }
