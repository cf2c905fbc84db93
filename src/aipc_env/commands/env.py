"""`aipc-env env`: build (or repair) the training env from its lock; `--check` reports drift only."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from aipc_env.commands.options import INDEXES, JSON, LOCK_ROOT, MATRIX, PAIR, Subparsers, add_env_option, lock_root, python_minor
from aipc_env.commands.result import Result, progress
from aipc_env.core.platforms import DEFAULT_PYTHON, Platform
from aipc_env.errors import ExitCode

if TYPE_CHECKING:
    from aipc_env.core.platforms import Platform
    from aipc_env.matrix import Pair


__all__ = ["add_parser", "run"]


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "env",
        parents=[JSON, PAIR, LOCK_ROOT, INDEXES, MATRIX],
        help="build or repair the training env from the pair's lock; --check for drift",
        description="Build the training env of a pair from its lockfile (hash-checked), or repair "
        "it; a re-run with no drift changes nothing. Pair: --pair, else the recorded env's, else the "
        "one matching an installed oneAPI toolkit, else the newest. "
        "Exit 0: built or up to date (--check: no drift); 1: drift or failure; 2: input.",
    )
    p.add_argument(
        "--prefix", type=Path, help="where the env lives (default: the recorded env, else the per-user data folder/envs/<pair>)"
    )
    p.add_argument(
        "--check", action="store_true", help="compare the env with its lock (versions, hashes, installed files); change nothing"
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print what the build would install from the lock (every "
        "artifact, its size, the host it comes from and where its hash came from); change nothing",
    )
    p.add_argument(
        "--python",
        type=python_minor,
        metavar="X.Y",
        help="the env's Python, one the lock covers (default: the lock's); with --base-python that interpreter's decides",
    )
    p.add_argument(
        "--unlocked",
        action="store_true",
        help="no lock yet: install from the specs and record what was installed as this pair's lock",
    )
    p.add_argument(
        "--base-python", metavar="PYTHON", help="make the interpreter layer a venv of this Python instead of a conda env"
    )
    p.add_argument(
        "--bundle",
        type=Path,
        metavar="DIR",
        help="install from an offline bundle (aipc-env fleet bundle) with no network; every file is "
        "checked against the bundle's manifest first; with --check: check against its lock",
    )
    add_env_option(
        p,
        "--trust",
        env="AIPC_ENV_BUNDLE_TRUST",
        type=Path,
        metavar="PUBKEY",
        help="with --bundle: the admin's minisign public key; the bundle's signature must verify with it",
    )
    p.add_argument(
        "--facts",
        type=Path,
        metavar="FILE",
        help="with --dry-run: plan for the machine these doctor "
        "facts describe (doctor --save-facts): its platform and GPUs decide the plan and the known-issue "
        "warnings (default: this machine)",
    )
    p.add_argument(
        "--accept-metadata-drift",
        action="store_true",
        help="build even when an XPU wheel's real METADATA (read before installing) differs from what the "
        "lock stands on; the differences are recorded in the env record",
    )
    p.add_argument(
        "--conda-tool",
        choices=["conda-lock", "micromamba", "mamba", "conda"],
        help="which conda flavour creates the interpreter layer (default: the first found)",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> Result:

    from aipc_env.lock.lock import Indexes
    from aipc_env.lock.lockfile import pylock_path
    from aipc_env.lock.specs import PYPI_URL, XPU_INDEX_URL, common_requirements
    from aipc_env.lock.tools import find_conda_tool
    from aipc_env.matrix import load_matrix
    from aipc_env.matrix.known_issues import issue_warnings
    from aipc_env.paths import log_path
    from aipc_env.trainenv.build import EnvBuildReport, EnvRequest, build_env, check_env
    from aipc_env.trainenv.drift import EnvCheckReport
    from aipc_env.trainenv.envs import EnvChoice, env_python, prefix_to_build
    from aipc_env.trainenv.record import read_env_record
    from aipc_env.trainenv.select import decide
    from aipc_env.trainenv.situation import situation_for

    if args.bundle:
        return _bundle(args)
    matrix = load_matrix(args.matrix)
    platform, families = _machine(args)
    root = lock_root(args)
    record = read_env_record()
    recorded = None
    if record is not None and (args.prefix is None or Path(args.prefix).absolute() == Path(record.prefix)):
        recorded = EnvChoice(Path(record.prefix), env_python(Path(record.prefix)), "state", record)
    choice = decide(situation_for("build", matrix, platform, pair_flag=args.pair, env=recorded), "build").pair
    pair = choice.pair
    assert pair is not None
    prefix = prefix_to_build(args.prefix, recorded, pair.id)
    if args.check:
        lockfile = pylock_path(root / pair.id, platform)
        report = EnvCheckReport(
            pair=pair.id,
            prefix=str(prefix),
            lockfile=str(lockfile),
            drift=check_env(prefix, lockfile, platform, interpreter=True),
        )

        def drift() -> None:
            if not report.drift:
                print(f"{prefix} matches the {pair.id} lock")
                return
            print(f"{len(report.drift)} difference(s) between {prefix} and the {pair.id} lock:")
            for d in report.drift:
                print(f"  {d.kind:8} {d.describe()}")
            print(f"repair: nox -s env -- --pair {pair.id}" + (f' --prefix "{prefix}"' if args.prefix else ""))

        return Result(report, drift, ExitCode.OK if report.clean else ExitCode.PROBLEMS)
    issues = issue_warnings(pair, platform, families)
    for line in issues:
        progress(args).warn(f"aipc-env: warning: {line}")
    if args.dry_run:
        return _dry_run(args, pair, root, platform, issues)
    log = log_path(f"env-{pair.id}")
    progress(args).say(f"pair {pair.id} ({choice.why}); env {prefix}; log {log}")
    req = EnvRequest(
        pair=pair,
        prefix=prefix,
        platform=platform,
        lock_root=root,
        log=log,
        indexes=Indexes(args.pypi_url or PYPI_URL, args.xpu_index_url or XPU_INDEX_URL),
        base_python=args.base_python,
        python=args.python,
        conda_tool=None if args.base_python else find_conda_tool(args.conda_tool),
        unlocked=args.unlocked,
        accept_metadata_drift=args.accept_metadata_drift,
        common=common_requirements(args.pip_layer) if args.pip_layer else None,
    )
    result = build_env(req)

    def built() -> None:
        if result.changed:
            repaired = f" (repaired {len(result.drift_before)} difference(s))" if result.drift_before else ""
            print(f"built {prefix} from {result.lockfile} in {result.seconds:.1f} s{repaired}")
        else:
            print(f"{prefix} is up to date with {result.lockfile} ({result.seconds:.2f} s); nothing changed")

    return Result(
        EnvBuildReport(
            pair=pair.id,
            why=choice.why,
            prefix=str(prefix),
            lockfile=str(result.lockfile),
            changed=result.changed,
            repaired=result.drift_before,
            seconds=round(result.seconds, 3),
            log=str(log),
        ),
        built,
    )


def _machine(args: argparse.Namespace) -> tuple[Platform, frozenset[str]]:
    """The platform and Intel GPU families the build is for: the --facts file's (dry run only), else this
    machine's (its display adapters, read without subprocesses)."""
    from aipc_env.core.gpus import families_of, is_intel_gpu
    from aipc_env.core.platforms import current_platform, display_adapters
    from aipc_env.errors import InputError
    from aipc_env.facts.model import load_facts

    if args.facts:
        if not args.dry_run:
            raise InputError(
                "--facts describes a machine to plan for, not this one",
                key="--facts",
                fix="add --dry-run, or leave --facts out to build on this machine",
            )
        facts = load_facts(args.facts)
        return ("win-64" if facts.is_windows else "linux-64"), facts.gpu_families
    return current_platform(), families_of(
        (name, device) for vendor, device, name, _ in display_adapters() if is_intel_gpu(vendor, name)
    )


def _dry_run(args: argparse.Namespace, pair: Pair, root: Path, platform: Platform, issues: list[str]) -> Result:
    """The install plan of the pair's lock for this platform: nothing is fetched or changed."""
    from aipc_env.errors import InputError
    from aipc_env.lock.artifacts import InstallPlanReport, install_plan
    from aipc_env.lock.lockfile import meta_path, pylock_path, read_meta, read_pylock
    from aipc_env.trainenv.build import lock_pythons

    lockfile = pylock_path(root / pair.id, platform)
    if not lockfile.is_file():
        raise InputError(f"no {platform} lock for {pair.id}", path=lockfile, fix=f"make one: nox -s lock -- --pair {pair.id}")
    python = args.python or (read_meta(root / pair.id).python if meta_path(root / pair.id).is_file() else DEFAULT_PYTHON)
    covered = lock_pythons(root / pair.id)
    if covered and python not in covered:
        raise InputError(
            f"the {pair.id} lock covers Python {', '.join(covered)}, not {python}",
            path=lockfile,
            key="--python",
            fix=f"pass --python {' or --python '.join(covered)}, or re-lock: nox -s lock -- --pair {pair.id} --python {python}",
        )
    plan = install_plan(read_pylock(lockfile, platform), python, lockfile, platform)
    known = sum(a.size or 0 for a in plan)
    unknown = [a for a in plan if a.size is None]

    def text() -> None:
        print(f"{pair.id} on {platform}, Python {python}, from {lockfile}: {len(plan)} artifacts")
        for a in plan:
            size = f"{a.size / 2**20:8.1f} MB" if a.size is not None else "    size ?"
            print(f"  {size}  {a.filename:<70} {a.where} ({a.provenance})")
        hosts = sorted({a.where for a in plan})
        print(
            f"total {known / 2**30:.2f} GB known"
            + (
                f", plus {len(unknown)} artifact(s) whose size no lock records ({', '.join(a.filename for a in unknown)})"
                if unknown
                else ""
            )
            + f"; from {', '.join(hosts)}; nothing was changed"
        )

    return Result(
        InstallPlanReport(
            pair=pair.id,
            platform=platform,
            python=python,
            lockfile=str(lockfile),
            known_bytes=known,
            size_unknown=[a.filename for a in unknown],
            artifacts=plan,
            known_issues=issues,
        ),
        text,
    )


def _bundle(args: argparse.Namespace) -> Result:

    from aipc_env.fleet.bundle_check import verify_bundle
    from aipc_env.fleet.bundle_files import MANIFEST
    from aipc_env.fleet.sign import read_public_key
    from aipc_env.paths import log_path
    from aipc_env.trainenv.build import EnvBuildReport, check_env, install_offline
    from aipc_env.trainenv.drift import EnvCheckReport
    from aipc_env.trainenv.envs import default_env_prefix

    trust = read_public_key(args.trust) if args.trust else None
    manifest = verify_bundle(args.bundle, trust, warn=lambda text: progress(args).warn(f"aipc-env: {text}"))
    prefix = Path(args.prefix).absolute() if args.prefix else default_env_prefix(manifest.pair, source=args.bundle / MANIFEST)
    lockfile = args.bundle / manifest.lockfile
    if args.check:
        report = EnvCheckReport(
            pair=manifest.pair,
            prefix=str(prefix),
            lockfile=str(lockfile),
            drift=check_env(prefix, lockfile, manifest.platform, interpreter=True),
        )
        return Result(
            report,
            lambda: print(
                f"{prefix} matches the bundle's lock"
                if report.clean
                else "\n".join(f"  {d.kind:8} {d.describe()}" for d in report.drift)
            ),
            ExitCode.OK if report.clean else ExitCode.PROBLEMS,
        )
    log = log_path("env-bundle")
    result = install_offline(
        args.bundle / "wheels",
        args.bundle / manifest.requirements,
        lockfile,
        pair=manifest.pair,
        platform=manifest.platform,
        prefix=prefix,
        base_python=args.base_python or sys.executable,
        log=log,
    )
    return Result(
        EnvBuildReport(
            pair=manifest.pair,
            why="offline bundle",
            prefix=str(prefix),
            lockfile=str(lockfile),
            changed=True,
            repaired=[],
            seconds=round(result.seconds, 3),
            log=str(log),
        ),
        lambda: print(f"built {prefix} from the bundle {args.bundle} in {result.seconds:.1f} s (no network)"),
    )
