"""Where the built-in tiny base lives: its recipe (a change of any value builds a new one), its per-user cache
folder, and the check that the folder can be one, run by `train` before any build. Torch-free; the base is built
and loaded by workers/train/tinyedit.py."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from aipc_env.errors import InputError


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


def recipe_key() -> str:
    return hashlib.sha256(json.dumps(asdict(BASE_RECIPE), sort_keys=True).encode()).hexdigest()[:12]


def base_cache_root() -> Path:
    """Where the built-in model is trained once and kept (the per-user cache)."""
    from aipc_env.paths import cache_dir

    return cache_dir() / "builtin"


def check_base_cache(cache_root: Path) -> Path:
    """The tiny base's folder under cache_root, refused before any build when it cannot be one (the cache root, or
    the folder itself, a file; a read-only place): found in a second, not after the 10-minute build."""
    from aipc_env.core.fileio import check_writable

    folder = Path(cache_root) / f"tiny-edit-base-{recipe_key()}"
    check_writable(cache_root, "the built-in model's cache", folder=True)
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        raise InputError(
            "the built-in model's cache is a file or a link where its folder goes",
            path=folder,
            fix="move it away (aipc-env builds the folder again)",
        )
    return folder
