"""`aipc-env train [CONFIG]`: validate, write the run's launcher, run cache then fit."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from aipc_env.commands.options import ENV, MATRIX, PAIR

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    from aipc_env.train.config import PATH_BASE_HELP

    p = sub.add_parser("train", parents=[ENV, PAIR, MATRIX],
                       help="validate a config, write its launcher (.bat/.sh), run cache then fit",
                       description="Validate the config (and its datasets, model folder and resume checkpoint), write "
                       "launch.bat/launch.sh into output_dir and run it: the cache phase, then the fit phase under "
                       f"accelerate. Without CONFIG: the built-in default (tiny random model, synthetic data, no "
                       f"download). Note: {PATH_BASE_HELP}. Exit code: the training's own.")
    p.add_argument("config", nargs="?", type=Path, help="training config (YAML; `aipc-env recommend` writes one)")
    p.add_argument("--dry-run", action="store_true", help="only write the launcher and print what it would run")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from aipc_env.facts.gather import toolchain_facts
    from aipc_env.formats import timestamp
    from aipc_env.launch.execute import run_launcher
    from aipc_env.launch.render import write_launcher
    from aipc_env.launch.runlock import run_lock
    from aipc_env.matrix import load_matrix
    from aipc_env.paths import data_dir
    from aipc_env.platforms import current_platform
    from aipc_env.train.config import load_run_config
    from aipc_env.train.run import plan_training, write_default_config
    from aipc_env.trainenv.record import UsedEnvRecord, write_used_env
    from aipc_env.trainenv.select import env_and_pair

    config_path = args.config
    if config_path is None:
        config_path = write_default_config(data_dir() / "runs" / "builtin-default")
        print(f"aipc-env: no config given; running the built-in default ({config_path})")
    cfg = load_run_config(config_path)
    matrix = load_matrix(args.matrix)
    platform = current_platform()
    env, pair_choice = env_and_pair(matrix, platform, env_flag=args.env, pair_flag=args.pair)
    pair = pair_choice.pair
    if cfg.engine == "qflux":
        _validate_qflux(cfg, env.python)
    oneapi, msvc = toolchain_facts()
    plan = plan_training(cfg, config_path, python=str(env.python), pair=pair, oneapi=oneapi, msvc=msvc,
                         platform=platform)
    for w in plan.warnings:
        print(f"aipc-env: warning: {w}")
    with run_lock(Path(plan.run_dir), "train"):
        script = write_launcher(plan)
        print(f"aipc-env: launcher {script}")
        print(f"aipc-env: env {env.describe()}, pair {pair.id if pair else 'none (not an XPU env)'}")
        for phase in plan.phases:
            print(f"aipc-env:   {phase.name}: {' '.join(phase.argv)}" + (f"  (in {phase.cwd})" if phase.cwd else ""))
        if args.dry_run:
            return 0
        if env.source != "state":
            write_used_env(UsedEnvRecord(prefix=str(env.prefix), python=str(env.python), command="train",
                                         when=timestamp()))
        rc = run_launcher(script)
    return _report(rc, cfg, plan)


def _validate_qflux(cfg, python) -> None:
    """Before any phase: the qflux config has no TODO left and the clone's own loader (in the training env)
    accepts it; its verdict names the keys upstream rejects."""
    from aipc_env.fileio import read_yaml
    from aipc_env.qflux.loader import validate_with_clone
    from aipc_env.train.config import refuse_todos

    assert cfg.qflux
    refuse_todos(read_yaml(cfg.qflux.config, "qflux config"), cfg.qflux.config)
    result = validate_with_clone(python, cfg.qflux.clone, cfg.qflux.config)
    print(f"aipc-env: the clone's loader accepts {cfg.qflux.config} (trainer {result['trainer']}, quantization "
          f"{result['quantization_type']})")


def _report(rc: int, cfg, plan) -> int:
    """The last line: the LoRA on success; else the exit code and the log (the runner said what failed)."""
    from aipc_env.errors import ExitCode

    log = Path(plan.log_file)
    lora = Path(cfg.output_dir) / "lora" / "pytorch_lora_weights.safetensors"
    if rc == 0 and cfg.engine == "builtin" and lora.is_file():
        print(f"aipc-env: training finished; log {log}")
        print(f"aipc-env: LoRA {lora}")
    elif rc == ExitCode.INTERRUPTED:
        pass  # the runner printed the one line a Ctrl-C gets
    elif not log.is_file():
        print(f"aipc-env: the launcher failed before the run started (exit code {rc}); run {plan.run_dir}",
              file=sys.stderr)
    elif rc != 0:
        print(f"aipc-env: training failed (exit code {rc}); log {log}", file=sys.stderr)
    else:
        print(f"aipc-env: training finished; log {log}")
    return rc
