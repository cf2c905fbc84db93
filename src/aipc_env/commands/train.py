"""`aipc-env train [CONFIG]`: validate, write the run's launcher, run cache then fit."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from aipc_env.commands.options import ENV, MATRIX, PAIR
from aipc_env.core.runfolder import RunFolder
from aipc_env.errors import ExitCode

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    from aipc_env.train.config import PATH_BASE_HELP

    p = sub.add_parser(
        "train",
        parents=[ENV, PAIR, MATRIX],
        help="validate a config, write its launcher (.bat/.sh), run cache then fit",
        description="Validate the config (and its datasets, model folder and resume checkpoint), write "
        "launch.bat/launch.sh into output_dir and run it: the cache phase, then the fit phase under "
        f"accelerate. Without CONFIG: the built-in default (a tiny model learns a synthetic edit, judged on "
        f"held-out samples; no download). Note: {PATH_BASE_HELP}. Exit code: the training's own.",
    )
    p.add_argument("config", nargs="?", type=Path, help="training config (YAML; `aipc-env recommend` writes one)")
    p.add_argument("--dry-run", action="store_true", help="only write the launcher and print what it would run")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from aipc_env.core.fileio import check_text_path
    from aipc_env.launch.service import start_run
    from aipc_env.paths import data_dir
    from aipc_env.train.inputs import load_run_config
    from aipc_env.train.run import training_request, write_default_config

    config_path = args.config
    if config_path is not None:
        check_text_path(config_path, "the config")
    if args.env is not None:
        check_text_path(args.env, "the env", key="--env")
    if config_path is None:
        config_path = write_default_config(data_dir() / "runs" / "builtin-default")
        print(f"aipc-env: no config given; running the built-in default ({config_path})")
    cfg = load_run_config(config_path)
    check = (lambda chosen: _validate_qflux(cfg, chosen.python)) if cfg.engine == "qflux" else None
    outcome = start_run(
        training_request(
            cfg, config_path, env_flag=args.env, pair_flag=args.pair, matrix_path=args.matrix, dry_run=args.dry_run, check=check
        )
    )
    if args.dry_run:
        return ExitCode.OK
    return _report(outcome, cfg)


def _validate_qflux(cfg, python) -> None:
    """Before any phase: the qflux config has no TODO left and the clone's own loader (in the qflux env) accepts
    it; its verdict names the keys upstream rejects."""
    from aipc_env.core.fileio import read_yaml
    from aipc_env.qflux.loader import validate_with_clone
    from aipc_env.train.config import refuse_todos

    assert cfg.qflux
    refuse_todos(read_yaml(cfg.qflux.config, "qflux config"), cfg.qflux.config)
    result = validate_with_clone(python, cfg.qflux.clone, cfg.qflux.config)
    print(
        f"aipc-env: the clone's loader accepts {cfg.qflux.config} (trainer {result['trainer']}, quantization "
        f"{result['quantization_type']})"
    )


def _heldout_verdict(cfg):
    """The fit's held-out verdict (fit_summary.json), or None where the run has none."""
    from aipc_env.core.formats import load_versioned
    from aipc_env.errors import AipcError
    from aipc_env.train.fit import FitSummary

    path = Path(cfg.output_dir) / "fit_summary.json"
    if not path.is_file():
        return None
    try:
        return load_versioned(FitSummary, path).heldout
    except AipcError:
        return None  # the fit's own log says what went wrong


def _report(outcome, cfg) -> int:
    """The last line: the LoRA on success; else the exit code and the log (the runner said what failed)."""
    rc, log = outcome.exit_code, Path(outcome.plan.log_file)
    lora = RunFolder(Path(cfg.output_dir)).lora_file
    verdict = _heldout_verdict(cfg) if cfg.engine == "builtin" and rc in (ExitCode.OK, ExitCode.PROBLEMS) else None
    if verdict is not None and lora.is_file():
        from aipc_env.train.learning import verdict_lines

        print(f"aipc-env: training finished; log {log}")
        for line in verdict_lines(verdict, "aipc-env: "):
            print(line)
        print(f"aipc-env: LoRA {lora}{'' if verdict.learned else ' (it did not learn the edit)'}")
    elif rc == ExitCode.OK and cfg.engine == "builtin" and lora.is_file():
        print(f"aipc-env: training finished; log {log}")
        print(f"aipc-env: LoRA {lora}")
    elif rc == ExitCode.INTERRUPTED:
        pass  # the runner printed the one line a Ctrl-C gets
    elif not outcome.started:
        print(
            f"aipc-env: the launcher failed before the run started (exit code {rc}); run {outcome.plan.run_dir}", file=sys.stderr
        )
    elif rc != ExitCode.OK:
        print(f"aipc-env: training failed (exit code {rc}); log {log}", file=sys.stderr)
    else:
        print(f"aipc-env: training finished; log {log}")
    return rc
