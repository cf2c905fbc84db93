"""`aipc-env verify`: run the verification worker in the training env through a generated launcher."""

from __future__ import annotations

import argparse

from aipc_env.commands.options import DEVICE, ENV, JSON, MATRIX, PAIR, Subparsers, console_for, device_of
from aipc_env.commands.result import Result, progress
from aipc_env.errors import ExitCode

__all__ = ["add_parser", "run"]


def _steps(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 2 <= value <= 10_000:
        raise argparse.ArgumentTypeError(f"{value}: give between 2 and 10000 steps")
    return value


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "verify",
        parents=[JSON, ENV, PAIR, MATRIX, DEVICE],
        help="prove NF4, Adam8bit and LoRA round-trips work on this device",
        description="Runs in the training env (oneAPI / MSVC activated as for training): NF4 "
        "quantize/matmul accuracy, an 8-bit optimizer step, LoRA save/reload, a tiny NF4 QLoRA run. "
        "Exit 0 only when every step passed.",
    )
    p.add_argument(
        "--steps",
        type=_steps,
        default=200,
        help="steps of the tiny NF4 QLoRA run, which must learn the built-in edit (default 200)",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="show every step's metrics")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> Result:
    from aipc_env.verify.report import render_verify
    from aipc_env.verify.run import VerifyRequest, run_verify

    channel = progress(args)
    report = run_verify(
        VerifyRequest(
            steps=args.steps,
            device=device_of(args),
            env_flag=args.env,
            pair_flag=args.pair,
            matrix_path=args.matrix,
            stdout=channel.stream,
            say=channel.say,
        )
    )
    return Result(
        report,
        lambda: render_verify(console_for(), report, verbose=args.verbose),
        ExitCode.OK if report.passed else ExitCode.PROBLEMS,
    )
