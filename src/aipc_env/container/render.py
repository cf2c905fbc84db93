"""Render a build context for the training env as an OCI image (pure): the Containerfile, the hashed requirements
of the lock's linux-64 pip layer, the lock itself, and a .containerignore.

The pip layer is installed with `--no-index --find-links /wheels --require-hashes` from a wheelhouse bind-mounted at
build time (no dead layer of wheels in the image), in two layers: first torch and what its release pins
(`Matrix.torch_stack`, their own hashed requirements file), then the rest after the lock is COPYed, so a changed
lock invalidates the rest's layer and a changed pin outside torch's stack reuses the torch layer. aipc-env itself
goes in as a wheel. The image runs as a non-root user in the render and video groups,
with `aipc-env` as its entrypoint. SOURCE_DATE_EPOCH (a build argument) and the engine's `--timestamp 0` make two
builds of the same context bit-identical.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field

from aipc_env import __version__
from aipc_env.container.inputs import APT_LIST
from aipc_env.core.formats import VersionedModel

__all__ = [
    "CONTAINERFILE",
    "GPU_RUNTIMES",
    "LOCK_COPY",
    "REQUIREMENTS",
    "TORCH_REQUIREMENTS",
    "VENV",
    "WHEELS",
    "ContextSpec",
    "containerfile",
    "containerignore",
]

CONTAINERFILE = "Containerfile"
LOCK_COPY = "pylock.linux-64.toml"
REQUIREMENTS = "requirements.lock.txt"
TORCH_REQUIREMENTS = "requirements.torch.txt"
WHEELS = "wheels"
VENV = "/opt/aipc-env"
GPU_RUNTIMES = ("intel-apt", "none")


class ContextSpec(VersionedModel):
    """<context>/aipc-image.json: what the context was rendered from (the labels carry the same facts)."""

    FORMAT: ClassVar[str] = "image context spec"
    schema_version: Literal[1] = 1
    pair: str
    base: str
    gpu_runtime: Literal["intel-apt", "none"]
    gpu_runtime_source: str | None = None
    """The apt line written into the image (validated; signed-by the pinned key), when one was given."""
    gpu_runtime_key: str | None = None
    """The keyring file name in the context (COPYed to /usr/share/keyrings/)."""
    gpu_runtime_key_fingerprint: str | None = None
    python: str = Field(pattern=r"^3\.[0-9]{1,2}$")
    lock_sha256: str
    aipc_env_version: str = __version__
    aipc_env_wheel: str
    wheels: list[str]
    torch_layer: list[str] = []
    """The packages the image installs in a layer before the rest (torch and what its release pins, as locked)."""


def _template(name: str) -> str:
    return (Path(__file__).with_name("templates") / name).read_text(encoding="utf-8")


def containerfile(spec: ContextSpec) -> str:
    """The Containerfile of a context (templates/Containerfile): no user data but the base image reference
    (validated again here) and the apt source's file names; labels are JSON-quoted."""
    from aipc_env.container.inputs import validate_image_reference
    from aipc_env.core.templating import render_marked

    gpu = ""
    if spec.gpu_runtime == "intel-apt":
        source = (
            render_marked(
                _template("gpu-source.Containerfile"),
                "gpu-source.Containerfile",
                {"fingerprint": spec.gpu_runtime_key_fingerprint or "", "apt_list": APT_LIST, "key": spec.gpu_runtime_key or ""},
            )
            if spec.gpu_runtime_source
            else ""
        )
        from aipc_env.matrix.gpu_runtime import load_gpu_runtime

        packages = load_gpu_runtime().packages  # each a Debian package name (the table's own pattern)
        gpu = render_marked(
            _template("gpu-runtime.Containerfile"),
            "gpu-runtime.Containerfile",
            {"packages_list": ", ".join(packages), "packages": " ".join(packages), "source": source},
            serialized=frozenset({"packages_list", "packages", "source"}),
        )
    torch_layer = ""
    if spec.torch_layer:
        from aipc_env.core.specs import check_project_name

        for name in spec.torch_layer:  # written into a comment line: project names only (validated again here)
            check_project_name(name)
        torch_layer = render_marked(
            _template("torch-layer.Containerfile"),
            "torch-layer.Containerfile",
            {
                "packages_list": ", ".join(spec.torch_layer),
                "torch_requirements": TORCH_REQUIREMENTS,
                "wheels": WHEELS,
                "venv": VENV,
            },
            serialized=frozenset({"packages_list", "venv"}),
        )
    labels = {
        "org.opencontainers.image.title": "aipc-env training env",
        "org.opencontainers.image.version": spec.aipc_env_version,
        "org.opencontainers.image.base.name": spec.base,
        "io.aipc-env.pair": spec.pair,
        "io.aipc-env.lock-sha256": spec.lock_sha256,
        "io.aipc-env.version": spec.aipc_env_version,
        "io.aipc-env.python": spec.python,
        "io.aipc-env.gpu-runtime": spec.gpu_runtime,
    }
    label_lines = " \\\n      ".join(f"{k}={json.dumps(v)}" for k, v in labels.items())  # quoted and escaped
    major_minor = tuple(int(x) for x in spec.python.split(".")[:2])
    return render_marked(
        _template("Containerfile"),
        "Containerfile",
        {
            "version": spec.aipc_env_version,
            "pair": spec.pair,
            "base": validate_image_reference(spec.base),
            "python_tuple": repr(major_minor),
            "python": spec.python,
            "gpu_runtime": gpu,
            "torch_layer": torch_layer,
            "venv": VENV,
            "lock_copy": LOCK_COPY,
            "requirements": REQUIREMENTS,
            "wheels": WHEELS,
            "aipc_env_wheel": spec.aipc_env_wheel,
            "labels": label_lines,
        },
        serialized=frozenset({"base", "python_tuple", "gpu_runtime", "torch_layer", "venv", "labels"}),
    )


def containerignore(extra: tuple[str, ...] = ()) -> str:
    names = ("Containerfile", LOCK_COPY, REQUIREMENTS, TORCH_REQUIREMENTS, WHEELS, *extra)
    return "# only what the Containerfile names is sent\n*\n" + "".join(f"!{n}\n" for n in names)
