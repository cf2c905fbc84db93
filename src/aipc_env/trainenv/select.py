"""THE env and pair policy: which training env a command uses, and which pair it is for. Used by doctor, train,
verify, distill, the qflux smoke (through the run service), env, patch-requirements, fleet and container; nothing
else decides either.

Env, first match wins:
  1. `--env PREFIX` (flag)
  2. for a qflux run (`engine: qflux`, `adapt --smoke`): the clone's qflux env, built when missing (qflux)
  3. the env built by `aipc-env env` (state: env.json)
  4. the env the last `train`/`verify`/`distill` ran in (used: last-env.json), when it still exists
  5. the active conda env (CONDA_PREFIX), when it is not this interpreter's
  6. aipc-env's own training env (tool), when this interpreter has no torch (a pipx install): a run builds it on
     first use, the way `nox -s train` builds its env (trainenv.tool_env); other commands use it once it exists
  7. this interpreter (current)

Pair, first match wins (`fallback=True` adds 4-6 for commands that build or edit for a pair):
  1. `--pair ID`
  2. the pair resolved from the env's installed packages (what is installed decides what is activated)
  3. the pair recorded when aipc-env built the chosen env (its packages no longer say: a drifted env)
  4. the newest confirmed pair matching an installed oneAPI toolkit
  5. the pair whose torch the local wheel folder holds (AIPC_ENV_TORCH_WHEELS), so an offline machine gets a
     pair it can install
  6. the newest confirmed pair for this platform
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from aipc_env.errors import InputError
from aipc_env.matrix import Matrix, Pair
from aipc_env.platforms import Platform
from aipc_env.trainenv.record import EnvRecord, read_env_record, read_used_env

if TYPE_CHECKING:  # pragma: no cover
    from aipc_env.matrix.resolve import Resolution

__all__ = ["SOURCE_WORDS", "EnvChoice", "EnvSource", "PairChoice", "choose_env", "choose_pair", "env_and_pair",
           "env_python", "offered_torch_versions"]

EnvSource = Literal["flag", "qflux", "state", "used", "conda", "tool", "current"]
SOURCE_WORDS: dict[str, str] = {
    "flag": "given with --env",
    "qflux": "the clone's qflux env, built by aipc-env",
    "state": "built by `aipc-env env`",
    "used": "the env the last `aipc-env train`/`verify`/`distill` ran in",
    "conda": "the active conda env",
    "tool": "aipc-env's own training env, built on first use (this interpreter has no torch)",
    "current": "this interpreter; no training env is built or recorded",
}


def env_python(prefix: Path) -> Path:
    """The interpreter of an env prefix (conda env or venv, Windows or POSIX)."""
    for rel in ("python.exe", "Scripts/python.exe", "bin/python3", "bin/python"):
        candidate = prefix / rel
        if candidate.is_file():
            return candidate
    return prefix / ("python.exe" if sys.platform == "win32" else "bin/python")


def _same_path(a: str | Path, b: str | Path) -> bool:
    try:
        return Path(a).resolve() == Path(b).resolve()
    except OSError:
        return os.path.normcase(str(a)) == os.path.normcase(str(b))


@dataclass(frozen=True)
class EnvChoice:
    prefix: Path
    python: Path
    source: EnvSource
    record: EnvRecord | None = None
    """The built-env record, when the chosen env is the one aipc-env built."""

    @property
    def is_current(self) -> bool:
        return self.source == "current"

    def describe(self) -> str:
        """Which env, why, and how to point elsewhere (for people)."""
        return f"{self.prefix} ({SOURCE_WORDS[self.source]}; use --env PREFIX for another)"


def choose_env(flag: Path | None = None) -> EnvChoice:
    """The training env by the policy above. A flag or built env without an interpreter is an input error;
    a stale last-used record is skipped."""
    built = read_env_record()
    if flag is not None:
        prefix = Path(flag).absolute()
        python = env_python(prefix)
        if not python.is_file():
            raise InputError("no Python interpreter in this training env", path=prefix, key="--env",
                             fix="pass the prefix of an existing env (the folder holding bin/python or python.exe)")
        rec = built if built is not None and _same_path(built.prefix, prefix) else None
        return EnvChoice(prefix, python, "flag", rec)
    if built is not None:
        prefix = Path(built.prefix)
        python = env_python(prefix)
        if not python.is_file():
            raise InputError("the training env built by aipc-env is gone (no Python interpreter)", path=prefix,
                             fix=f"rebuild it: nox -s env -- --pair {built.pair}"
                             if built.pair else "rebuild it: nox -s env")
        return EnvChoice(prefix, python, "state", built)
    used = read_used_env()
    if used is not None and Path(used.python).is_file():
        return EnvChoice(Path(used.prefix), Path(used.python), "used")
    conda = os.environ.get("CONDA_PREFIX")
    if conda and not _same_path(conda, sys.prefix) and env_python(Path(conda)).is_file():
        return EnvChoice(Path(conda), env_python(Path(conda)), "conda")
    from aipc_env.trainenv.tool_env import STAMP, can_import_torch, tool_env_prefix

    tool = tool_env_prefix()
    if not can_import_torch() and (tool / STAMP).is_file() and env_python(tool).is_file():
        return EnvChoice(tool, env_python(tool), "tool")
    return EnvChoice(Path(sys.prefix), Path(sys.executable), "current")


@dataclass(frozen=True)
class PairChoice:
    pair: Pair | None
    why: str


def _release_key(release: str) -> tuple[int, ...]:
    return tuple(int(x) for x in release.split("."))


def choose_pair(matrix: Matrix, platform: Platform, *, flag: str | None = None, env: EnvChoice | None = None,
                distributions: dict[str, str] | None = None, recorded: str | None = None,
                resolution: Resolution | None = None, toolkits: list[str] | None = None,
                offered_torch: list[str] | None = None, fallback: bool = False) -> PairChoice:
    """The pair by the policy above (None: the env is not an XPU env and no fallback was asked for). `recorded`
    (else the env's record) is the pair an env was built for; `resolution` a resolution of `distributions` made
    already (the doctor's); `offered_torch` the torch versions a local wheel folder holds."""
    if flag:
        return PairChoice(matrix.get(flag), "--pair")
    if resolution is None and distributions:
        from aipc_env.matrix.resolve import resolve_pair

        resolution = resolve_pair(distributions, matrix, platform)
    if resolution is not None and resolution.pair:
        return PairChoice(matrix.by_id[resolution.pair], "resolved from the env's packages")
    recorded = recorded or (env.record.pair if env is not None and env.record is not None else None)
    if recorded and recorded in matrix.by_id:
        return PairChoice(matrix.by_id[recorded], "recorded when aipc-env built the env")
    if not fallback:
        return PairChoice(None, "the env has no torch+xpu or Intel runtime packages")
    for release in sorted(toolkits or [], key=_release_key, reverse=True):
        usable = [p for p in matrix.for_toolkit(release) if p.certainty == "confirmed" and p.supports(platform)]
        if usable:
            return PairChoice(usable[0], f"matches the installed oneAPI {release}")
    for version in offered_torch or []:
        usable = [p for p in matrix.pairs if p.newest_torch == version and p.supports(platform)]
        if usable:
            return PairChoice(usable[-1], f"its torch {version} is in the local wheel folder")
    return PairChoice(matrix.newest(platform), "newest supported pair")


def offered_torch_versions(environ: dict[str, str] | None = None) -> list[str]:
    """The torch versions of the wheels in AIPC_ENV_TORCH_WHEELS (newest first); [] without a folder."""
    from packaging.version import InvalidVersion, Version

    from aipc_env.trainenv.torch_source import ENV_VARS

    folder = (os.environ if environ is None else environ).get(ENV_VARS["wheels"])
    if not folder or not Path(folder).is_dir():
        return []
    versions = set()
    for wheel in Path(folder).glob("torch-*.whl"):
        try:
            versions.add(Version(wheel.name.split("-")[1]).base_version)
        except (IndexError, InvalidVersion):
            continue
    return sorted(versions, key=Version, reverse=True)


def env_and_pair(matrix: Matrix, platform: Platform, *, env_flag: Path | None, pair_flag: str | None,
                 qflux_clone: Path | None = None, toolkits: list[str] | None = None,
                 log: Callable[[str], None] = print) -> tuple[EnvChoice, PairChoice]:
    """The env a run uses and its pair, by the policy above: train, verify, distill and the qflux smoke (through
    the run service). A qflux run without --env gets the clone's qflux env, built for the pair the policy picks
    (with fallback: the env is made for it); other envs have a pair only if they are XPU envs."""
    from aipc_env.facts.gather import inspect_env

    if qflux_clone is not None and env_flag is None:
        from aipc_env.qflux.env import ensure_qflux_env

        pair = choose_pair(matrix, platform, flag=pair_flag, toolkits=toolkits,
                           offered_torch=offered_torch_versions(), fallback=True)
        assert pair.pair is not None
        prefix, record = ensure_qflux_env(Path(qflux_clone), pair.pair, log=log)
        env = EnvChoice(prefix, env_python(prefix), "qflux", record)
        if record.pair is None:  # a CPU build of the pair's torch: not an XPU env, nothing to activate
            return env, PairChoice(None, f"the qflux env has the CPU build of {pair.pair.id}'s torch")
        return env, PairChoice(pair.pair, pair.why)
    env = choose_env(env_flag)
    if env.is_current:
        from aipc_env.trainenv.tool_env import can_import_torch, ensure_tool_env

        if not can_import_torch():  # a tool installed without torch: its own training env, built once
            prefix = ensure_tool_env(log=log)
            env = EnvChoice(prefix, env_python(prefix), "tool")
    installed = None if pair_flag else inspect_env(env.prefix, env.python, source=env.source,
                                                   current=env.is_current).distributions
    return env, choose_pair(matrix, platform, flag=pair_flag, env=env, distributions=installed)
