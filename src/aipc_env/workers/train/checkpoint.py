"""Checkpoints of the built-in engine: saving and restoring the LoRA, optimizer and scheduler tensors. Where they
live and whether a config may resume from one is train/resume.py (torch-free: the train command checks a resume
before any phase starts)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from aipc_env.core.formats import load_versioned
from aipc_env.train.resume import (
    STATE_FILE,
    CheckpointState,
    checkpoint_dirs,
)

if TYPE_CHECKING:
    import torch
    from torch.optim.lr_scheduler import LRScheduler

__all__ = ["restore_checkpoint", "save_checkpoint"]


def save_checkpoint(
    out: Path,
    state: CheckpointState,
    model: torch.nn.Module,
    opt: torch.optim.Optimizer,
    sched: LRScheduler,
    *,
    limit: int | None,
) -> Path:
    """<out>/checkpoints/step-NNNNNNN: the LoRA weights, optimizer, LR scheduler and state, written beside and
    renamed into place; at most `limit` are kept. Shared by the engine's fit phase and `distill train`."""
    import shutil

    import torch
    from peft.utils import get_peft_model_state_dict
    from safetensors.torch import save_file

    from aipc_env.core.fileio import atomic_dir
    from aipc_env.core.formats import write_model

    root = out / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{state.step:07d}"
    with atomic_dir(final) as tmp:
        save_file(
            {k: v.detach().contiguous().cpu() for k, v in get_peft_model_state_dict(model).items()}, str(tmp / "lora.safetensors")
        )
        torch.save(opt.state_dict(), tmp / "optimizer.pt")
        torch.save(sched.state_dict(), tmp / "scheduler.pt")
        write_model(tmp / STATE_FILE, state)
    if limit:
        for old in checkpoint_dirs(out)[:-limit]:
            shutil.rmtree(old, ignore_errors=True)
    return final


def restore_checkpoint(
    path: Path, model: torch.nn.Module, opt: torch.optim.Optimizer, sched: LRScheduler, device: torch.device
) -> CheckpointState:
    """Load a checkpoint's LoRA weights (kept in fp32), optimizer and LR scheduler; returns its state."""
    import torch
    from peft.utils import set_peft_model_state_dict
    from safetensors.torch import load_file

    set_peft_model_state_dict(model, {k: v.to(device) for k, v in load_file(str(path / "lora.safetensors")).items()})
    for p in model.parameters():
        if p.requires_grad:
            p.data = p.data.float()
    opt.load_state_dict(torch.load(path / "optimizer.pt", weights_only=False))
    sched.load_state_dict(torch.load(path / "scheduler.pt", weights_only=False))
    return load_versioned(CheckpointState, path / STATE_FILE)
