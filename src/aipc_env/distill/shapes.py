"""The synthetic image distribution of the trained tiny teacher, as words (torch-free; the tensors are made in
aipc_env.distill.tinytrained21): a colored shape on an empty 4x4 latent grid (64x64 pixels), whose color and
kind follow the prompt and whose place is drawn from four (so each prompt's distribution has four modes, and an
8-step sample differs from a 4-step one from the same noise: what a 4-step student must learn).

Every prompt has the same length, so the byte-level tokenizer gives every prompt the same number of tokens (the
teacher trains on whole batches without padding)."""

from __future__ import annotations

__all__ = ["COLORS", "EVAL_SEEDS", "KINDS", "PROMPTS", "SAMPLE_SIGMAS", "TRAIN_REPEATS", "TRAINED21_VERSION",
           "eval_prompts", "train_prompts"]

TRAINED21_VERSION = 1
"""Bumped when the trained teacher changes (data, architecture or training): the cached copy is rebuilt."""
COLORS = ("blue", "gold")
KINDS = ("square", "stripe")
"""square: a 2x2 block in one of the four quadrants; stripe: one of the four rows."""
PROMPTS = tuple(f"a {color} {kind}" for color in COLORS for kind in KINDS)
TRAIN_REPEATS = 12
"""Trajectories per prompt in the training list, each line with its own noise seed (0, 1, ...: a prompt's
default seed is derived from the prompt alone, so repeated lines without seeds would be one trajectory)."""
SAMPLE_SIGMAS = [1.0, 0.9545, 0.9, 0.8333, 0.75, 0.6429, 0.5, 0.3]
"""The teacher's own 8-step grid (model_index.json sample_sigmas, as the real Turbo ships one): linspace(1, 1/8)
time-shifted by 3 (3s / (1 + 2s)), rounded. It spends its steps where this teacher commits to a place: the student
grid (every second sigma) then differs from the teacher's about three times more than on the plain linspace."""
EVAL_SEEDS = (1000, 1001)
"""G3's noise seeds on this model: none of them is a training trajectory's (those are 0 .. 47)."""


def train_prompts(repeats: int = TRAIN_REPEATS) -> list[tuple[str, int]]:
    """(prompt, noise seed) lines: every prompt `repeats` times, each line its own seed."""
    return [(p, i * len(PROMPTS) + j) for i in range(repeats) for j, p in enumerate(PROMPTS)]


def eval_prompts() -> list[str]:
    return list(PROMPTS)
