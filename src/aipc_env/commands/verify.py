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
    import datetime as _dt

    from aipc_env.core.fileio import read_json
    from aipc_env.core.formats import timestamp
    from aipc_env.errors import AipcError
    from aipc_env.facts.model import VerifyRecord
    from aipc_env.launch.hops import VerifySteps
    from aipc_env.launch.plan import Phase
    from aipc_env.launch.service import Chosen, RunRequest, start_run
    from aipc_env.paths import cache_dir
    from aipc_env.trainenv.record import write_verify_record
    from aipc_env.verify.report import VerifyReport, render_verify

    run_dir = cache_dir() / "verify" / _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    result = run_dir / "result.json"

    def phases(chosen: Chosen) -> list[Phase]:
        pair = chosen.pair.pair
        return [
            Phase(
                name="verify",
                argv=VerifySteps(
                    out=result, steps=args.steps, device=device_of(args), bnb_min=pair.bitsandbytes_min if pair else None
                ).argv(chosen.python),
            )
        ]

    request = RunRequest(
        command="verify",
        run_dir=run_dir,
        log_file=run_dir / "verify.log",
        phases=phases,
        env_flag=args.env,
        pair_flag=args.pair,
        matrix_path=args.matrix,
        device=device_of(args),
        stdout=progress(args).stream,
        say=progress(args).say,
    )
    outcome = start_run(request)
    if not result.is_file():
        raise AipcError(
            f"the verification worker ended with exit code {outcome.exit_code} and wrote no result",
            path=outcome.plan.log_file,
            fix="read the log; check that torch imports in the training env",
            exit_code=ExitCode.PROBLEMS,
        )
    raw = read_json(result, "verification result")
    pair = outcome.pair.pair
    report = VerifyReport(pair=pair.id if pair else None, env_prefix=str(outcome.env.prefix), **raw)
    write_verify_record(
        VerifyRecord(
            when=timestamp(),
            passed=report.passed,
            device=report.device,
            env_prefix=str(outcome.env.prefix),
            summary=report.summary,
            injected=report.inject,
        )
    )
    return Result(
        report,
        lambda: render_verify(console_for(), report, verbose=args.verbose),
        ExitCode.OK if report.passed else ExitCode.PROBLEMS,
    )
