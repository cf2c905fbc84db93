"""environments/gpu-runtime.yaml: the Intel GPU user space on Linux and where each distribution gets it (one home
for the image and the Ansible play)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, ClassVar, Literal

from pydantic import Field, field_validator

from aipc_env.core.formats import StrictModel, VersionedModel, validate_versioned
from aipc_env.core.specs import check_identifier
from aipc_env.errors import InputError

__all__ = ["Distribution", "GpuRuntimeTable", "distribution_of_image", "load_gpu_runtime"]


class Distribution(StrictModel):
    name: str
    source: Literal["distro", "intel-repo", "unsupported"]
    python: str = Field(pattern=r"^3\.\d{1,2}$")
    """The distribution's python3 (X.Y): an image built on it needs a lock that covers it."""
    why: str
    repository: str | None = None
    """Intel's repository line for client GPUs (Core Ultra, Arc), for `intel-repo` distributions."""


class GpuRuntimeTable(VersionedModel):
    FORMAT: ClassVar[str] = "GPU runtime table"
    schema_version: Literal[1] = 1
    checked: str = Field(pattern=r"^\d{4}-\d{2}-\d{2}$")
    packages: list[Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9.+-]+$")]] = Field(min_length=1)
    """Debian package names (written into Containerfiles and plays: the pattern keeps them names)."""
    distributions: dict[str, Distribution]
    """`<os-release ID>-<VERSION_ID>` (Debian by major version) -> where the runtime comes from."""

    @field_validator("distributions")
    @classmethod
    def _keys(cls, value: dict[str, Distribution]) -> dict[str, Distribution]:
        for key in value:
            check_identifier(key, "distribution key")
        return value

    def needs_source(self, key: str | None, *, what: str, key_name: str, given: bool = False) -> None:
        """Refuse, by name, installing the runtime where it cannot come from: a distribution Intel's packages do not
        install on (even with a source given), or one whose own packages lack it when no source is `given`."""
        entry = self.distributions.get(key or "")
        if entry is not None and entry.source == "unsupported":
            raise InputError(
                f"{what}: {entry.name} cannot run the Intel GPU runtime ({' '.join(entry.why.split())})",
                key=key_name,
                fix="use a Debian 13 or Ubuntu 24.04 base (--base), or --gpu-runtime none for a CPU image",
            )
        if given:
            return
        if entry is None:
            raise InputError(
                f"{what}: the Intel GPU runtime on {key or 'this distribution'} is not known to aipc-env "
                f"(known: {', '.join(sorted(self.distributions))})",
                key=key_name,
                fix="give Intel's graphics repository (--gpu-runtime-source, its key and fingerprint), or --gpu-runtime none",
            )
        if entry.source == "intel-repo":
            raise InputError(
                f"{what}: {entry.name} cannot provide the Intel GPU runtime ({' '.join(entry.why.split())})",
                key=key_name,
                fix=f"give Intel's graphics repository: --gpu-runtime-source "
                f"'{entry.repository or 'deb [arch=amd64] https://...'}' with --gpu-runtime-key and "
                "--gpu-runtime-key-fingerprint (see docs/fleet.md), or --gpu-runtime none for a CPU image",
            )

    def python_of(self, key: str | None) -> str | None:
        """The python3 of a distribution (None: not listed)."""
        entry = self.distributions.get(key or "")
        return entry.python if entry else None


def distribution_of_image(reference: str) -> str | None:
    """The distribution key of a base image reference (debian:bookworm, debian:12, ubuntu:24.04, ubuntu:noble), or
    None when the name does not say."""
    name = reference.rsplit("/", 1)[-1].split("@", 1)[0]
    repo, _, tag = name.partition(":")
    codenames = {"bookworm": "debian-12", "trixie": "debian-13", "noble": "ubuntu-24.04"}
    for word in tag.replace("_", "-").split("-"):
        if word in codenames:
            return codenames[word]
    if repo == "debian" and tag.split(".")[0].isdigit():
        return f"debian-{tag.split('.')[0]}"
    if repo == "ubuntu" and tag.replace(".", "").isdigit():
        return f"ubuntu-{tag}"
    return None


def load_gpu_runtime(path: Path | None = None) -> GpuRuntimeTable:
    from aipc_env.core.fileio import read_yaml
    from aipc_env.paths import environments_dir

    path = path or environments_dir() / "gpu-runtime.yaml"
    return validate_versioned(GpuRuntimeTable, read_yaml(path, "GPU runtime table"), path)
