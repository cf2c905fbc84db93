"""Device choice and memory readings shared by the engine, verify, quantize and compare (imports torch lazily;
standard library + torch only, so it also runs inside any training env)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["DEVICE_FIX", "compute_dtype", "device_memory_mb", "peak_rss_mb", "pick_device", "require_device"]

DEVICE_FIX = (
    "run `aipc-env doctor --probe-device` and follow its fixes (GPU driver, ONEAPI_DEVICE_SELECTOR, the "
    "render group on Linux), or set `device: auto` to train on what this machine has"
)


def pick_device(requested: str | None = None) -> torch.device:
    """The requested device, else XPU, then CUDA, then CPU."""
    import torch

    if requested and requested != "auto":
        return torch.device(requested)
    if getattr(torch, "xpu", None) is not None and torch.xpu.is_available():
        return torch.device("xpu:0")
    if torch.cuda.is_available():
        return torch.device("cuda:0")
    return torch.device("cpu")


def require_device(requested: str | None) -> torch.device:
    """The device a config names, proven to exist (never a silent CPU fallback); 'auto' picks one."""
    import torch

    from aipc_env.errors import AipcError, ExitCode

    if not requested or requested == "auto":
        return pick_device()
    device = torch.device(requested)
    backend = {"xpu": getattr(torch, "xpu", None), "cuda": torch.cuda}.get(device.type)
    if device.type == "cpu":
        return device
    if backend is None or not backend.is_available():
        raise AipcError(
            f"device {requested} is not available: torch {torch.__version__} sees no "
            f"{device.type.upper()} device, and a run would silently use the CPU",
            key="device",
            fix=DEVICE_FIX,
            exit_code=ExitCode.PROBLEMS,
        )
    count = backend.device_count()
    if device.index is not None and device.index >= count:
        raise AipcError(
            f"device {requested} does not exist: {count} {device.type.upper()} device(s) here (indexes 0-{count - 1})",
            key="device",
            fix=DEVICE_FIX,
            exit_code=ExitCode.PROBLEMS,
        )
    return device


def compute_dtype(device: torch.device, name: str = "auto") -> torch.dtype:
    """fp32 on CPUs (bf16 matmuls are ~100x slower on AVX2), bf16 on accelerators, unless a dtype is named."""
    import torch

    if name == "auto":
        return torch.float32 if device.type == "cpu" else torch.bfloat16
    return {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}[name]


def device_memory_mb(device: torch.device, *, peak: bool = False) -> float | None:
    """Memory allocated by torch on an XPU/CUDA device (its peak with peak=True); None on the CPU."""
    import torch

    backend = {"xpu": getattr(torch, "xpu", None), "cuda": torch.cuda}.get(device.type)
    if backend is None:
        return None
    value: int = backend.max_memory_allocated(device) if peak else backend.memory_allocated(device)
    return round(value / 2**20, 1)


def peak_rss_mb() -> float | None:
    """Peak resident memory of this process."""
    try:
        import resource
    except ImportError:  # Windows
        try:
            import psutil

            peak_wset: int = psutil.Process().memory_info().peak_wset  # Windows-only field
            return round(peak_wset / 2**20, 1)
        except Exception:  # noqa: BLE001 - informative only
            return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (2**20 if sys.platform == "darwin" else 1024), 1)
