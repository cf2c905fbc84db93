"""The image workflows: which lock an image is built from (the pair policy for another machine, or a lock file),
its build context, and the build itself (render, fetch the lock's wheels, build aipc-env's wheel, build the
image), as one function each. `aipc-env container` parses and calls them."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from aipc_env.container.build import ContextRequest, ImageBuildReport, ImageLock
from aipc_env.container.inputs import DEFAULT_BASE
from aipc_env.container.render import ContextSpec
from aipc_env.errors import InputError
from aipc_env.lock.artifacts import Artifact

__all__ = [
    "DEFAULT_BASE",
    "ImageBuild",
    "RenderedContext",
    "base_python",
    "base_suite",
    "build_from_lock",
    "default_image",
    "image_lock",
    "image_tag",
    "render_from_lock",
]

BASE_SUITES = {"debian-13": "trixie", "debian-12": "bookworm"}


def image_tag(pair: str) -> str:
    """The image a pair's build is tagged with, and the one `container run` runs by default."""
    return f"localhost/aipc-env:{pair}"


def image_lock(*, lock: Path | None, pair_flag: str | None, lock_root: Path, matrix_path: Path | None) -> ImageLock:
    """The linux-64 lock of an image: --lock, else the lock of the pair the policy picks for another machine."""
    from aipc_env.lock.lockfile import pylock_path
    from aipc_env.matrix import load_matrix
    from aipc_env.trainenv.situation import target_pair

    if lock is not None and pair_flag:
        raise InputError(
            "--pair and --lock name two locks; give one",
            key="--lock",
            fix="--pair ID uses lockfiles/<ID>/pylock.linux-64.toml; --lock PYLOCK uses that file",
        )
    if lock is not None:
        if not lock.is_file():
            raise InputError("lockfile not found", path=lock, key="--lock")
        return ImageLock(lock, "custom")
    pair = target_pair(load_matrix(matrix_path), "linux-64", pair_flag)
    path = pylock_path(lock_root / pair.id, "linux-64")
    if not path.is_file():
        raise InputError(
            f"no linux-64 lock for {pair.id}", path=path, fix=f"make one: nox -s lock -- --pair {pair.id}, or pass --lock PYLOCK"
        )
    return ImageLock(path, pair.id)


def default_image(*, pair_flag: str | None, matrix_path: Path | None) -> str:
    """The image `container run` runs without --image: the tag `container build` gives the policy's pair."""
    from aipc_env.matrix import load_matrix
    from aipc_env.trainenv.situation import target_pair

    return image_tag(target_pair(load_matrix(matrix_path), "linux-64", pair_flag).id)


def base_python(base: str) -> str:
    """The python3 of a base image the distribution table knows (else the user says it)."""
    from aipc_env.matrix.gpu_runtime import distribution_of_image, load_gpu_runtime

    python = load_gpu_runtime().python_of(distribution_of_image(base))
    if python is None:
        raise InputError(
            f"the Python of {base} is not known", key="--python", fix="pass the base image's python3 version, e.g. --python 3.12"
        )
    return python


def base_suite(base: str) -> str:
    """The Debian suite --base-from-mirror bootstraps for a base tag (…:trixie, …:bookworm)."""
    from aipc_env.matrix.gpu_runtime import distribution_of_image

    suite = BASE_SUITES.get(distribution_of_image(base) or "")
    if suite is None:
        raise InputError(
            f"--base-from-mirror bootstraps Debian from the distro mirror; {base} names no Debian suite",
            key="--base",
            fix="name it localhost/aipc-base:trixie (or :bookworm)",
        )
    return suite


@dataclass(frozen=True)
class RenderedContext:
    spec: ContextSpec
    artifacts: list[Artifact]
    out: Path
    lock: ImageLock


def render_from_lock(req: ContextRequest) -> RenderedContext:
    """Write the build context (default folder: the per-user cache's images/<pair>)."""
    from aipc_env.container.build import render_context
    from aipc_env.paths import cache_dir

    out = req.out or cache_dir() / "images" / req.lock.pair
    spec, artifacts = render_context(req, out=out, python=req.python or base_python(req.base))
    return RenderedContext(spec, artifacts, out, req.lock)


@dataclass(frozen=True)
class ImageBuild:
    context: ContextRequest
    engine: str | None = None
    tag: str | None = None
    base_from_mirror: bool = False
    find_links: list[Path] = field(default_factory=list)


def build_from_lock(build: ImageBuild, say: Callable[[str], None]) -> ImageBuildReport:
    """Render (every input checked before any long step), bootstrap the base when asked, fetch the lock's wheels
    (sha256-checked), build aipc-env's wheel, build the image."""
    from aipc_env.container.build import build_aipc_wheel, build_image
    from aipc_env.container.engine import base_from_mirror, find_engine
    from aipc_env.lock.artifacts import fill_wheelhouse
    from aipc_env.paths import cache_dir, log_path

    start = time.perf_counter()
    engine = find_engine(build.engine)
    log = log_path("container-build")
    rendered = render_from_lock(build.context)
    base = build.context.base
    if build.base_from_mirror:
        say(f"bootstrapping {base} from the distro mirror (log {log})")
        base_from_mirror(engine, base, cache_dir() / "images" / "base", log, suite=base_suite(base))
    out = rendered.out
    say(f"fetching {len(rendered.artifacts)} wheels (sha256-checked) into {out / 'wheels'}")
    fill_wheelhouse(
        rendered.artifacts,
        out / "wheels",
        lock_dir=rendered.lock.path.parent,
        cache=cache_dir() / "wheels",
        find_links=build.find_links,
        log=say,
    )
    build_aipc_wheel(out / "wheels", log)
    tag = build.tag or image_tag(rendered.spec.pair)
    say(f"building {tag} with {engine.name} (log {log})")
    ident = build_image(engine, out, tag, log)
    return ImageBuildReport(
        image=tag,
        image_id=ident,
        engine=engine.name,
        context=str(out),
        spec=rendered.spec,
        seconds=round(time.perf_counter() - start, 1),
        log=str(log),
    )
