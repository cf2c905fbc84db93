"""System memory: the reading (Windows API or /proc/meminfo) and the marketed RAM tier. Standard library only:
the doctor reads it, and the memory monitor samples it inside the training env."""

from __future__ import annotations

import sys
from pathlib import Path

__all__ = [
    "GIB",
    "GPU_MARGIN",
    "GPU_SHARE_DEFAULT",
    "GPU_SHARE_RAISED",
    "RAM_TIERS",
    "gpu_budget_bytes",
    "parse_meminfo",
    "ram_tier_gb",
    "system_memory",
]

GIB = 2**30
RAM_TIERS = (8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256)
GPU_SHARE_DEFAULT = 57
"""Percent of system RAM an iGPU may commit: Windows' SystemPartitionCommitLimitPercentage default (runbook §2:
"raised from default ~57")."""
GPU_SHARE_RAISED = 75
"""The runbook's raised ceiling (§2: "e.g. 75"), which the doctor's commit-limit check asks for."""
GPU_MARGIN = 0.15
"""Fraction of the GPU share a recommended config leaves free. Inferred: the runbook gives no number; it says the
recommender "picks the safest config that fits" and asks to verify headroom before loosening (§5.2). It covers what
the memory model does not measure: the driver's and runtime's own allocations, the allocator's fragmentation, and
the desktop, which shares the iGPU."""


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


def gpu_budget_bytes(tier_gb: int, share_percent: int = GPU_SHARE_DEFAULT, margin: float = GPU_MARGIN) -> int:
    """What a training step may use on an iGPU of a `tier_gb` machine: its GPU share of the RAM, less the margin."""
    if not 0 < share_percent <= 100 or not 0 <= margin < 1:
        raise ValueError(f"share {share_percent}% or margin {margin} out of range")
    return int(tier_gb * GIB * share_percent / 100 * (1 - margin))
