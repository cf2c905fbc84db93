"""`aipc-env train [CONFIG]`: validate, write the run's launcher, run cache then fit."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from aipc_env.commands.options import ENV, JSON, MATRIX, PAIR, Subparsers
from aipc_env.commands.result import Progress, Result, progress
from aipc_env.core.runfolder import RunFolder
from aipc_env.errors import ExitCode

if TYPE_CHECKING:
    from aipc_env.launch.service import RunOutcome
    from aipc_env.train.config import TrainConfig
    from aipc_env.train.report import TrainRunReport
    from aipc_env.train.verdict import LearningVerdict

__all__ = ["add_parser", "run"]


def add_parser(sub: Subparsers) -> None:
    from aipc_env.train.config import PATH_BASE_HELP

    p = sub.add_parser(
        "train",
        parents=[JSON, ENV, PAIR, MATRIX],
        help="validate a config, write its launcher (.bat/.sh), run cache then fit",
        description="Validate the config (and its datasets, model folder and resume checkpoint), write "
        "launch.bat/launch.sh into output_dir and run it: the cache phase, then the fit phase under "
        f"accelerate. Without CONFIG: the built-in default (a tiny model learns a synthetic edit, judged on "
        f"held-out samples; no download). Note: {PATH_BASE_HELP}. Exit code: the training's own.",
    )
    p.add_argument("config", nargs="?", type=Path, help="training config (YAML; `aipc-env recommend` writes one)")
    p.add_argument("--dry-run", action="store_true", help="only write the launcher and print what it would run")
    p.add_argument(
        "--model",
        choices=["tiny"],
        help="tiny: CONFIG's dataset on a tiny random Qwen-Image-Edit in the real diffusers layout, built in the run "
        "folder (no download): proves the path, the conditioning and the formats on your data, not that a model "
        "learns your edit (writes CONFIG.tiny.yaml; the run goes to output_dir-tiny)",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> Result:
    from aipc_env.core.fileio import check_text_path
    from aipc_env.launch.service import start_run
    from aipc_env.paths import data_dir
    from aipc_env.train.inputs import load_run_config
    from aipc_env.train.run import heldout_notice, training_request, write_default_config

    say = progress(args)
    config_path = args.config
    if config_path is not None:
        check_text_path(config_path, "the config")
    if args.env is not None:
        check_text_path(args.env, "the env", key="--env")
    tiny = args.model == "tiny"
    if config_path is None:
        if tiny:
            from aipc_env.errors import InputError

            raise InputError(
                "--model tiny trains your config's dataset: give the config",
                key="--model",
                fix="aipc-env train config.yaml --model tiny (without a config, aipc-env train trains the built-in "
                "tiny default on its own synthetic edit)",
            )
        config_path = write_default_config(data_dir() / "runs" / "builtin-default")
        say.say(f"aipc-env: no config given; running the built-in default ({config_path})")
    if tiny:
        from aipc_env.train.tinyrun import EXPLAINED, tiny_config

        say.say(f"aipc-env: {EXPLAINED}")
        config_path = tiny_config(config_path)
        say.say(f"aipc-env: config {config_path}")
    cfg = load_run_config(config_path, model=not tiny)
    notice = None if tiny else heldout_notice(cfg)
    if notice:
        say.say(notice)
    check = (lambda chosen: _validate_qflux(cfg, chosen.python, say)) if cfg.engine == "qflux" else None
    outcome = start_run(
        training_request(
            cfg,
            config_path,
            env_flag=args.env,
            pair_flag=args.pair,
            matrix_path=args.matrix,
            dry_run=args.dry_run,
            check=check,
            stdout=say.stream,
            say=say.say,
            build_tiny=tiny,
        )
    )
    report = _report(outcome, cfg, config_path, builtin=args.config is None, dry_run=args.dry_run)
    return Result(report, lambda: _print_report(report, tiny=tiny), report.exit_code)


def _validate_qflux(cfg: TrainConfig, python: str, say: Progress) -> None:
    """Before any phase: the qflux config has no TODO left and the clone's own loader (in the qflux env) accepts
    it; its verdict names the keys upstream rejects."""
    from aipc_env.core.fileio import read_yaml
    from aipc_env.qflux.loader import validate_with_clone
    from aipc_env.train.config import refuse_todos

    assert cfg.qflux
    refuse_todos(read_yaml(cfg.qflux.config, "qflux config"), cfg.qflux.config)
    result = validate_with_clone(Path(python), Path(cfg.qflux.clone), Path(cfg.qflux.config))
    say.say(
        f"aipc-env: the clone's loader accepts {cfg.qflux.config} (trainer {result['trainer']}, quantization "
        f"{result['quantization_type']})"
    )


def _heldout_verdict(cfg: TrainConfig) -> LearningVerdict | None:
    """The fit's held-out verdict (fit_summary.json), or None where the run has none."""
    from aipc_env.core.formats import load_versioned
    from aipc_env.errors import AipcError
    from aipc_env.train.results import FitSummary

    path = RunFolder(Path(cfg.output_dir)).fit_summary
    if not path.is_file():
        return None
    try:
        return load_versioned(FitSummary, path).heldout
    except AipcError:
        return None  # the fit's own log says what went wrong


def _report(outcome: RunOutcome, cfg: TrainConfig, config_path: Path, *, builtin: bool, dry_run: bool) -> TrainRunReport:
    from aipc_env.train.report import RunEnv, TrainRunReport

    rc = int(outcome.exit_code)
    lora = RunFolder(Path(cfg.output_dir)).lora_file
    ran = not dry_run and outcome.started
    verdict = _heldout_verdict(cfg) if ran and cfg.engine == "builtin" and rc in (ExitCode.OK, ExitCode.PROBLEMS) else None
    return TrainRunReport(
        config=str(config_path),
        engine=cfg.engine,
        builtin_default=builtin,
        dry_run=dry_run,
        exit_code=rc,
        started=ran,
        launcher=str(outcome.script),
        log=outcome.plan.log_file,
        env=RunEnv(prefix=str(outcome.env.prefix), python=str(outcome.env.python), source=outcome.env.source),
        pair=outcome.pair.pair.id if outcome.pair.pair else None,
        pair_why=outcome.pair.why,
        plan=outcome.plan,
        lora=str(lora) if ran and lora.is_file() else None,
        heldout=verdict,
    )


def _print_report(report: TrainRunReport, *, tiny: bool = False) -> None:
    """The last lines for people: the LoRA and the verdict on success; else the exit code and the log (the runner
    said what failed)."""
    rc, log, verdict = report.exit_code, report.log, report.heldout
    if report.dry_run:
        return  # the run service printed the launcher and its phases
    if verdict is not None and report.lora is not None:
        from aipc_env.train.verdict import verdict_lines

        print(f"aipc-env: training finished; log {log}")
        for line in verdict_lines(verdict, "aipc-env: "):
            print(line)
        note = {"learned": "", "base_already_does_it": " (the base already does the edit)"}.get(
            verdict.outcome, " (it did not learn the edit)"
        )
        print(f"aipc-env: LoRA {report.lora}{note}")
        if tiny and not verdict.learned:
            from aipc_env.train.tinyrun import NOT_LEARNED

            print(f"aipc-env: {NOT_LEARNED}")
    elif rc == ExitCode.OK and report.engine == "builtin" and report.lora is not None:
        print(f"aipc-env: training finished; log {log}")
        print(f"aipc-env: LoRA {report.lora}")
        if tiny:
            print(
                "aipc-env: on a tiny random model: your data went through the whole path (no held-out check: a "
                "random tiny model does not learn your edit)"
            )
    elif rc == ExitCode.INTERRUPTED:
        pass  # the runner printed the one line a Ctrl-C gets
    elif not report.started:
        print(
            f"aipc-env: the launcher failed before the run started (exit code {rc}); run {report.plan.run_dir}", file=sys.stderr
        )
    elif rc != ExitCode.OK:
        print(f"aipc-env: training failed (exit code {rc}); log {log}", file=sys.stderr)
    else:
        print(f"aipc-env: training finished; log {log}")
