"""The built-in engine, run by the launcher inside the training env:
`python -m aipc_env.workers.train.engine --phase cache|fit --config CONFIG` (fit under `accelerate launch`); its arguments
are launch.hops.EnginePhase, the run's caller builds them from the same spec.

cache: text encoder + VAE only (workers/train/cache.py); fit: NF4 transformer + LoRA only (workers/train/fit.py). With
data.heldout a third phase judges the LoRA on held-out samples (workers/heldout_phase.py).
`model.path: builtin:tiny` with `data.datasets: [builtin:synthetic]` is the no-download default.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from aipc_env.core.runfolder import RunFolder
from aipc_env.errors import AipcError, ExitCode
from aipc_env.launch.hops import EnginePhase, run_worker
from aipc_env.train.config import BUILTIN_TINY, TrainConfig
from aipc_env.train.inputs import load_run_config

if TYPE_CHECKING:
    import torch


def _log(msg: str) -> None:
    print(msg, flush=True)


def _device_and_dtype(cfg: TrainConfig) -> tuple[torch.device, torch.dtype]:
    from aipc_env.workers.train.devices import compute_dtype, require_device

    device = require_device(cfg.device)
    return device, compute_dtype(device, cfg.compute_dtype)


def check_reload(cfg: TrainConfig) -> None:
    """The saved LoRA loads back through diffusers' Qwen-Image loader with its metadata (alpha) intact."""
    import torch
    from diffusers import QwenImageEditPipeline
    from safetensors.torch import load_file

    run = RunFolder(Path(cfg.output_dir))
    state, meta = QwenImageEditPipeline.lora_state_dict(str(run.lora_dir), return_lora_metadata=True)
    raw = load_file(str(run.lora_file))
    alpha = (meta or {}).get("transformer.lora_alpha")
    # the trained alpha / rank is folded into lora_B (aipc_env.workers.train.lora_file): the file says alpha == rank
    if alpha != cfg.lora.rank or len(state) != len(raw):
        raise AipcError(
            f"the saved LoRA does not load back as trained (alpha {alpha}, expected {cfg.lora.rank}: its scale "
            "folded into lora_B)",
            path=run.lora_dir,
        )
    if cfg.model and cfg.model.path == BUILTIN_TINY:
        from aipc_env.workers.train.fit import tiny_base_cache
        from aipc_env.workers.train.tinyedit import load_tiny_base

        fresh = load_tiny_base(tiny_base_cache())
        QwenImageEditPipeline.load_lora_into_transformer(state, transformer=fresh, metadata=meta)
        assert all(torch.isfinite(v).all() for v in state.values())
    _log(
        f"fit: LoRA reloaded through diffusers: {len(state)} tensors, its trained scale (alpha {cfg.lora.alpha:g} / "
        f"rank {cfg.lora.rank}) folded into lora_B, so it loads at that strength in diffusers and ComfyUI"
    )


def main(argv: list[str] | None = None) -> int:
    args = EnginePhase.parse(argv)
    _log(f"{args.phase}: starting (importing torch, diffusers and bitsandbytes)")
    from aipc_env.core.heartbeat import Heartbeat
    from aipc_env.workers.train.compat import quiet_bitsandbytes_notices

    beat = Heartbeat(_log, f"{args.phase}: still importing the training stack").start()

    def log(msg: str) -> None:
        beat.stop()
        _log(msg)

    quiet_bitsandbytes_notices()

    def phase() -> int:
        cfg = load_run_config(args.config, datasets=args.phase == "cache")
        if args.phase == "cache":
            from aipc_env.workers.train.cache import run_cache

            device, dtype = _device_and_dtype(cfg)
            run_cache(cfg, device, dtype, log=log)
            return ExitCode.OK
        from aipc_env.workers.train.fit import run_fit

        rc = run_fit(cfg, log=log)
        if rc == ExitCode.OK:
            check_reload(cfg)
        return rc

    try:
        return run_worker(f"the {args.phase} phase", phase)
    finally:
        beat.stop()


if __name__ == "__main__":
    sys.exit(main())
