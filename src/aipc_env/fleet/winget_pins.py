"""environments/winget-packages.yaml: the exact WinGet versions the fleet configuration pins, each with where it was
seen in microsoft/winget-pkgs."""

from __future__ import annotations

import re
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field, model_validator

from aipc_env.core.formats import StrictModel, VersionedModel, validate_versioned

__all__ = ["PackagePin", "WinGetPins", "load_winget_pins", "winget_pins_path"]


class PackagePin(StrictModel):
    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9.\-_]*\.[A-Za-z0-9.\-_]+$")
    version: str = Field(min_length=1, pattern=r"^[0-9][0-9A-Za-z.\-+]*$")
    seen_in: str = Field(
        pattern=r"^microsoft/winget-pkgs@[0-9a-f]{40} manifests/\S+\.yaml$",
        description="repository@commit and the version manifest that lists this version",
    )

    def manifest_path(self) -> str:
        return self.seen_in.split(" ", 1)[1]


class WinGetPins(VersionedModel):
    FORMAT: ClassVar[str] = "WinGet package pins"
    FIX: ClassVar[str] = "see the comments at the top of environments/winget-packages.yaml"
    schema_version: Literal[1] = 1
    checked: str = Field(pattern=r"^\d{4}-\d{2}-\d{2}$")
    packages: dict[Literal["miniforge", "git"], PackagePin]
    oneapi: dict[str, PackagePin] = {}
    """oneAPI release (YYYY.N) -> the package that installs exactly it; a release missing here is not provisioned
    by winget."""

    def oneapi_for(self, release: str) -> PackagePin | None:
        return self.oneapi.get(release)

    @model_validator(mode="after")
    def _releases(self) -> WinGetPins:
        for release, pin in self.oneapi.items():
            if not re.fullmatch(r"\d{4}\.\d+", release) or not pin.version.startswith(release + "."):
                raise ValueError(f"oneapi.{release}: {pin.version} does not install release {release}")
        return self


def winget_pins_path() -> Path:
    from aipc_env.paths import environments_dir

    return environments_dir() / "winget-packages.yaml"


def load_winget_pins(path: Path | None = None) -> WinGetPins:
    from aipc_env.core.fileio import read_yaml

    path = path or winget_pins_path()
    return validate_versioned(WinGetPins, read_yaml(path, "WinGet package pins"), path)
