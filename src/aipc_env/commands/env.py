"""`aipc-env env`: build (or repair) the training env from its lock; `--check` reports drift only."""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    from aipc_env.commands.lock import _index_args

    p = sub.add_parser("env", help="build or repair the training env from the pair's lock; --check for drift",
                       description="Exit 0: built or up to date (--check: no drift); 1: drift or failure; 2: input.")
    p.add_argument("--pair", metavar="ID", help="default: the pair of an installed oneAPI toolkit, else the newest")
    p.add_argument("--prefix", type=Path, help="where the env lives (default: per-user data folder/envs/<pair>)")
    p.add_argument("--check", action="store_true", help="compare the env with its lock; change nothing")
    p.add_argument("--unlocked", action="store_true",
                   help="no lock yet: install from the specs and record what was installed as this pair's lock")
    p.add_argument("--base-python", metavar="PYTHON",
                   help="make the interpreter layer a venv of this Python instead of a conda env")
    p.add_argument("--conda-tool", choices=["conda-lock", "micromamba", "mamba", "conda"],
                   help="which conda flavour creates the interpreter layer (default: the first found)")
    p.add_argument("--json", action="store_true")
    _index_args(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import datetime as _dt
    import json

    from aipc_env.facts.gather import toolchain_facts
    from aipc_env.lock.build import EnvRequest, Indexes, build_env, check_env, choose_pair
    from aipc_env.lock.lockfile import pylock_path
    from aipc_env.lock.specs import PYPI_URL, XPU_INDEX_URL, common_requirements
    from aipc_env.lock.tools import find_conda_tool
    from aipc_env.matrix import load_matrix
    from aipc_env.paths import cache_dir, data_dir, project_root
    from aipc_env.platforms import current_platform
    from aipc_env.state import read_env_record

    matrix = load_matrix(args.matrix)
    platform = current_platform()
    root = args.lock_root or project_root() / "lockfiles"
    record = read_env_record()
    if args.check and not args.pair and not args.prefix and record and record.pair:
        pair, why = matrix.get(record.pair), "recorded env"
    else:
        toolkits = sorted({r for i in toolchain_facts()[0].installs for r in i.releases})
        pair, why = choose_pair(matrix, platform, args.pair, toolkits)
    prefix = args.prefix or (Path(record.prefix) if args.check and record and record.pair == pair.id
                             else data_dir() / "envs" / pair.id)
    if args.check:
        drift = check_env(prefix, pylock_path(root / pair.id, platform), platform)
        if args.json:
            print(json.dumps({"pair": pair.id, "prefix": str(prefix), "drift": [d.model_dump() for d in drift]},
                             indent=2))
        elif drift:
            print(f"{len(drift)} difference(s) between {prefix} and the {pair.id} lock:")
            for d in drift:
                print(f"  {d.kind:8} {d.describe()}")
            print(f"repair: nox -s env -- --pair {pair.id}" + (f" --prefix \"{prefix}\"" if args.prefix else ""))
        else:
            print(f"{prefix} matches the {pair.id} lock")
        return 1 if drift else 0
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    log = cache_dir() / "logs" / f"env-{pair.id}-{stamp}.log"
    print(f"pair {pair.id} ({why}); env {prefix}; log {log}", flush=True)
    req = EnvRequest(pair=pair, prefix=prefix, platform=platform, lock_root=root, log=log,
                     indexes=Indexes(args.pypi_url or PYPI_URL, args.xpu_index_url or XPU_INDEX_URL),
                     base_python=args.base_python, conda_tool=None if args.base_python else find_conda_tool(args.conda_tool),
                     unlocked=args.unlocked,
                     common=common_requirements(args.pip_layer) if args.pip_layer else None)
    result = build_env(req)
    if result.changed:
        repaired = f" (repaired {len(result.drift_before)} difference(s))" if result.drift_before else ""
        print(f"built {prefix} from {result.lockfile} in {result.seconds:.1f} s{repaired}")
    else:
        print(f"{prefix} is up to date with {result.lockfile} ({result.seconds:.2f} s); nothing changed")
    return 0
