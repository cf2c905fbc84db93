"""`aipc-env adapt CLONE`: the runbook's step-5 adaptation of a qwen-image-finetune clone (apply, --check,
--revert, --smoke)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from aipc_env.commands.options import ENV, JSON, MATRIX, PAIR, Subparsers
from aipc_env.commands.result import FilesWritten, Result, progress
from aipc_env.errors import ExitCode

if TYPE_CHECKING:
    from aipc_env.qflux.checker import CheckReport


__all__ = ["add_parser", "run"]


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "adapt",
        parents=[JSON, ENV, PAIR, MATRIX],
        help="adapt a qwen-image-finetune clone for XPU and NF4 (runbook step 5); --check, --revert, --smoke",
        description="Apply the runbook's step-5 edits to a qwen-image-finetune clone: device helpers "
        "instead of torch.cuda, SDPA instead of flash_attention_2, the NF4 path, local model paths, the "
        "max_train_steps guard, checkpoints_total_limit, XPU seeding, LoRA metadata. Each edit is "
        "anchored on upstream content; a mismatch changes nothing and names the anchor. Every edited "
        "file is backed up (<clone>/.aipc-adapt/); a second run changes nothing. Exit codes: 0 "
        "adapted, 1 findings or a refused edit, 2 bad input.",
    )
    p.add_argument("clone", type=Path, help="the clone's root folder (it holds src/qflux)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="only report ERROR/WARN findings (file, line, fix)")
    mode.add_argument("--revert", action="store_true", help="restore the pristine files from the backups")
    mode.add_argument("--dry-run", action="store_true", help="list the edits, change nothing")
    mode.add_argument(
        "--smoke",
        action="store_true",
        help="adapt, then run upstream's own cache and fit phases for 3 "
        "steps on a tiny random model, offline, on the CPU (builds the qflux env once)",
    )
    p.add_argument("--force", action="store_true", help="with --revert: also restore files edited after adapting")
    p.add_argument("--plus", action="store_true", help="with --smoke: the Qwen-Image-Edit-Plus trainer and pipeline")
    p.set_defaults(run=run)


def _render_findings(report: CheckReport) -> None:
    from rich.text import Text

    from aipc_env.commands.options import console_for

    console = console_for()
    if not report.findings:
        console.print(Text.assemble(("adapted", "green"), f": no findings in {report.clone}"))
        return
    for f in report.findings:
        color = "red" if f.level == "ERROR" else "yellow"
        console.print(Text.assemble((f.level, color), f" {f.file}:{f.line} [{f.rule}] {f.message}"))
        console.print(f"       fix: {f.fix}")
    warns = len(report.findings) - report.errors
    console.print(f"{report.errors} error(s), {warns} warning(s)")


def run(args: argparse.Namespace) -> Result:
    from aipc_env.launch.hops import AccelerateProbe
    from aipc_env.launch.worker_call import call_worker
    from aipc_env.qflux.adapt import apply_adaptation, plan_adaptation, revert_adaptation
    from aipc_env.qflux.checker import AccelerateChoices, check_clone

    def choices() -> AccelerateChoices:  # accelerate's enums, read in the training env
        return call_worker(
            AccelerateProbe, AccelerateChoices, what="accelerate choices", say=progress(args).say, env_flag=args.env
        )

    clone = args.clone
    if args.check:
        report = check_clone(clone, choices())
        return Result(report, lambda: _render_findings(report), ExitCode.OK if not report.findings else ExitCode.PROBLEMS)
    if args.revert:
        done = revert_adaptation(clone, force=args.force, log=progress(args).say)
        return Result(FilesWritten(files=done), lambda: print(f"aipc-env: reverted {len(done)} file(s); {clone} is pristine"))
    if args.dry_run:
        planned = plan_adaptation(clone).files
        changes = {str(item.path): list(item.edits) for item in planned}

        def show() -> None:
            for path, edits in changes.items():
                print(f"{path}: {', '.join(edits)}")

        return Result(FilesWritten(files=list(changes), dry_run=True, changes=changes), show)
    say = progress(args)
    written = apply_adaptation(clone, log=say.say)
    report = check_clone(clone, choices())
    if args.smoke:
        from aipc_env.qflux.smoke import run_smoke

        if report.findings:
            return Result(report, lambda: _render_findings(report), ExitCode.PROBLEMS)
        result = run_smoke(
            clone,
            pair_id=args.pair,
            matrix_path=args.matrix,
            plus=args.plus,
            env_prefix=args.env,
            log=say.say,
            stdout=say.stream,
        )
        return Result(result, lambda: print(result.summary()), ExitCode.OK if result.passed else ExitCode.PROBLEMS)

    def text() -> None:
        print(
            f"aipc-env: adapted {clone}: {len(written)} file(s) written"
            if written
            else f"aipc-env: {clone} is already adapted; nothing changed"
        )
        if report.findings:
            _render_findings(report)

    return Result(report, text, ExitCode.OK if not report.findings else ExitCode.PROBLEMS)
