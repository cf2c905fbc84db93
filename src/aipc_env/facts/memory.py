"""System memory: the reading (Windows API or /proc/meminfo) and the marketed RAM tier. Standard library only:
the doctor reads it, and the memory monitor samples it inside the training env."""

from __future__ import annotations

import sys
from pathlib import Path

__all__ = ["GIB", "RAM_TIERS", "parse_meminfo", "ram_tier_gb", "system_memory"]

GIB = 2**30
RAM_TIERS = (8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256)


def parse_meminfo(text: str) -> tuple[int, int]:
    """(total, available) bytes from /proc/meminfo text."""
    info = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        fields = rest.split()
        if fields and fields[0].isdigit():
            info[key.strip()] = int(fields[0]) * 1024
    if "MemTotal" not in info:
        raise ValueError("no MemTotal line in /proc/meminfo")
    return info["MemTotal"], info.get("MemAvailable", info.get("MemFree", 0))


def system_memory() -> tuple[int, int]:
    """(total, available) bytes of system memory."""
    if sys.platform == "win32":
        import ctypes

        class _Status(ctypes.Structure):
            _fields_ = [
                ("dwLength", ctypes.c_ulong),
                ("dwMemoryLoad", ctypes.c_ulong),
                ("ullTotalPhys", ctypes.c_ulonglong),
                ("ullAvailPhys", ctypes.c_ulonglong),
                ("ullTotalPageFile", ctypes.c_ulonglong),
                ("ullAvailPageFile", ctypes.c_ulonglong),
                ("ullTotalVirtual", ctypes.c_ulonglong),
                ("ullAvailVirtual", ctypes.c_ulonglong),
                ("ullAvailExtendedVirtual", ctypes.c_ulonglong),
            ]

        status = _Status()
        status.dwLength = ctypes.sizeof(_Status)
        ctypes.windll.kernel32.GlobalMemoryStatusEx(ctypes.byref(status))  # type: ignore[attr-defined]  # ctypes.windll exists on Windows only (this branch runs there)
        return int(status.ullTotalPhys), int(status.ullAvailPhys)
    return parse_meminfo(Path("/proc/meminfo").read_text())


def ram_tier_gb(total_bytes: int) -> int:
    """The marketed size of a machine's RAM (firmware and iGPU reservations make the total read lower)."""
    gib = total_bytes / GIB
    for tier in RAM_TIERS:
        if gib <= tier * 1.02:
            return tier if gib >= tier * 0.88 else max((t for t in RAM_TIERS if t < tier), default=tier)
    return round(gib)
