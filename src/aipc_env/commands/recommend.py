"""`aipc-env recommend`: a complete training config from the machine (runbook §5)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from aipc_env.commands.options import JSON, Subparsers, output_file
from aipc_env.commands.result import Result

if TYPE_CHECKING:
    from aipc_env.facts.model import Facts


__all__ = ["add_parser", "run"]


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "recommend",
        parents=[JSON],
        help="write a training config matched to this machine (§5)",
        description="A complete training config for this machine's RAM tier (runbook §5), with TODOs "
        "for paths it cannot know; the §7 memory optimizations it selected go to stderr.",
    )
    p.add_argument(
        "--facts",
        type=Path,
        metavar="FILE",
        help="doctor facts (--save-facts) or the runbook's probe JSON (default: read this machine)",
    )
    p.add_argument("--dataset-path", metavar="PATH", help="fill data.datasets (a parquet folder becomes the dict form for qflux)")
    p.add_argument("--model-path", metavar="DIR", help="fill model.path")
    p.add_argument("--output-dir", metavar="DIR", help="fill output_dir")
    p.add_argument("--cache-dir", metavar="DIR", help="qflux: fill cache.cache_dir (default: <output-dir>/cache)")
    p.add_argument(
        "--engine",
        choices=["builtin", "qflux"],
        default="builtin",
        help="builtin: aipc-env's trainer (default); qflux: the layout of a qwen-image-finetune clone adapted "
        "with `aipc-env adapt` (its own loader is the judge: `aipc-env train` runs it)",
    )
    p.add_argument("--fast", action="store_true", help="target_size [256, 448] for quick iterations")
    p.add_argument("--force", action="store_true", help="write a config even below 32 GB RAM")
    p.add_argument(
        "--smoke",
        action="store_true",
        help="this machine's settings on the built-in tiny model and "
        "synthetic data (no download, any RAM, under a minute): `aipc-env train` it to try the whole path",
    )
    p.add_argument("--out", type=output_file, metavar="FILE", help="write the YAML here (default: stdout)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> Result:
    import yaml
    from pydantic import ValidationError

    from aipc_env.core.fileio import atomic_write_text, read_json
    from aipc_env.errors import InputError, validation_message
    from aipc_env.facts.model import load_facts
    from aipc_env.train.config import TrainConfig
    from aipc_env.train.recommend import (
        ProbeJson,
        RecommendReport,
        SelectedPattern,
        machine_from_facts,
        machine_from_probe,
        memory_lines,
        memory_report,
        qflux_config,
        recommend,
        smoke_config,
    )

    if args.facts:
        raw = read_json(args.facts, "facts or probe file")
        facts: Facts | None = None
        if isinstance(raw, dict) and ("schema_version" in raw or "facts" in raw):
            facts = load_facts(args.facts)
            machine = machine_from_facts(facts)
        elif isinstance(raw, dict):
            try:
                machine = machine_from_probe(ProbeJson.model_validate(raw))
            except ValidationError as exc:
                raise validation_message(exc, args.facts) from None
        else:
            raise InputError("expected a JSON object (doctor facts or the runbook's probe output)", path=args.facts)
    else:
        from aipc_env.facts.gather import GatherOptions
        from aipc_env.trainenv.situation import gather_machine

        facts = gather_machine(GatherOptions())
        machine = machine_from_facts(facts)
    rec = recommend(
        machine,
        dataset_path=args.dataset_path,
        force=args.force,
        fast=args.fast,
        model_path=args.model_path,
        output_dir=args.output_dir,
        smoke=args.smoke,
    )
    TrainConfig.model_validate(rec.config)  # what we write must load (TODOs aside); a failure here is a bug
    if facts is not None:
        rec.notes.extend(_known_issues(facts))
    config = rec.config
    if args.smoke:
        if args.engine == "qflux":
            raise InputError(
                "--smoke writes a builtin-engine config; the qflux path has its own smoke",
                key="--engine",
                fix="aipc-env adapt CLONE --smoke",
            )
        from aipc_env.paths import data_dir

        config, changed = smoke_config(rec, output_dir=args.output_dir or str(data_dir() / "runs" / "recommend-smoke"))
        rec.notes.append(f"smoke config: changed from the recommendation only {', '.join(changed)}")
    elif args.engine == "qflux":
        from aipc_env.train.recommend import QFLUX_NO_2511

        config = qflux_config(rec, dataset_path=args.dataset_path, cache_dir=args.cache_dir)
        rec.notes.append(QFLUX_NO_2511)
    header = (
        "# Written by `aipc-env recommend` for a "
        f"{rec.tier_gb} GB machine ({args.engine} engine). Replace every TODO before training.\n"
        if not args.smoke
        else f"# Written by `aipc-env recommend --smoke`: this {rec.tier_gb} GB machine's "
        "settings on the built-in tiny model. Run it: aipc-env train THIS_FILE\n"
    )
    text = header + yaml.safe_dump(config, sort_keys=False, allow_unicode=True)
    if args.out:
        atomic_write_text(args.out, text)

    def show() -> None:
        if args.out:
            print(f"wrote {args.out}")
        else:
            print(text, end="")
        for pattern, why in rec.selected:
            print(f"selected {pattern}: {why}", file=sys.stderr)
        for note in rec.notes:
            print(f"note: {note}", file=sys.stderr)
        for line in memory_lines(rec.memory, rec.tier_gb) if rec.memory and not args.smoke else []:
            print(line, file=sys.stderr)

    return Result(
        RecommendReport(
            engine=args.engine,
            tier_gb=rec.tier_gb,
            config=config,
            selected=[SelectedPattern(pattern=p, why=w) for p, w in rec.selected],
            notes=rec.notes,
            memory=memory_report(rec.memory) if rec.memory and not args.smoke else None,
        ),
        show,
    )


def _known_issues(facts: Facts) -> list[str]:
    """The known issues (environments/matrix.yaml) this machine meets with its env's pair, else the pair a build
    would choose: the doctor's rule (its known-issues check)."""
    from aipc_env.doctor.checks import CheckContext
    from aipc_env.doctor.checks.gpu import machine_issues
    from aipc_env.matrix import load_matrix
    from aipc_env.matrix.known_issues import describe

    pair, torch, _, hits = machine_issues(CheckContext(facts, load_matrix()))
    return [describe(issue, pair, torch) for issue in hits]
