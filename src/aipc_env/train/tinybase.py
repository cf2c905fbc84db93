"""Where the built-in tiny base lives: its recipe (a change of any value builds a new one), its per-user cache
folder, and the check that the folder can be one, run by `train` before any build. Torch-free; the base is built
and loaded by workers/train/tinyedit.py."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class BaseRecipe:
    """Everything that shapes the trained base; a change of any value builds a new one (its folder name has the
    hash)."""

    version: int = 1
    init_seed: int = 0
    steps: int = 800
    batch: int = 16
    pool: int = 512
    lr: float = 1e-3
    latent_hw: int = 8


BASE_RECIPE = BaseRecipe()
BASE_CACHE = "the built-in model's cache"
"""What the tiny base's cache is called in messages."""
BASE_RECORD = "aipc_tiny_base.json"
"""The tiny base's cache record (aipc_env.train.buildcache): its recipe and the hash of every file."""


def base_cache_root() -> Path:
    """Where the built-in model is trained once and kept (the per-user cache)."""
    from aipc_env.paths import cache_dir

    return cache_dir() / "builtin"


def check_base_cache(cache_root: Path) -> Path:
    """The tiny base's folder under cache_root (its name has the recipe's key), refused before any build when it
    cannot be one (the cache root, or the folder itself, a file; a read-only place): found in a second, not after
    the 10-minute build."""
    from aipc_env.core.fileio import check_writable
    from aipc_env.train.buildcache import check_cache_folder, recipe_key

    check_writable(cache_root, BASE_CACHE, folder=True)
    return check_cache_folder(Path(cache_root) / f"tiny-edit-base-{recipe_key(asdict(BASE_RECIPE))}", BASE_CACHE)
