"""Peak memory of a distill stage: the device's allocator peak on a GPU/XPU, else the process's peak resident set
(the worker process's peak so far: stages share one process)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = ["peak_memory", "reset_peak"]


def _backend(device: torch.device) -> Any:  # torch.cuda or torch.xpu, or None
    import torch

    return getattr(torch, device.type, None) if device.type in ("cuda", "xpu") else None


def reset_peak(device: torch.device) -> None:
    backend = _backend(device)
    if backend is not None and hasattr(backend, "reset_peak_memory_stats"):
        backend.reset_peak_memory_stats(device)


def _process_peak_bytes() -> int:
    if sys.platform == "win32":
        import psutil  # accelerate's own dependency

        return int(psutil.Process().memory_info().peak_wset)
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)  # bytes on macOS, KiB on Linux


def peak_memory(device: torch.device) -> dict[str, str | int]:
    backend = _backend(device)
    if backend is not None and hasattr(backend, "max_memory_allocated"):
        return {"kind": "device", "device": str(device), "bytes": int(backend.max_memory_allocated(device))}
    return {"kind": "process-rss", "device": str(device), "bytes": _process_peak_bytes()}
