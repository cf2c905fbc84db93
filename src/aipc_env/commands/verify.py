"""`aipc-env verify`: run the verification worker in the training env through a generated launcher."""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
from pathlib import Path

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("verify", help="prove NF4, Adam8bit and LoRA round-trips work on this device",
                       description="Runs in the training env (oneAPI / MSVC activated as for training). "
                       "Exit 0 only when every step passed.")
    p.add_argument("--device", help="xpu:0, cuda:0 or cpu (default: XPU, then CUDA, then CPU)")
    p.add_argument("--env", type=Path, metavar="PREFIX")
    p.add_argument("--pair", metavar="ID", help="pair whose minimum bitsandbytes applies (default: recorded/resolved)")
    p.add_argument("--steps", type=int, default=50, help="steps of the tiny NF4 QLoRA run (default 50)")
    p.add_argument("--json", action="store_true")
    p.add_argument("-v", "--verbose", action="store_true")
    p.add_argument("--matrix", type=Path, metavar="FILE")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from aipc_env.errors import AipcError
    from aipc_env.facts.gather import toolchain_facts
    from aipc_env.facts.model import VerifyRecord
    from aipc_env.fileio import read_json
    from aipc_env.launch.launcher import write_and_run
    from aipc_env.launch.plan import Phase, plan_run
    from aipc_env.matrix import load_matrix
    from aipc_env.paths import cache_dir, project_root
    from aipc_env.platforms import current_platform
    from aipc_env.render import console_for
    from aipc_env.state import write_verify_record
    from aipc_env.verify.report import VerifyReport, render_verify

    from aipc_env.trainenv import choose_training_env

    matrix = load_matrix(args.matrix)

    choice = choose_training_env(matrix, args.env, args.pair)
    platform = current_platform()
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    run_dir = cache_dir() / "verify" / stamp
    result = run_dir / "result.json"
    argv = [str(choice.python), "-m", "aipc_env.verify.worker", "--out", str(result), "--steps", str(args.steps)]
    if choice.pair:
        argv += ["--bnb-min", choice.pair.bitsandbytes_min]
    if args.device:
        argv += ["--device", args.device]
    oneapi, msvc = toolchain_facts()
    plan = plan_run(platform=platform, run_dir=str(run_dir), python=str(choice.python), pair=choice.pair,
                    oneapi=oneapi, msvc=msvc, phases=[Phase(name="verify", argv=argv)],
                    log_file=str(run_dir / "verify.log"), pythonpath=[str(project_root() / "src")],
                    device=args.device, engine="builtin")
    _, rc = write_and_run(plan, stdout=sys.stderr if args.json else None)
    if not result.is_file():
        raise AipcError(f"the verification worker ended with exit code {rc} and wrote no result",
                        path=plan.log_file, fix="read the log; check that torch imports in the training env")
    raw = read_json(result)
    report = VerifyReport(pair=choice.pair.id if choice.pair else None, env_prefix=str(choice.prefix), **raw)
    write_verify_record(VerifyRecord(when=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                                     passed=report.passed, device=report.device, env_prefix=str(choice.prefix),
                                     summary=report.summary))
    if args.json:
        print(json.dumps(report.model_dump(mode="json"), indent=2))
    else:
        render_verify(console_for(), report, verbose=args.verbose)
    return 0 if report.passed else 1
