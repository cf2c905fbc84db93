"""`aipc-env train [CONFIG]`: validate, write the run's launcher, run cache then fit."""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="validate a config, write its launcher (.bat/.sh), run cache then fit",
                       description="Without CONFIG: the built-in default (tiny random model, synthetic data). "
                       "Exit code: the training's own.")
    p.add_argument("config", nargs="?", type=Path, help="training config (YAML)")
    p.add_argument("--dry-run", action="store_true", help="only write the launcher and print what it would run")
    p.add_argument("--env", type=Path, metavar="PREFIX", help="training env (default: the one built by aipc-env, "
                   "else this interpreter)")
    p.add_argument("--pair", metavar="ID", help="the env's pair (default: recorded or resolved)")
    p.add_argument("--matrix", type=Path, metavar="FILE")
    p.set_defaults(run=run)


def _refuse_invalid_datasets(cfg, config_path: Path) -> None:
    """Validate every real dataset before any launcher or model: an invalid one names its samples."""
    from aipc_env.dataset import validate_dataset
    from aipc_env.errors import InputError

    if cfg.data is None:
        return
    for i, ds in enumerate(cfg.data.datasets):
        if ds.startswith("builtin:"):
            continue
        verdict = validate_dataset(ds, cfg.data.target_size)
        if not verdict.valid:
            shown = "; ".join(verdict.issues[:3]) + (f" (+{len(verdict.issues) - 3} more)" if len(verdict.issues) > 3 else "")
            raise InputError(f"dataset {ds} is invalid: {shown}", path=config_path, key=f"data.datasets[{i}]",
                             fix=f"aipc-env dataset validate \"{ds}\" lists every problem")


def run(args: argparse.Namespace) -> int:
    from aipc_env.facts.gather import toolchain_facts
    from aipc_env.fileio import atomic_write_text
    from aipc_env.launch.launcher import write_and_run
    from aipc_env.matrix import load_matrix
    from aipc_env.paths import data_dir
    from aipc_env.platforms import current_platform
    from aipc_env.train.config import load_config
    from aipc_env.train.run import accelerate_config_text, plan_training, write_default_config
    from aipc_env.trainenv import choose_training_env

    config_path = args.config
    if config_path is None:
        config_path = write_default_config(data_dir() / "runs" / "builtin-default")
        print(f"aipc-env: no config given; running the built-in default ({config_path})")
    cfg = load_config(config_path)
    _refuse_invalid_datasets(cfg, config_path)
    matrix = load_matrix(args.matrix)
    choice = choose_training_env(matrix, args.env, args.pair)
    platform = current_platform()
    oneapi, msvc = toolchain_facts()
    plan = plan_training(cfg, config_path, python=str(choice.python), pair=choice.pair, oneapi=oneapi,
                         msvc=msvc, platform=platform)
    run_dir = Path(plan.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(run_dir / "accelerate_config.yaml", accelerate_config_text(cfg.device))
    for w in plan.warnings:
        print(f"aipc-env: warning: {w}")
    script, rc = write_and_run(plan, dry_run=True)
    print(f"aipc-env: launcher {script}")
    print(f"aipc-env: env {choice.prefix} ({choice.source}), pair {choice.pair.id if choice.pair else 'none (not an XPU env)'}")
    for phase in plan.phases:
        print(f"aipc-env:   {phase.name}: {' '.join(phase.argv)}" + (f"  (in {phase.cwd})" if phase.cwd else ""))
    if args.dry_run:
        return 0
    _, rc = write_and_run(plan)
    print(f"aipc-env: training exited with {rc}; log {plan.log_file}")
    return rc
