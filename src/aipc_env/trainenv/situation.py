"""The situation a command decides in, gathered once before it decides (the only I/O of the env and pair policy):
the env candidates, the chosen env's packages, this machine's oneAPI releases and local torch wheels. The choice
itself is trainenv.select's, a pure function of what is gathered here."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from aipc_env.core.platforms import Platform
from aipc_env.core.specs import parse_version
from aipc_env.errors import AipcError
from aipc_env.facts.gather import EnvSeen, GatherOptions, gather_facts, inspect_env, installed_toolkits, toolchain_facts
from aipc_env.facts.model import Facts
from aipc_env.matrix import Matrix, Pair
from aipc_env.matrix.resolve import Resolution
from aipc_env.trainenv.envs import EnvChoice, env_python
from aipc_env.trainenv.record import read_env_record, read_used_env, read_verify_record
from aipc_env.trainenv.select import EnvCandidates, Purpose, Situation, choose_env, decide

__all__ = [
    "env_candidates",
    "gather_machine",
    "offered_torch_versions",
    "situation_for",
    "situation_from_facts",
    "target_pair",
    "the_env",
]


def _same_path(a: str | Path, b: str | Path) -> bool:
    try:
        return Path(a).resolve() == Path(b).resolve()
    except OSError:
        return os.path.normcase(str(a)) == os.path.normcase(str(b))


def env_candidates(flag: Path | None = None) -> EnvCandidates:
    """Every env the policy could pick here, each checked for an interpreter."""
    from aipc_env.trainenv.tool_env import STAMP, can_import_torch, tool_env_prefix

    built = read_env_record()
    flag_choice = flag_missing = built_choice = built_missing = None
    if flag is not None:
        prefix = Path(flag).absolute()
        python = env_python(prefix)
        rec = built if built is not None and _same_path(built.prefix, prefix) else None
        if python.is_file():
            flag_choice = EnvChoice(prefix, python, "flag", rec)
        else:
            flag_missing = prefix
    if built is not None:
        python = env_python(Path(built.prefix))
        if python.is_file():
            built_choice = EnvChoice(Path(built.prefix), python, "state", built)
        else:
            built_missing = built
    used = read_used_env()
    used_choice = (
        EnvChoice(Path(used.prefix), Path(used.python), "used") if used is not None and Path(used.python).is_file() else None
    )
    conda = os.environ.get("CONDA_PREFIX")
    conda_choice = (
        EnvChoice(Path(conda), env_python(Path(conda)), "conda")
        if conda and not _same_path(conda, sys.prefix) and env_python(Path(conda)).is_file()
        else None
    )
    torch_importable = can_import_torch()
    tool = tool_env_prefix()
    tool_choice = (
        EnvChoice(tool, env_python(tool), "tool")
        if not torch_importable and (tool / STAMP).is_file() and env_python(tool).is_file()
        else None
    )
    return EnvCandidates(
        flag=flag_choice,
        flag_missing=flag_missing,
        built=built_choice,
        built_missing=built_missing,
        used=used_choice,
        conda=conda_choice,
        tool=tool_choice,
        current=EnvChoice(Path(sys.prefix), Path(sys.executable), "current"),
        torch_importable=torch_importable,
    )


def the_env(flag: Path | None = None) -> EnvChoice:
    """The training env by the policy (trainenv.select.choose_env) over this machine's candidates."""
    return choose_env(env_candidates(flag))


def offered_torch_versions(environ: dict[str, str] | None = None) -> list[str]:
    """The torch versions of the wheels in AIPC_ENV_TORCH_WHEELS (newest first); [] without a folder."""
    from packaging.version import InvalidVersion, Version

    from aipc_env.trainenv.torch_source import local_wheel_folder

    folder = local_wheel_folder(environ)
    if folder is None or not folder.is_dir():
        return []
    versions = set()
    for wheel in folder.glob("torch-*.whl"):
        try:
            versions.add(parse_version(wheel.name.split("-")[1]).base_version)
        except (IndexError, InvalidVersion):
            continue
    return sorted(versions, key=Version, reverse=True)


def situation_for(
    purpose: Purpose,
    matrix: Matrix,
    platform: Platform,
    *,
    pair_flag: str | None = None,
    env: EnvChoice | None = None,
    toolkits: list[str] | None = None,
    qflux_clone: Path | None = None,
) -> Situation:
    """The one place a situation is gathered: what each purpose reads.

    - "target" (a container image, a fleet: another machine): nothing of this one; the policy has --pair and the
      newest supported pair.
    - "build" and "run": `env` (the env the command works on, chosen with `the_env` or the one it builds; None
      when there is none yet) and its installed packages (unless --pair decides), the pair aipc-env recorded for
      it, this machine's oneAPI releases (`toolkits` when the caller read them already), its local torch wheels,
      whether this interpreter has torch, and for a run the qflux clone."""
    from aipc_env.trainenv.tool_env import can_import_torch

    if purpose == "target":
        return Situation(matrix, platform, pair_flag=pair_flag)
    installed = None
    if env is not None and not pair_flag:
        installed = inspect_env(env.prefix, env.python, source=env.source, current=env.is_current).distributions
    if toolkits is None and not pair_flag:
        toolkits = installed_toolkits(toolchain_facts()[0])
    return Situation(
        matrix,
        platform,
        pair_flag=pair_flag,
        env=env,
        installed=installed,
        recorded=env.record.pair if env is not None and env.record is not None else None,
        toolkits=tuple(toolkits or ()),
        offered_torch=tuple(offered_torch_versions()),
        qflux_clone=qflux_clone if purpose == "run" else None,
        torch_importable=can_import_torch(),
    )


def target_pair(matrix: Matrix, platform: Platform, pair_flag: str | None) -> Pair:
    """The pair for another machine (an image, a fleet's PCs) by the policy: --pair, else the newest supported."""
    pair = decide(situation_for("target", matrix, platform, pair_flag=pair_flag), "target").pair.pair
    assert pair is not None  # a target always gets a pair
    return pair


def situation_from_facts(
    facts: Facts, matrix: Matrix, platform: Platform, installed: Mapping[str, str], resolution: Resolution | None
) -> Situation:
    """The doctor's situation: everything from the facts it gathered (it reads nothing more), with the platform,
    packages and resolution of them it made already."""
    env = facts.training_env
    probe = facts.device_probe
    return Situation(
        matrix,
        platform,
        installed=installed,
        resolution=resolution,
        torch_version_xpu=probe.torch_version_xpu if probe else None,
        recorded=env.pair if env else None,
        toolkits=tuple(installed_toolkits(facts.oneapi)),
        offered_torch=tuple(facts.local_torch_wheels),
    )


def gather_machine(opts: GatherOptions, env_flag: Path | None = None) -> Facts:
    """The machine as the doctor sees it: facts.gather's probes of the env the policy picks (an env the policy
    cannot use, e.g. --env without an interpreter, is a fact the checks report), the last verify record and the
    local wheel folder's torch versions."""
    try:
        choice = the_env(env_flag)
        seen = EnvSeen(
            prefix=choice.prefix,
            python=choice.python,
            source=choice.source,
            current=choice.is_current,
            pair=choice.record.pair if choice.record else None,
            built_at=choice.record.built_at if choice.record else None,
        )
    except AipcError as exc:
        seen = EnvSeen(prefix=env_flag or Path(exc.path or ""), source="flag" if env_flag else "state", error=exc.message)
    opts.env, opts.read_last_verify = seen, read_verify_record
    facts = gather_facts(opts)
    facts.local_torch_wheels = offered_torch_versions()
    return facts
