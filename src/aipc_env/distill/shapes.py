"""The synthetic image distribution of the trained tiny teacher, as words (torch-free; the tensors are made in
aipc_env.workers.distill.tinytrained21): a colored shape on an empty 4x4 latent grid (64x64 pixels), whose color and
kind follow the prompt and whose place is drawn from four (so each prompt's distribution has four modes, and an
8-step sample differs from a 4-step one from the same noise: what a 4-step student must learn).

Every prompt has the same length, so the byte-level tokenizer gives every prompt the same number of tokens (the
teacher trains on whole batches without padding)."""

from __future__ import annotations

__all__ = [
    "COLORS",
    "EVAL_SEEDS",
    "KINDS",
    "PROMPTS",
    "SAMPLE_SIGMAS",
    "STRUCTURED_RATIO",
    "TRAINED21_VERSION",
    "TRAIN_REPEATS",
    "check_structured",
    "eval_prompts",
    "train_prompts",
]

TRAINED21_VERSION = 1
"""Bumped when the trained teacher changes (data, architecture or training): the cached copy is rebuilt."""
COLORS = ("blue", "gold")
KINDS = ("square", "stripe")
"""square: a 2x2 block in one of the four quadrants; stripe: one of the four rows."""
PROMPTS = tuple(f"a {color} {kind}" for color in COLORS for kind in KINDS)
TRAIN_REPEATS = 128
"""Trajectories per prompt in the training list, each line with its own noise seed (0, 1, ...: a prompt's
default seed is derived from the prompt alone, so repeated lines without seeds would be one trajectory)."""
SAMPLE_SIGMAS = [1.0, 0.9545, 0.9, 0.8333, 0.75, 0.6429, 0.5, 0.3]
"""The teacher's own 8-step grid (model_index.json sample_sigmas, as the real Turbo ships one): linspace(1, 1/8)
time-shifted by 3 (3s / (1 + 2s)), rounded. It spends its steps where this teacher commits to a place: on a
prototype of this teacher, naive@4 landed 0.008 (latent MSE) from teacher@8 on this grid, 0.0025 on the plain
linspace, and teacher@8 stayed as close to the data."""
EVAL_SEEDS = tuple(range(1000, 1016))
"""G3's noise seeds on this model (16 per prompt: 64 pairs): none is a training trajectory's (those are 0 .. 511)."""


def train_prompts(repeats: int = TRAIN_REPEATS) -> list[tuple[str, int]]:
    """(prompt, noise seed) lines: every prompt `repeats` times, each line its own seed."""
    return [(p, i * len(PROMPTS) + j) for i in range(repeats) for j, p in enumerate(PROMPTS)]


def eval_prompts() -> list[str]:
    return list(PROMPTS)


STRUCTURED_RATIO = 0.1
"""The trained teacher's 8-step samples: their mean distance to the data at most this fraction of an untrained
transformer's (the build refuses to cache a teacher that did not learn)."""


def check_structured(teacher: float, untrained: float, ratio: float = STRUCTURED_RATIO) -> str:
    """The build's bound: teacher@8's mean distance to the data at most `ratio` times an untrained transformer's
    from the same noise (equal passes; NaN fails)."""
    from aipc_env.errors import AipcError

    detail = (
        f"teacher@8 distance to the data {teacher:.4g} vs an untrained transformer's {untrained:.4g} "
        f"(bound: at most {ratio:g} times)"
    )
    if not teacher <= ratio * untrained:
        raise AipcError(
            f"the tiny teacher did not learn its distribution: {detail}",
            fix="a bug in the tiny teacher's build: report it with this line",
        )
    return detail
