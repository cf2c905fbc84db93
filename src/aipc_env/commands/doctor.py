"""`aipc-env doctor`: every runbook check, with a verdict and a fix for each."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("doctor", help="check this machine against the runbook; a fix for every problem",
                       description="Check this machine (or saved facts) against every runbook item. "
                       "Never changes the machine. Exit 0: nothing failed; 1: something failed; 2: bad input.")
    p.add_argument("--json", action="store_true", help="print the versioned JSON report (facts + findings)")
    p.add_argument("--facts", type=Path, metavar="FILE", help="re-run the checks on saved facts instead of this machine")
    p.add_argument("--save-facts", type=Path, metavar="FILE", help="also write the gathered facts to FILE")
    p.add_argument("--list-checks", action="store_true", help="list the checks and exit")
    p.add_argument("--check", action="append", metavar="NAME", help="run only this check (repeatable)")
    p.add_argument("--env", type=Path, metavar="PREFIX", help="training env to inspect (default: the one built "
                   "by `aipc-env env`, else the active conda env, else this interpreter)")
    p.add_argument("--model-dir", type=Path, metavar="DIR", help="local Qwen-Image-Edit model directory")
    p.add_argument("--work-dir", type=Path, default=None, metavar="DIR",
                   help="where models, caches and outputs go (for the disk check; default: current folder)")
    p.add_argument("--probe-device", action="store_true",
                   help="also import torch in the training env and probe the XPU (slow: seconds)")
    p.add_argument("--matrix", type=Path, metavar="FILE", help="compatibility matrix (default: environments/matrix.yaml)")
    p.add_argument("-v", "--verbose", action="store_true", help="show details of every check")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from aipc_env.checks import REGISTRY
    from aipc_env.doctor import run_checks, select_checks
    from aipc_env.facts import load_facts
    from aipc_env.facts.gather import GatherOptions, gather_facts
    from aipc_env.fileio import write_json
    from aipc_env.matrix import load_matrix
    from aipc_env.render import console_for, render_report

    if args.list_checks:
        for spec in select_checks(None):
            print(f"{spec.id:20} {spec.category:17} {spec.title}")
        return 0
    select_checks(args.check)  # validate names before any work
    matrix = load_matrix(args.matrix)
    if args.facts:
        facts = load_facts(args.facts)
    else:
        facts = gather_facts(GatherOptions(work_dir=(args.work_dir or Path.cwd()).absolute(),
                                           env_prefix=args.env, model_dir=args.model_dir,
                                           probe_device=args.probe_device))
    if args.save_facts:
        write_json(args.save_facts, facts.model_dump(mode="json"))
    report = run_checks(facts, matrix, args.check)
    assert set(f.id for f in report.findings) <= set(REGISTRY)
    if args.json:
        json.dump(report.model_dump(mode="json"), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        render_report(report, console_for(), verbose=args.verbose)
    return report.exit_code
