"""`aipc-env compare`: base model vs base + LoRA on held-out samples."""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compare", help="generate with the base model and with the LoRA on held-out samples")
    p.add_argument("--config", type=Path, required=True, help="the training config (model, device)")
    p.add_argument("--lora", type=Path, required=True, help="the LoRA file or the run's lora/ folder")
    p.add_argument("--test-set", type=Path, required=True, help="held-out samples (any dataset format)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--num-inference-steps", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-samples", type=int)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from aipc_env.compare import CompareRequest, run_compare
    from aipc_env.errors import InputError
    from aipc_env.train.config import load_config

    cfg = load_config(args.config)
    if cfg.model is None or cfg.model.path.startswith("builtin:"):
        raise InputError("compare needs a model folder", path=args.config, key="model.path")
    if not args.lora.exists():
        raise InputError("LoRA not found", path=args.lora, fix="pass <output_dir>/lora")
    manifest = run_compare(CompareRequest(model_path=Path(cfg.model.path), lora=args.lora, test_set=args.test_set,
                                          out=args.out, num_inference_steps=args.num_inference_steps, seed=args.seed,
                                          device=cfg.device, max_samples=args.max_samples))
    print(f"wrote {len(manifest['samples'])} comparisons, grid.png and manifest.json to {args.out}")
    return 1 if manifest["lora_changed_nothing"] else 0
