"""`aipc-env container render | build | check`: the training env as a reproducible OCI image made from a lock."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

from packaging.utils import canonicalize_name

from aipc_env.container.engine import Engine, build_argv, image_id, image_labels, mounted_image
from aipc_env.container.inputs import APT_KEY, APT_LIST, DEFAULT_BASE, check_pinned, parse_apt_source, validate_image_reference
from aipc_env.container.render import (
    CONTAINERFILE,
    LOCK_COPY,
    REQUIREMENTS,
    TORCH_REQUIREMENTS,
    VENV,
    WHEELS,
    ContextSpec,
    containerfile,
    containerignore,
)
from aipc_env.core.fileio import atomic_write_text
from aipc_env.core.formats import VersionedModel, write_model
from aipc_env.core.interrupts import checkpoint
from aipc_env.core.procs import run_logged
from aipc_env.errors import AipcError, InputError
from aipc_env.lock.artifacts import Artifact, check_holds_aipc_env, file_sha256, hashed_requirements, select_artifacts
from aipc_env.lock.lockfile import read_pylock
from aipc_env.matrix import load_matrix
from aipc_env.trainenv.drift import DriftItem, compute_drift

__all__ = [
    "SPEC_NAME",
    "ContextRequest",
    "ImageBuildReport",
    "ImageCheckReport",
    "ImageLock",
    "build_image",
    "check_image",
    "render_context",
]

SPEC_NAME = "aipc-image.json"
RENDERING_MARK = ".aipc-render-incomplete"
"""In a context folder while a render writes it (written first, removed after the spec): a folder holding it is an
interrupted render of aipc-env's, which the next render finishes and a build refuses."""
AIPC_WHEEL = "aipc_env-{version}-py3-none-any.whl"


@dataclass(frozen=True)
class ImageLock:
    path: Path
    pair: str
    """The pair id, or "custom" for a lock file given by path."""


@dataclass(frozen=True)
class ContextRequest:
    """What a build context is rendered from, as the command line gives it (None: the default: the per-user
    cache's images/<pair> folder, the base image's own Python)."""

    lock: ImageLock
    out: Path | None = None
    base: str = DEFAULT_BASE
    gpu_runtime: Literal["intel-apt", "none"] = "intel-apt"
    gpu_runtime_source: str | None = None
    gpu_runtime_key: Path | None = None
    gpu_runtime_key_fingerprint: str | None = None
    python: str | None = None


def _check_out(out: Path) -> None:
    """--out is new, empty, or an earlier render (its spec file is there): never someone's own folder."""
    if out.exists() and not out.is_dir():
        raise InputError("exists and is not a folder", path=out, key="--out", fix="choose a new folder")
    if out.is_dir() and any(out.iterdir()) and not (out / SPEC_NAME).is_file() and not (out / RENDERING_MARK).is_file():
        raise InputError(
            f"the folder is not empty and holds no earlier render ({SPEC_NAME})",
            path=out,
            key="--out",
            fix="choose a new or empty folder: a render writes a Containerfile and would replace yours",
        )


def render_context(req: ContextRequest, *, out: Path, python: str) -> tuple[ContextSpec, list[Artifact]]:
    """Write the build context into `out` for the image's `python` (Containerfile, the lock, the hashed requirements,
    .containerignore, the spec, and the GPU runtime's apt source and pinned key when given). Every user value is
    validated first."""
    from aipc_env import __version__

    validate_image_reference(req.base)
    _check_out(out)
    source = key_name = fingerprint = None
    if req.gpu_runtime == "intel-apt":
        from aipc_env.matrix.gpu_runtime import distribution_of_image, load_gpu_runtime

        load_gpu_runtime().needs_source(
            distribution_of_image(req.base),
            what=f"the base {req.base}",
            key_name="--gpu-runtime-source",
            given=bool(req.gpu_runtime_source),
        )
    if req.gpu_runtime_source:
        if req.gpu_runtime != "intel-apt":
            raise InputError("an apt source is only used with --gpu-runtime intel-apt", key="--gpu-runtime-source")
        source = parse_apt_source(req.gpu_runtime_source)
        if req.gpu_runtime_key is None:
            raise InputError(
                "an apt source needs the key that signs it",
                key="--gpu-runtime-key",
                fix="pass the repository's public key file and its fingerprint",
            )
        fingerprint = check_pinned(req.gpu_runtime_key, req.gpu_runtime_key_fingerprint)
        armored = b"BEGIN PGP PUBLIC KEY BLOCK" in req.gpu_runtime_key.read_bytes()[:4096]
        key_name = APT_KEY.removesuffix(".gpg") + (".asc" if armored else ".gpg")  # apt reads .asc armored
    lock = read_pylock(req.lock.path, "linux-64")
    check_holds_aipc_env(lock, python, req.lock.path, "linux-64")
    artifacts = select_artifacts(lock, python, req.lock.path)
    torch_stack = load_matrix().torch_stack()
    torch_layer = [a for a in artifacts if canonicalize_name(a.name) in torch_stack]
    rest = [a for a in artifacts if a not in torch_layer]
    spec = ContextSpec(
        pair=req.lock.pair,
        base=req.base,
        gpu_runtime=req.gpu_runtime,
        gpu_runtime_source=source.line().strip().replace(APT_KEY, key_name or APT_KEY) if source else None,
        gpu_runtime_key=key_name,
        gpu_runtime_key_fingerprint=fingerprint,
        python=python,
        lock_sha256=file_sha256(req.lock.path),
        aipc_env_wheel=AIPC_WHEEL.format(version=__version__),
        wheels=sorted(a.filename for a in artifacts),
        torch_layer=sorted(a.name for a in torch_layer),
    )
    out.mkdir(parents=True, exist_ok=True)
    (out / RENDERING_MARK).write_text("aipc-env is rendering this build context\n", encoding="utf-8")
    extra: tuple[str, ...] = ()
    if source is not None and key_name and req.gpu_runtime_key is not None:
        atomic_write_text(out / APT_LIST, (spec.gpu_runtime_source or "") + "\n")
        shutil.copyfile(req.gpu_runtime_key, out / key_name)
        extra = (APT_LIST, key_name)
    atomic_write_text(out / CONTAINERFILE, containerfile(spec))
    checkpoint("container:render-partial")
    atomic_write_text(out / ".containerignore", containerignore(extra))
    shutil.copyfile(req.lock.path, out / LOCK_COPY)
    atomic_write_text(out / TORCH_REQUIREMENTS, hashed_requirements(torch_layer))
    atomic_write_text(out / REQUIREMENTS, hashed_requirements(rest))
    (out / WHEELS).mkdir(exist_ok=True)
    write_model(out / SPEC_NAME, spec)
    (out / RENDERING_MARK).unlink()
    return spec, artifacts


def build_aipc_wheel(wheels: Path, log: Path) -> Path:
    """aipc-env itself as a wheel, built reproducibly (SOURCE_DATE_EPOCH=0) from the checkout."""
    from aipc_env import __version__
    from aipc_env.paths import checkout_root

    root = checkout_root()
    if root is None:
        raise AipcError(
            "building an image needs an aipc-env checkout (its wheel goes into the image)",
            fix="run from a clone of aipc-env (or set AIPC_ENV_HOME to one)",
        )
    target = wheels / AIPC_WHEEL.format(version=__version__)
    target.unlink(missing_ok=True)
    env = dict(os.environ, SOURCE_DATE_EPOCH="0")
    uv = shutil.which("uv")
    if uv:
        argv = [uv, "build", "--wheel", "--out-dir", str(wheels), str(root)]
    else:
        import sys

        argv = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(wheels), str(root)]
    run_logged(argv, log, env=env, echo=False)
    if not target.is_file():
        raise AipcError(f"the aipc-env wheel was not built ({target.name})", path=log)
    return target


class ImageBuildReport(VersionedModel):
    """`aipc-env container build --json`."""

    FORMAT: ClassVar[str] = "image build report"
    schema_version: Literal[1] = 1
    image: str
    image_id: str
    engine: str
    context: str
    spec: ContextSpec
    seconds: float
    log: str


def build_image(engine: Engine, context: Path, tag: str, log: Path) -> str:
    """Run the engine's build (the wheelhouse must be full); returns the image id."""
    if not (context / CONTAINERFILE).is_file() or (context / RENDERING_MARK).exists():
        raise InputError(
            "not a rendered context (no Containerfile, or a render was interrupted)",
            path=context,
            fix="aipc-env container render --out DIR (or container build, which renders first)",
        )
    checkpoint("container:before-image")
    run_logged(
        build_argv(engine, context, tag),
        log,
        echo=False,
        fix="read the log; a hash error means the wheelhouse does not match the lock",
    )
    checkpoint("container:after-image")
    return image_id(engine, tag)


class ImageCheckReport(VersionedModel):
    """`aipc-env container check IMAGE --json`: the image's installed packages against a lock."""

    FORMAT: ClassVar[str] = "image check report"
    schema_version: Literal[1] = 1
    image: str
    lockfile: str
    lock_sha256: str
    image_lock_sha256: str | None
    image_pair: str | None
    drift: list[DriftItem]

    @property
    def clean(self) -> bool:
        return not self.drift and self.lock_sha256 == self.image_lock_sha256


def check_image(image: str, lockfile: Path, log: Path) -> ImageCheckReport:
    """Read the image's site-packages (its metadata and RECORD hashes; nothing in the image runs)."""
    from importlib import metadata

    from aipc_env.facts.gather import modified_files

    labels = image_labels(image)
    lock = read_pylock(lockfile)
    with mounted_image(image, log) as root:
        found = sorted((root / VENV.lstrip("/")).glob("lib/python3.*/site-packages"))  # read, not assumed
        if len(found) != 1:
            raise InputError(f"{image} has no aipc-env training env ({VENV})", fix="check the image name")
        site = found[0]
        python = site.parent.name.removeprefix("python")
        installed: dict[str, str] = {}
        for dist in metadata.distributions(path=[str(site)]):
            name = dist.metadata["Name"]
            if name:
                from packaging.utils import canonicalize_name

                installed[canonicalize_name(name)] = dist.version
        installed.pop("aipc-env", None)
        modified = modified_files([str(site)], set(installed))
    drift = [
        d for d in compute_drift(lock, installed, None, "linux-64", python, modified) if d.name != "aipc-env"
    ]  # aipc-env itself goes in from its own wheel, not the lock
    return ImageCheckReport(
        image=image,
        lockfile=str(lockfile),
        lock_sha256=file_sha256(lockfile),
        image_lock_sha256=labels.get("io.aipc-env.lock-sha256"),
        image_pair=labels.get("io.aipc-env.pair"),
        drift=drift,
    )
