"""THE env and pair policy: which training env a command uses, and which pair it is for. Used by doctor, train,
verify, env and patch-requirements; nothing else decides either.

Env, first match wins:
  1. `--env PREFIX` (flag)
  2. the env built by `aipc-env env` (state: env.json)
  3. the env the last `train`/`verify` ran in (used: last-env.json), when it still exists
  4. the active conda env (CONDA_PREFIX), when it is not this interpreter's
  5. this interpreter (current)

Pair, first match wins (`fallback=True` adds 4 and 5 for commands that build or edit for a pair):
  1. `--pair ID`
  2. the pair recorded when aipc-env built the chosen env
  3. the pair resolved from the env's installed packages
  4. the newest confirmed pair matching an installed oneAPI toolkit
  5. the newest confirmed pair for this platform
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from aipc_env.errors import InputError
from aipc_env.matrix import Matrix, Pair
from aipc_env.platforms import Platform
from aipc_env.trainenv.record import EnvRecord, read_env_record, read_used_env

__all__ = ["EnvSource", "EnvChoice", "PairChoice", "choose_env", "choose_pair", "env_and_pair", "env_python",
           "SOURCE_WORDS"]

EnvSource = Literal["flag", "state", "used", "conda", "current"]
SOURCE_WORDS: dict[str, str] = {
    "flag": "given with --env",
    "state": "built by `aipc-env env`",
    "used": "the env the last `aipc-env train`/`verify` ran in",
    "conda": "the active conda env",
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
    return EnvChoice(Path(sys.prefix), Path(sys.executable), "current")


@dataclass(frozen=True)
class PairChoice:
    pair: Pair | None
    why: str


def _release_key(release: str) -> tuple[int, ...]:
    return tuple(int(x) for x in release.split("."))


def choose_pair(matrix: Matrix, platform: Platform, *, flag: str | None = None, env: EnvChoice | None = None,
                distributions: dict[str, str] | None = None, toolkits: list[str] | None = None,
                fallback: bool = False) -> PairChoice:
    """The pair by the policy above (None: the env is not an XPU env and no fallback was asked for)."""
    if flag:
        return PairChoice(matrix.get(flag), "--pair")
    if env is not None and env.record is not None and env.record.pair:
        pair = matrix.by_id.get(env.record.pair)
        if pair is not None:
            return PairChoice(pair, "recorded when aipc-env built the env")
    if distributions:
        from aipc_env.matrix.resolve import resolve_pair

        res = resolve_pair(distributions, matrix, platform)
        if res.pair:
            return PairChoice(matrix.by_id[res.pair], "resolved from the env's packages")
    if not fallback:
        return PairChoice(None, "the env has no torch+xpu or Intel runtime packages")
    for release in sorted(toolkits or [], key=_release_key, reverse=True):
        usable = [p for p in matrix.for_toolkit(release) if p.certainty == "confirmed" and p.supports(platform)]
        if usable:
            return PairChoice(usable[0], f"matches the installed oneAPI {release}")
    return PairChoice(matrix.newest(platform), "newest supported pair")


def env_and_pair(matrix: Matrix, platform: Platform, *, env_flag: Path | None,
                 pair_flag: str | None) -> tuple[EnvChoice, PairChoice]:
    """The env a run uses and its pair (no fallback: a CPU/CUDA env has no pair), for train and verify."""
    from aipc_env.facts.gather import inspect_env

    env = choose_env(env_flag)
    installed = None if pair_flag else inspect_env(env.prefix, env.python, source=env.source,
                                                   current=env.is_current).distributions
    return env, choose_pair(matrix, platform, flag=pair_flag, env=env, distributions=installed)
