"""Target platforms (conda subdir names) and the PEP 508 marker environments that describe them."""

from __future__ import annotations

import sys
from typing import Literal

DEFAULT_PYTHON = "3.12"
CPYTHON_MINORS = tuple(f"3.{minor}" for minor in range(9, 16))
"""Every CPython minor a pair's env, lock or image may be built for, oldest first (3.9 to 3.15): the one list."""
"""The Python of an env when nothing names one (a lock's own Python, from lock-meta.json, comes first)."""

__all__ = [
    "DEFAULT_PYTHON",
    "PLATFORMS",
    "Platform",
    "current_platform",
    "display_adapters",
    "has_intel_gpu",
    "marker_environment",
    "wheel_platform_fits",
]

Platform = Literal["win-64", "linux-64"]
PLATFORMS: tuple[Platform, ...] = ("win-64", "linux-64")

_MARKER_ENVS: dict[str, dict[str, str]] = {
    "win-64": {"platform_system": "Windows", "platform_machine": "AMD64", "sys_platform": "win32", "os_name": "nt"},
    "linux-64": {"platform_system": "Linux", "platform_machine": "x86_64", "sys_platform": "linux", "os_name": "posix"},
}
_CPYTHON = {"implementation_name": "cpython", "platform_python_implementation": "CPython"}


def lock_environment(platform: Platform) -> str:
    """The PEP 751 `environments` marker of a platform's pylock: the OS and machine the lock is for."""
    env = _MARKER_ENVS[platform]
    return f"sys_platform == '{env['sys_platform']}' and platform_machine == '{env['platform_machine']}'"


def wheel_platform_fits(tag: str, platform: Platform) -> bool:
    """Whether a wheel's platform tag installs on a target: `any`; win_amd64 on win-64; on linux-64 (glibc x86_64)
    linux_x86_64 and every manylinux x86_64 tag (torch <= 2.12 is tagged linux_x86_64, later manylinux)."""
    if tag == "any":
        return True
    if platform == "win-64":
        return tag == "win_amd64"
    return tag == "linux_x86_64" or (tag.startswith("manylinux") and tag.endswith("_x86_64"))


def marker_environment(platform: Platform, python_version: str = DEFAULT_PYTHON) -> dict[str, str]:
    env = {**_MARKER_ENVS[platform], **_CPYTHON}
    env["python_version"] = ".".join(python_version.split(".")[:2])
    env["python_full_version"] = python_version if python_version.count(".") == 2 else python_version + ".0"
    return env


def current_platform() -> Platform:
    """The platform of this machine, as a target; every non-Windows system counts as linux-64."""
    return "win-64" if sys.platform == "win32" else "linux-64"


def display_adapters() -> list[tuple[str, str, str, str]]:
    """(PCI vendor id, device id, name, source) of the display adapters, read fast and without subprocesses:
    /sys/class/drm on Linux, EnumDisplayDevicesW on Windows. Standard library only (the noxfile uses it before
    any env exists). Vendor and device ids are lower-case hex without 0x (Intel is 8086)."""
    found: list[tuple[str, str, str, str]] = []
    if sys.platform == "win32":
        import ctypes
        import re
        from ctypes import wintypes

        class _Display(ctypes.Structure):
            _fields_ = [
                ("cb", wintypes.DWORD),
                ("DeviceName", wintypes.WCHAR * 32),
                ("DeviceString", wintypes.WCHAR * 128),
                ("StateFlags", wintypes.DWORD),
                ("DeviceID", wintypes.WCHAR * 128),
                ("DeviceKey", wintypes.WCHAR * 128),
            ]

        seen = set()
        i = 0
        while True:
            dev = _Display()
            dev.cb = ctypes.sizeof(dev)
            if not ctypes.windll.user32.EnumDisplayDevicesW(None, i, ctypes.byref(dev), 0):  # type: ignore[attr-defined]  # ctypes.windll exists on Windows only (this branch runs there)
                break
            i += 1
            ven = re.search(r"VEN_([0-9A-Fa-f]{4})", dev.DeviceID)
            did = re.search(r"DEV_([0-9A-Fa-f]{4})", dev.DeviceID)
            key = (dev.DeviceString, dev.DeviceID)
            if ven and key not in seen:
                seen.add(key)
                found.append((ven.group(1).lower(), did.group(1).lower() if did else "", dev.DeviceString, "EnumDisplayDevices"))
        return found
    from pathlib import Path

    for card in sorted(Path("/sys/class/drm").glob("card[0-9]*")):
        if "-" in card.name:
            continue
        try:
            vendor = (card / "device" / "vendor").read_text().strip().lower().removeprefix("0x")
            device = (card / "device" / "device").read_text().strip().lower().removeprefix("0x")
        except OSError:
            continue
        name = f"{'Intel' if vendor == '8086' else 'PCI ' + vendor} GPU {device}"
        found.append((vendor, device, name, str(card)))
    return found


def has_intel_gpu() -> bool:
    """Whether this machine lists an Intel display adapter now (aipc_env.core.gpus.is_intel_gpu; the doctor asks its
    gathered facts instead: Facts.has_intel_gpu, which adds sycl-ls)."""
    from aipc_env.core.gpus import is_intel_gpu

    return any(is_intel_gpu(vendor, name) for vendor, _device, name, _source in display_adapters())
