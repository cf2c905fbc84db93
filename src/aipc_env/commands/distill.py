"""`aipc-env distill`: the seed-003 Qwen-Image-2.1-Turbo 4-step LoRA distillation as gated stages, each run in
the training env through a generated launcher (oneAPI activated as for training), each writing a JSON verdict
and a human summary into <output_dir>/verdicts/."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from aipc_env.commands.options import ENV, JSON, MATRIX, PAIR, output_folder, print_json, say_to_stderr
from aipc_env.errors import ExitCode

__all__ = ["add_parser", "run"]

GATES = {"g0": "G0 plumbing: the pipeline loads, teacher@8 and naive@4 give finite RGB, the trajectory format "
               "round-trips, one LoRA step trains, save+reload keeps alpha with bit-exact output",
         "g2": "G2 sampler parity: the own Euler loop == pipe(...) bit-exactly for both grids; sigmas verbatim; "
               "num_inference_steps honoured",
         "g3": "G3 quality: student@4 vs naive@4 vs teacher@8 from the same noise (LPIPS with local weights, else "
               "PSNR/MSE); passes only if the student beats naive (a plumbing check on tiny random weights)"}
ALL = ["g0", "trajectories", "train", "g2", "g3"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("distill", help="Qwen-Image-2.1-Turbo 4-step LoRA distillation as gated stages (seed 003)",
                       description="The seed-003 recipe: a LoRA so that the model at 4 steps matches its own 8-step "
                       "output from the same noise. Stages run in the training env; each writes "
                       "<output_dir>/verdicts/<stage>.json and a summary. Without --config: the built-in default "
                       "(a tiny random Qwen-Image-2.1 built offline; no download).")
    stages = p.add_subparsers(dest="stage", metavar="STAGE", required=True)
    common = argparse.ArgumentParser(add_help=False, parents=[JSON, ENV, PAIR, MATRIX])
    common.add_argument("--config", type=Path, metavar="FILE", help="distillation config (YAML; default: the "
                        "built-in tiny default)")
    common.add_argument("--dry-run", action="store_true", help="only write the launcher and print what it would run")
    common.add_argument("--inject", action="append", default=[], metavar="FAULT",
                        choices=["grad-embeddings", "rgba", "no-lora-metadata", "wrong-sigmas", "parity-ulp"],
                        help="plant a fault to prove a gate catches it (grad-embeddings, rgba, no-lora-metadata: "
                        "G0; wrong-sigmas, parity-ulp: G2)")
    init = stages.add_parser("init", help="write the built-in default config to edit")
    init.add_argument("folder", type=output_folder, nargs="?", help="run folder (default: a folder in the aipc-env data dir)")
    init.add_argument("--force", action="store_true", help="replace an existing distill.yaml (kept as distill.yaml.bak)")
    init.set_defaults(run=run)
    gate = stages.add_parser("gate", parents=[common], help="run gate g0, g2 or g3",
                             description="\n".join(f"{k}: {v}" for k, v in GATES.items()),
                             formatter_class=argparse.RawDescriptionHelpFormatter)
    gate.add_argument("gate", choices=sorted(GATES))
    gate.set_defaults(run=run)
    for name, text in (("trajectories", "teacher 8-step trajectories of the training prompts (resumable)"),
                       ("train", "train the student LoRA on the stored trajectories"),
                       ("all", "G0 -> trajectories -> train -> G2 -> G3 -> report, stopping at the first failure")):
        s = stages.add_parser(name, parents=[common], help=text, description=text)
        s.set_defaults(run=run)
    rep = stages.add_parser("report", parents=[JSON], help="the gate table, velocity diagnostic and loss plot")
    rep.add_argument("--config", type=Path, metavar="FILE")
    rep.set_defaults(run=run)


def _config_path(args: argparse.Namespace) -> Path:
    from aipc_env.distill.config import write_default_distill_config
    from aipc_env.paths import data_dir

    if args.config is not None:
        return args.config
    path = write_default_distill_config(data_dir() / "runs" / "distill-default", replace=True)  # aipc-env's own
    print(f"aipc-env: no config given; using the built-in default ({path})", file=sys.stderr)
    return path


def run(args: argparse.Namespace) -> int:
    from aipc_env.distill.config import load_distill_config, write_default_distill_config

    if args.stage == "init":
        from aipc_env.paths import data_dir

        path = write_default_distill_config(args.folder or data_dir() / "runs" / "distill", replace=args.force)
        print(f"aipc-env: wrote {path}; edit model, prompts and student settings, then "
              f"`aipc-env distill all --config \"{path}\"`")
        return ExitCode.OK
    config_path = _config_path(args)
    cfg = load_distill_config(config_path)
    if args.stage == "report":
        from aipc_env.distill.report import build_report

        text, path = build_report(cfg)
        if args.json:
            import json

            print_json(json.loads((cfg.out / "report.json").read_text(encoding="utf-8")))
        else:
            print(text, end="")
            print(f"aipc-env: report {path}")
        return ExitCode.OK
    stages = ALL + ["report"] if args.stage == "all" else [args.gate if args.stage == "gate" else args.stage]
    return _launch(args, cfg, config_path, stages)


def _launch(args: argparse.Namespace, cfg, config_path: Path, stages: list[str]) -> int:
    from aipc_env.distill.verdict import read_verdict
    from aipc_env.launch.plan import Phase
    from aipc_env.launch.service import Chosen, RunRequest, start_run

    def phases(chosen: Chosen) -> list[Phase]:
        argv = [chosen.python, "-m", "aipc_env.distill.worker", "--config", str(Path(config_path).absolute()),
                "--stages", ",".join(stages)]
        for fault in args.inject:
            argv += ["--inject", fault]
        return [Phase(name="distill", argv=argv)]

    out = cfg.out
    quiet = sys.stderr if args.json else None
    outcome = start_run(RunRequest(command="distill", run_dir=out, log_file=out / "distill.log", phases=phases,
                                   env_flag=args.env, pair_flag=args.pair, matrix_path=args.matrix,
                                   device=cfg.device if cfg.device != "auto" else None, dry_run=args.dry_run,
                                   stdout=quiet, say=say_to_stderr))
    rc = outcome.exit_code
    if args.dry_run:
        return ExitCode.OK
    verdicts = [v for s in stages if s != "report" and (v := read_verdict(out, s)) is not None]
    if args.json:
        print_json({"schema_version": 1, "exit_code": rc, "verdicts": [v.model_dump(mode="json") for v in verdicts]})
    elif rc == ExitCode.OK:
        print(f"aipc-env: distill {' -> '.join(stages)} passed; verdicts in {out / 'verdicts'}; log "
              f"{outcome.plan.log_file}")
    elif rc != ExitCode.INTERRUPTED:
        print(f"aipc-env: distill stopped (exit code {rc}); verdicts in {out / 'verdicts'}; log "
              f"{outcome.plan.log_file}", file=sys.stderr)
    return rc
