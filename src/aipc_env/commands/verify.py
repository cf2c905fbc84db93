"""`aipc-env verify`: run the verification worker in the training env through a generated launcher."""

from __future__ import annotations

import argparse
import sys

from aipc_env.commands.options import ENV, JSON, MATRIX, PAIR, console_for, print_json

__all__ = ["add_parser", "run"]


def _steps(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 2 <= value <= 10_000:
        raise argparse.ArgumentTypeError(f"{value}: give between 2 and 10000 steps")
    return value


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("verify", parents=[JSON, ENV, PAIR, MATRIX],
                       help="prove NF4, Adam8bit and LoRA round-trips work on this device",
                       description="Runs in the training env (oneAPI / MSVC activated as for training): NF4 "
                       "quantize/matmul accuracy, an 8-bit optimizer step, LoRA save/reload, a tiny NF4 QLoRA run. "
                       "Exit 0 only when every step passed.")
    p.add_argument("--device", metavar="DEV", help="xpu:0, cuda:0 or cpu (default: XPU, then CUDA, then CPU)")
    p.add_argument("--steps", type=_steps, default=50, help="steps of the tiny NF4 QLoRA run (default 50)")
    p.add_argument("-v", "--verbose", action="store_true", help="show every step's metrics")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import datetime as _dt

    from aipc_env.errors import AipcError, ExitCode
    from aipc_env.facts.gather import toolchain_facts
    from aipc_env.facts.model import VerifyRecord
    from aipc_env.fileio import read_json
    from aipc_env.formats import timestamp
    from aipc_env.launch.execute import write_and_run
    from aipc_env.launch.plan import Phase, plan_run
    from aipc_env.matrix import load_matrix
    from aipc_env.paths import cache_dir, package_root
    from aipc_env.platforms import current_platform
    from aipc_env.trainenv.record import UsedEnvRecord, write_used_env, write_verify_record
    from aipc_env.trainenv.select import env_and_pair
    from aipc_env.verify.report import VerifyReport, render_verify

    matrix = load_matrix(args.matrix)
    platform = current_platform()
    env, pair_choice = env_and_pair(matrix, platform, env_flag=args.env, pair_flag=args.pair)
    pair = pair_choice.pair
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    run_dir = cache_dir() / "verify" / stamp
    result = run_dir / "result.json"
    argv = [str(env.python), "-m", "aipc_env.verify.worker", "--out", str(result), "--steps", str(args.steps)]
    if pair:
        argv += ["--bnb-min", pair.bitsandbytes_min]
    if args.device:
        argv += ["--device", args.device]
    oneapi, msvc = toolchain_facts()
    plan = plan_run(platform=platform, run_dir=str(run_dir), python=str(env.python), pair=pair,
                    oneapi=oneapi, msvc=msvc, phases=[Phase(name="verify", argv=argv)],
                    log_file=str(run_dir / "verify.log"), pythonpath=[str(package_root())],
                    device=args.device, engine="builtin")
    if env.source != "state":
        write_used_env(UsedEnvRecord(prefix=str(env.prefix), python=str(env.python), command="verify",
                                     when=timestamp()))
    _, rc = write_and_run(plan, stdout=sys.stderr if args.json else None)
    if not result.is_file():
        raise AipcError(f"the verification worker ended with exit code {rc} and wrote no result",
                        path=plan.log_file, fix="read the log; check that torch imports in the training env",
                        exit_code=ExitCode.PROBLEMS)
    raw = read_json(result, "verification result")
    report = VerifyReport(pair=pair.id if pair else None, env_prefix=str(env.prefix), **raw)
    write_verify_record(VerifyRecord(when=timestamp(), passed=report.passed, device=report.device,
                                     env_prefix=str(env.prefix), summary=report.summary, injected=report.inject))
    if args.json:
        print_json(report)
    else:
        render_verify(console_for(), report, verbose=args.verbose)
    return 0 if report.passed else 1
