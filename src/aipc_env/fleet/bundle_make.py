"""`fleet bundle` as one function: the lock and Python a bundle is made for (checked before any long step, a bad
signing key too), aipc-env's own wheel, then fleet.bundle.build_bundle."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from aipc_env.core.platforms import Platform
from aipc_env.fleet.bundle import BundleManifest
from aipc_env.matrix import Pair

__all__ = ["BundleRequest", "make_bundle"]


@dataclass(frozen=True)
class BundleRequest:
    pair: Pair
    platform: Platform
    out: Path
    lock_root: Path
    lock: Path | None = None
    """A pylock given by path (default: the pair's lock under lock_root)."""
    python: str | None = None
    """The target's Python (default: the lock's lock-meta.json)."""
    sign: Path | None = None
    """The admin's secret key (its password: AIPC_ENV_SIGN_PASSWORD)."""
    find_links: list[Path] = field(default_factory=list)


def make_bundle(req: BundleRequest, say: Callable[[str], None]) -> BundleManifest:
    from aipc_env.container.build import build_aipc_wheel
    from aipc_env.errors import InputError
    from aipc_env.fleet.bundle import build_bundle
    from aipc_env.fleet.winget import render_yaml, winget_configuration
    from aipc_env.lock.lockfile import meta_path, pylock_path, read_meta
    from aipc_env.paths import cache_dir, log_path

    pair = req.pair
    lockfile = req.lock or pylock_path(req.lock_root / pair.id, req.platform)
    if not lockfile.is_file():
        raise InputError(
            f"no {req.platform} lock for {pair.id}",
            path=lockfile,
            fix=f"make it: nox -s lock -- --pair {pair.id} (or pass --lock PYLOCK)",
        )
    python = req.python or (read_meta(lockfile.parent).python if meta_path(lockfile.parent).is_file() else None)
    if not python:
        raise InputError(
            "the target's Python is unknown (no lock-meta.json next to the lock)", key="--python", fix="pass --python X.Y"
        )
    sign_key = None  # read first: a bad key is refused before any work
    if req.sign:
        from aipc_env.fleet.sign import read_secret_key

        sign_key = read_secret_key(req.sign, os.environ.get("AIPC_ENV_SIGN_PASSWORD"))
    log = log_path("bundle")
    wheel_dir = cache_dir() / "bundle-build"
    wheel_dir.mkdir(parents=True, exist_ok=True)
    wheel = build_aipc_wheel(wheel_dir, log)
    winget = render_yaml(winget_configuration(pair), pair) if req.platform == "win-64" else None
    return build_bundle(
        pair,
        req.platform,
        lockfile,
        req.out,
        python=python,
        aipc_wheel=wheel,
        sign_key=sign_key,
        winget_yaml=winget,
        cache=cache_dir() / "wheels",
        find_links=req.find_links,
        log=say,
    )
