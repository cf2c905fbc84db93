"""`aipc-env doctor`: every runbook check, with a verdict and a fix for each."""

from __future__ import annotations

import argparse
from pathlib import Path

from aipc_env.commands.options import ENV, JSON, MATRIX, Subparsers, console_for, output_file
from aipc_env.commands.result import Result

__all__ = ["add_parser", "run"]


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "doctor",
        parents=[JSON, ENV, MATRIX],
        help="check this machine against the runbook; a fix for every problem",
        description="Check this machine (or saved facts) against every runbook item. Never changes "
        "the machine and never imports torch (unless --probe-device). Exit 0: nothing failed; "
        "1: something failed; 2: bad input.",
    )
    p.add_argument(
        "--facts",
        type=Path,
        metavar="FILE",
        help="re-run the checks on saved facts (or a saved `doctor --json` report) instead of this machine",
    )
    p.add_argument("--save-facts", type=output_file, metavar="FILE", help="also write the gathered facts to FILE")
    p.add_argument("--list-checks", action="store_true", help="list the checks and exit")
    p.add_argument("--check", action="append", metavar="NAME", help="run only this check (repeatable)")
    p.add_argument("--model-dir", type=Path, metavar="DIR", help="local Qwen-Image-Edit model directory to check")
    p.add_argument(
        "--work-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="where models, caches and outputs go (for the disk check; default: current folder)",
    )
    p.add_argument(
        "--probe-device", action="store_true", help="also import torch in the training env and probe the XPU (slow: seconds)"
    )
    p.add_argument("-v", "--verbose", action="store_true", help="show details of every check")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> Result:
    from aipc_env.core.formats import write_model
    from aipc_env.doctor import CheckCatalog, CheckInfo, run_checks, select_checks
    from aipc_env.doctor.render import render_report
    from aipc_env.facts import load_facts
    from aipc_env.facts.gather import GatherOptions
    from aipc_env.lock.conda_layer import conda_layer_python
    from aipc_env.lock.lockfile import available_locks, pylock_path, read_pylock
    from aipc_env.matrix import load_matrix
    from aipc_env.paths import lockfiles_dir

    if args.list_checks:
        specs = select_checks(None)

        def listing() -> None:
            for spec in specs:
                print(f"{spec.id:20} {spec.category:17} {spec.title}")

        return Result(CheckCatalog(checks=[CheckInfo(id=s.id, category=s.category, title=s.title) for s in specs]), listing)
    select_checks(args.check)  # validate names before any work
    matrix = load_matrix(args.matrix)
    if args.facts:
        facts = load_facts(args.facts)
    else:
        from aipc_env.trainenv.situation import gather_machine

        facts = gather_machine(
            GatherOptions(
                work_dir=(args.work_dir or Path.cwd()).absolute(), model_dir=args.model_dir, probe_device=args.probe_device
            ),
            env_flag=args.env,
        )
    if args.save_facts:
        write_model(args.save_facts, facts)
    root = lockfiles_dir()
    report = run_checks(
        facts,
        matrix,
        args.check,
        locks=available_locks(root),
        lock_for=lambda pair, platform: read_pylock(p) if (p := pylock_path(root / pair, platform)).is_file() else None,
        conda_python_for=lambda pair, platform: conda_layer_python(root / pair, platform),
    )
    return Result(report, lambda: render_report(report, console_for(), verbose=args.verbose), report.exit_code)
