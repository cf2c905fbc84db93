"""`aipc-env quantize transformer|text-encoder --src MODEL_DIR --dst DIR`: one-time NF4 pre-quantization, in the
training env (workers/quantize.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from aipc_env.commands.options import DEVICE, JSON, Subparsers, output_folder
from aipc_env.commands.result import Result, progress

__all__ = ["add_parser", "run"]


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "quantize",
        parents=[JSON, DEVICE],
        help="pre-quantize the transformer or the text encoder to NF4 (runbook §7.1/7.2)",
        description="One-time NF4 pre-quantization; the output folder is "
        "written beside its target and renamed at the end (an interrupted run leaves nothing).",
    )
    p.add_argument("part", choices=["transformer", "text-encoder"], help="which model part to quantize")
    p.add_argument("--src", type=Path, required=True, help="the Qwen-Image-Edit model folder")
    p.add_argument("--dst", type=output_folder, required=True, help="output folder (written atomically)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> Result:
    from aipc_env.errors import InputError
    from aipc_env.launch.hops import QuantizeRun
    from aipc_env.launch.worker_call import call_worker
    from aipc_env.train.results import QuantizeResult

    if not args.src.is_dir():
        raise InputError("model folder not found", path=args.src, key="--src")
    if args.dst.exists() and not args.dst.is_dir():
        raise InputError("exists and is a file; expected an output folder", path=args.dst, key="--dst")

    def hop(out: Path) -> QuantizeRun:
        return QuantizeRun(part=args.part, src=str(args.src), dst=str(args.dst), result=out, device=args.device)

    result = call_worker(hop, QuantizeResult, what="quantize", say=progress(args).say)
    key = "model.transformer_path" if args.part == "transformer" else "model.text_encoder_path"

    def text() -> None:
        print(
            f"wrote {result.dst} ({result.size_bytes / 1e6:.1f} MB, {result.method}) in {result.seconds:.1f} s; "
            f"peak RSS {result.peak_rss_mb} MB, peak device memory {result.peak_device_mb} MB"
        )
        print(
            f"set {key}: {result.dst}"
            + ("  (rebuild the cache after switching the text encoder)" if args.part == "text-encoder" else "")
        )

    return Result(result, text)
