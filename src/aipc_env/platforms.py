"""Target platforms (conda subdir names) and the PEP 508 marker environments that describe them."""

from __future__ import annotations

import sys
from typing import Literal

__all__ = ["Platform", "PLATFORMS", "marker_environment", "current_platform"]

Platform = Literal["win-64", "linux-64"]
PLATFORMS: tuple[Platform, ...] = ("win-64", "linux-64")

_MARKER_ENVS: dict[str, dict[str, str]] = {
    "win-64": {"platform_system": "Windows", "platform_machine": "AMD64", "sys_platform": "win32",
               "os_name": "nt"},
    "linux-64": {"platform_system": "Linux", "platform_machine": "x86_64", "sys_platform": "linux",
                 "os_name": "posix"},
}


def marker_environment(platform: Platform, python_version: str = "3.12") -> dict[str, str]:
    env = dict(_MARKER_ENVS[platform])
    env["python_version"] = ".".join(python_version.split(".")[:2])
    env["python_full_version"] = python_version if python_version.count(".") == 2 else python_version + ".0"
    return env


def current_platform() -> Platform:
    """The platform of this machine, as a target; every non-Windows system counts as linux-64."""
    return "win-64" if sys.platform == "win32" else "linux-64"
