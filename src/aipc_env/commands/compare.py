"""`aipc-env compare`: base model vs base + LoRA on held-out samples (generated in the training env by
workers/compare.py; the verdict is train/verdict.py's)."""

from __future__ import annotations

import argparse
from pathlib import Path

from aipc_env.commands.options import JSON, Subparsers, output_folder, seed
from aipc_env.commands.result import Result, progress
from aipc_env.errors import ExitCode
from aipc_env.train.verdict import DEFAULT_MARGIN

__all__ = ["add_parser", "run"]


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value}: must be at least 1")
    return value


def _margin(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"{value}: must be at least 0 and below 1")
    return value


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "compare",
        parents=[JSON],
        help="generate with the base model and with the LoRA on held-out samples",
        description="Base model vs base + LoRA with the same seeds (runbook §9): images, "
        "grid.png and manifest.json with distances to the target, and the verdict: is the LoRA closer to "
        "the targets than the base by the margin. Exit 1 when it is not, or when the LoRA changed "
        "nothing.",
    )
    p.add_argument("--config", type=Path, required=True, help="the training config (model, device)")
    p.add_argument("--lora", type=Path, required=True, help="the LoRA file or the run's lora/ folder")
    p.add_argument("--test-set", type=Path, required=True, help="held-out samples (any dataset format)")
    p.add_argument("--out", type=output_folder, required=True, help="output folder for images, grid.png and manifest.json")
    p.add_argument("--num-inference-steps", type=_positive, default=20, help="sampling steps (default 20)")
    p.add_argument("--seed", type=seed, default=0, help="noise seed for base and LoRA (default 0)")
    p.add_argument("--max-samples", type=_positive, help="compare at most this many samples")
    p.add_argument(
        "--margin",
        type=_margin,
        default=DEFAULT_MARGIN,
        help=f"how much closer to the targets the LoRA must be than the base, as a share of the base's "
        f"distance (default {DEFAULT_MARGIN}: at least 20%% closer)",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> Result:
    from aipc_env.errors import InputError
    from aipc_env.launch.hops import CompareRun
    from aipc_env.launch.worker_call import call_worker
    from aipc_env.train.config import load_config
    from aipc_env.train.results import CompareManifest

    cfg = load_config(args.config)
    if cfg.model is None or cfg.model.path.startswith("builtin:"):
        raise InputError("compare needs a model folder", path=args.config, key="model.path")
    if not args.lora.exists():
        raise InputError("LoRA not found", path=args.lora, fix="pass <output_dir>/lora")
    model = Path(cfg.model.path)

    def hop(result: Path) -> CompareRun:
        return CompareRun(
            model=model,
            lora=str(args.lora),
            test_set=str(args.test_set),
            out=str(args.out),
            result=result,
            margin=args.margin,
            num_inference_steps=args.num_inference_steps,
            seed=args.seed,
            device=cfg.device,
            max_samples=args.max_samples,
        )

    manifest = call_worker(hop, CompareManifest, what="compare", say=progress(args).say)
    from aipc_env.train.verdict import verdict_passes

    failed = manifest.lora_changed_nothing or (manifest.verdict is not None and not verdict_passes(manifest.verdict))

    def text() -> None:
        from aipc_env.train.verdict import verdict_lines

        print(f"wrote {len(manifest.samples)} comparisons, grid.png and manifest.json to {args.out}")
        if manifest.verdict is not None:
            for line in verdict_lines(manifest.verdict, ""):
                print(line)

    return Result(manifest, text, ExitCode.PROBLEMS if failed else ExitCode.OK)
