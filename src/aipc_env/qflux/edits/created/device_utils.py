# aipc-env adapt (runbook step 5.1): device-agnostic helpers. Call these instead of torch.cuda.*:
# XPU first, then CUDA; on the CPU they do nothing (device_context gives a null context).
import contextlib

import torch


def _xpu() -> bool:
    return hasattr(torch, "xpu") and torch.xpu.is_available()


def device_empty_cache() -> None:
    if _xpu():
        torch.xpu.empty_cache()
    elif torch.cuda.is_available():
        torch.cuda.empty_cache()


def device_synchronize() -> None:
    if _xpu():
        torch.xpu.synchronize()
    elif torch.cuda.is_available():
        torch.cuda.synchronize()


def device_manual_seed_all(seed: int) -> None:
    if _xpu():
        torch.xpu.manual_seed_all(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


def device_context(device):
    """Replaces torch.cuda.device(): torch.xpu.device("cpu") raises, so the CPU gets a null context."""
    device_str = str(device) if device is not None else "cpu"
    if device_str.startswith("cpu"):
        return contextlib.nullcontext()
    if _xpu():
        return torch.xpu.device(device)
    return torch.cuda.device(device)


def device_available(kind: str) -> bool:
    if kind == "xpu":
        return _xpu()
    if kind == "cuda":
        return torch.cuda.is_available()
    return True


def device_capability() -> tuple:
    return torch.cuda.get_device_capability() if torch.cuda.is_available() else (0, 0)


def accelerator_device() -> torch.device:
    if _xpu():
        return torch.device("xpu", torch.xpu.current_device())
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")
