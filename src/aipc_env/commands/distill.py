"""`aipc-env distill`: the Qwen-Image-2.1-Turbo 4-step LoRA distillation as gated stages, each run in
the training env through a generated launcher (oneAPI activated as for training), each writing a JSON verdict
and a human summary into <output_dir>/verdicts/."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from aipc_env.commands.options import ENV, JSON, MATRIX, PAIR, Subparsers, output_folder
from aipc_env.commands.result import Result, progress
from aipc_env.errors import ExitCode

if TYPE_CHECKING:
    from aipc_env.distill.config import DistillConfig
    from aipc_env.distill.run import RunOptions

__all__ = ["add_parser", "run"]

GATES = {
    "g0": "G0 plumbing: the pipeline loads, teacher@8 and naive@4 give finite RGB, the trajectory format "
    "round-trips, one LoRA step trains, save+reload keeps alpha with bit-exact output",
    "g2": "G2 sampler parity: the own Euler loop == pipe(...) bit-exactly for both grids; sigmas verbatim; "
    "the pipeline's step count (num_inference_steps ignored when sigmas are given: noted)",
    "g3": "G3: student@4 vs naive@4 vs teacher@8 from the same noise; with LPIPS weights and a real model it "
    "judges the student (margin and win rate), else it is a plumbing check that judges nothing",
}


def add_parser(sub: Subparsers) -> None:
    from aipc_env.distill.config import PROFILES
    from aipc_env.distill.verdict import INJECTABLE

    p = sub.add_parser(
        "distill",
        help="Qwen-Image-2.1-Turbo 4-step LoRA distillation as gated stages",
        description="The recipe of the image21-turbo-trajectories project "
        "(huggingface.co/ysharma/image21-turbo-trajectories): a LoRA so that the model at 4 steps "
        "matches its own 8-step output from the same noise. Stages run in the training env; each writes "
        "<output_dir>/verdicts/<stage>.json and a summary. Without --config: the built-in default "
        "(a tiny random Qwen-Image-2.1 built offline; no download).",
    )
    stages = p.add_subparsers(dest="stage", metavar="STAGE", required=True)
    common = argparse.ArgumentParser(add_help=False, parents=[JSON, ENV, PAIR, MATRIX])
    common.add_argument(
        "--config", type=Path, metavar="FILE", help="distillation config (YAML; default: the built-in tiny default)"
    )
    common.add_argument("--dry-run", action="store_true", help="only write the launcher and print what it would run")
    common.add_argument(
        "--inject",
        action="append",
        default=[],
        metavar="FAULT",
        choices=list(INJECTABLE),
        help="plant a fault to prove a gate catches it ("
        + "; ".join(f"{fault}: {gate.upper()}" for fault, gate in INJECTABLE.items())
        + ")",
    )
    init = stages.add_parser(
        "init",
        parents=[JSON],
        help="write a config to edit (profile tiny: the built-in default; tiny-trained: "
        "the trained tiny teacher, judged by G3; turbo: that project's settings for the real "
        "Qwen-Image-2.1-Turbo)",
    )
    init.add_argument("folder", type=output_folder, nargs="?", help="run folder (default: a folder in the aipc-env data dir)")
    init.add_argument(
        "--profile",
        choices=list(PROFILES),
        default="tiny",
        help="tiny (default): tiny random model, CPU-sized; tiny-trained: the tiny teacher trained on "
        "colored shapes (built once, about a minute), G3 in quality mode on the latent distance to "
        "teacher@8; turbo: rank 64, alpha 128, lr 1e-4, endpoint weighting, the model's own sigma grid, "
        "NF4 teacher, text encoder offloaded",
    )
    init.add_argument("--force", action="store_true", help="replace an existing distill.yaml (kept as distill.yaml.bak)")
    init.set_defaults(run=run)
    gate = stages.add_parser(
        "gate",
        parents=[common],
        help="run gate g0, g2 or g3",
        description="\n".join(f"{k}: {v}" for k, v in GATES.items()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    gate.add_argument("gate", choices=sorted(GATES))
    gate.set_defaults(run=run)
    for name, text in (
        ("trajectories", "teacher 8-step trajectories of the training prompts (resumable)"),
        ("train", "train the student LoRA on the stored trajectories"),
        ("all", "G0 -> G2 -> trajectories -> train -> G3 -> report, stopping at the first failure"),
    ):
        s = stages.add_parser(name, parents=[common], help=text, description=text)
        s.set_defaults(run=run)
    exp = stages.add_parser(
        "export",
        parents=[JSON, ENV, PAIR, MATRIX],
        help="write the student LoRA in another layout",
        description="Write the published student LoRA in the layout ComfyUI loads and "
        "Qwen-Image-Lightning ships (diffusion_model.<module>.lora_down/lora_up/alpha; the MLP's "
        "proj/gate_layer bare, the form ComfyUI maps onto its fused gate_up), with the base "
        "model's licence text (LICENSE, from the model folder) and a change notice with "
        '"Built with Qwen" (NOTICE.md) beside it, and the same in the file\'s metadata.',
    )
    exp.add_argument("--config", type=Path, metavar="FILE")
    exp.add_argument("--format", choices=["comfyui"], default="comfyui")
    exp.add_argument("--out", type=Path, metavar="FILE", help="default: <output_dir>/export/student-comfyui.safetensors")
    exp.add_argument(
        "--repo",
        metavar="ID",
        help="the repository it will be published as (owner/name), named in the "
        'notice; a main name starting with "Qwen" is refused (the base model\'s licence)',
    )
    exp.add_argument("--dry-run", action="store_true", help="only write the launcher and print what it would run")
    exp.set_defaults(run=run, inject=[])
    pub = stages.add_parser(
        "publish",
        parents=[JSON, ENV, PAIR, MATRIX],
        help="G1 push preflight, then push the export to the hub",
        description="The G1 push preflight (create the repository, upload a 1 KiB file, "
        "download it back and compare, delete it), then push the export folder (weights, "
        "LICENSE, NOTICE.md: nothing without the licence) and download each file back to compare. "
        "The hub is reached with huggingface_hub: HF_TOKEN, HF_ENDPOINT.",
    )
    pub.add_argument("--config", type=Path, metavar="FILE")
    pub.add_argument(
        "--repo",
        required=True,
        metavar="ID",
        help='owner/name; a main name starting with "Qwen" is refused (the base model\'s licence)',
    )
    pub.add_argument("--folder", type=Path, metavar="DIR", help="the export folder (default: <output_dir>/export)")
    pub.add_argument("--endpoint", metavar="URL", help="the hub's URL (default: HF_ENDPOINT, else huggingface.co)")
    pub.add_argument("--public", action="store_true", help="create the repository public (default: private)")
    pub.add_argument("--dry-run", action="store_true", help="only write the launcher and print what it would run")
    pub.set_defaults(run=run, inject=[], format=None, out=None)
    rep = stages.add_parser("report", parents=[JSON], help="the gate table, velocity diagnostic and loss plot")
    rep.add_argument("--config", type=Path, metavar="FILE")
    rep.set_defaults(run=run)


def _config_path(args: argparse.Namespace) -> Path:
    """--config, else the default run folder's distill.yaml (the one `distill init` wrote, perhaps edited), else
    the built-in tiny default written there: every stage without --config uses the same folder."""
    from aipc_env.distill.config import default_run_dir, write_default_distill_config

    if args.config is not None:
        return Path(args.config)
    path = default_run_dir() / "distill.yaml"
    if path.is_file():
        progress(args).note(f"aipc-env: no config given; using {path}")
        return path
    path = write_default_distill_config(default_run_dir())
    progress(args).note(f"aipc-env: no config given; wrote the built-in default ({path})")
    return path


def run(args: argparse.Namespace) -> Result:
    from aipc_env.distill.config import load_distill_config, write_default_distill_config

    if args.stage == "init":
        from aipc_env.commands.result import FilesWritten
        from aipc_env.distill.config import default_run_dir

        path = write_default_distill_config(args.folder or default_run_dir(), replace=args.force, profile=args.profile)
        todo = " (fill each TODO: model, prompts, LPIPS weights)" if args.profile == "turbo" else ""
        following = f'edit it{todo}, then `aipc-env distill all --config "{path}"`'
        return Result(FilesWritten(files=[str(path)], next=following), lambda: print(f"aipc-env: wrote {path}; {following}"))
    config_path = _config_path(args)
    cfg = load_distill_config(config_path)
    if args.stage == "report":
        from aipc_env.distill.report import build_report

        text, path = build_report(cfg)

        def show() -> None:
            print(text, end="")
            print(f"aipc-env: report {path}")

        from aipc_env.core.formats import load_versioned
        from aipc_env.distill.report import DistillReport

        return Result(load_versioned(DistillReport, cfg.out / "report.json"), show)
    if args.stage in ("export", "publish"):
        if args.repo is not None:
            from aipc_env.distill.licence import check_repo_name

            check_repo_name(args.repo)  # refused here, before an env is chosen or a launcher written
        return _export(args, cfg, config_path)
    from aipc_env.distill.verdict import STAGES

    stages = [*STAGES, "report"] if args.stage == "all" else [args.gate if args.stage == "gate" else args.stage]
    return _launch(args, cfg, config_path, stages)


def _options(args: argparse.Namespace) -> RunOptions:
    from aipc_env.distill.run import RunOptions

    channel = progress(args)
    return RunOptions(
        env_flag=args.env,
        pair_flag=args.pair,
        matrix_path=args.matrix,
        dry_run=args.dry_run,
        inject=list(args.inject),
        stdout=channel.stream,
        say=channel.note,
    )


def _export(args: argparse.Namespace, cfg: DistillConfig, config_path: Path) -> Result:
    from aipc_env.distill.run import ExportRequest, run_export

    request = ExportRequest(
        stage=args.stage,
        format=args.format or "comfyui",
        out=args.out,
        repo=args.repo,
        folder=getattr(args, "folder", None),
        endpoint=getattr(args, "endpoint", None),
        public=getattr(args, "public", False),
    )
    result = run_export(cfg, config_path, request, _options(args))
    return Result(result, None, result.exit_code)


def _launch(args: argparse.Namespace, cfg: DistillConfig, config_path: Path, stages: list[str]) -> Result:
    from aipc_env.distill.run import run_stages

    result = run_stages(cfg, config_path, stages, _options(args))
    rc, out = result.exit_code, cfg.out

    def text() -> None:
        if result.dry_run:
            return  # the run service said what it would run
        if rc == ExitCode.OK:
            plumbing = any(v.mode == "plumbing" for v in result.verdicts)
            word = "ran without a failure (G3 as a plumbing check only)" if plumbing else "passed"
            print(f"aipc-env: distill {' -> '.join(stages)} {word}; verdicts in {out / 'verdicts'}; log {result.log}")
        elif rc != ExitCode.INTERRUPTED:
            print(
                f"aipc-env: distill stopped (exit code {rc}); verdicts in {out / 'verdicts'}; log {result.log}", file=sys.stderr
            )

    return Result(result, text, rc)
