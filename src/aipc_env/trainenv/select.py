"""THE env and pair policy, as pure functions of a `Situation` (gathered once per command by
trainenv.situation) and a purpose. Nothing else decides either; `choose_pair` is called from `decide` only.

Env, first match wins (the candidates are gathered; this module picks):
  1. `--env PREFIX` (flag)
  2. for a qflux run (`engine: qflux`, `adapt --smoke`): the clone's qflux env, which the run service builds
  3. the env built by `aipc-env env` (state: env.json)
  4. the env the last `train`/`verify`/`distill` ran in (used: last-env.json), when it still exists
  5. the active conda env (CONDA_PREFIX), when it is not this interpreter's
  6. aipc-env's own training env (tool), when this interpreter has no torch (a pipx install): a run has the run
     service build it on first use, the way `nox -s train` builds its env; other commands use it once it exists
  7. this interpreter (current)

Pair, first match wins (purpose "build" adds 4-6: commands that build or edit for a pair; "target", a machine other
than this one, has 1 and 6 only):
  1. `--pair ID`
  2. the pair resolved from the env's installed packages (what is installed decides what is activated)
  3. the pair recorded when aipc-env built the chosen env (its packages no longer say: a drifted env)
  4. the newest confirmed pair matching an installed oneAPI toolkit
  5. the pair whose torch the local wheel folder holds (AIPC_ENV_TORCH_WHEELS), so an offline machine gets a
     pair it can install
  6. the newest confirmed pair for this platform
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from aipc_env.core.invocation import command
from aipc_env.core.platforms import Platform
from aipc_env.errors import InputError
from aipc_env.matrix import Matrix, Pair
from aipc_env.matrix.resolve import Resolution, resolve_pair
from aipc_env.trainenv.envs import EnvChoice
from aipc_env.trainenv.record import EnvRecord

__all__ = ["Decision", "EnvCandidates", "PairChoice", "Purpose", "Situation", "choose_env", "choose_pair", "decide"]

Purpose = Literal["run", "build", "target"]


@dataclass(frozen=True)
class EnvCandidates:
    """Every env the policy could pick, as found on this machine (existence already checked by the gatherer)."""

    flag: EnvChoice | None = None
    flag_missing: Path | None = None
    """--env named a prefix with no interpreter."""
    built: EnvChoice | None = None
    built_missing: EnvRecord | None = None
    """env.json names an env whose interpreter is gone."""
    used: EnvChoice | None = None
    conda: EnvChoice | None = None
    tool: EnvChoice | None = None
    current: EnvChoice | None = None
    torch_importable: bool = True
    """Whether this interpreter has torch (else a run gets the tool's own training env)."""


@dataclass(frozen=True)
class Situation:
    """What the env and pair choice depends on, gathered once per command. `env`: the env the command works on
    (chosen from the candidates, or named by the command, e.g. the one `aipc-env env` builds); `installed` its
    packages (None: not read); `recorded` the pair aipc-env built it for; `toolkits` and `offered_torch` this
    machine's oneAPI releases and the torch versions of its local wheel folder (empty for a target machine)."""

    matrix: Matrix
    platform: Platform
    pair_flag: str | None = None
    env: EnvChoice | None = None
    installed: Mapping[str, str] | None = None
    recorded: str | None = None
    """The pair `env` was built for, by aipc-env's record of it."""
    torch_version_xpu: str | None = None
    toolkits: tuple[str, ...] = ()
    offered_torch: tuple[str, ...] = ()
    qflux_clone: Path | None = None
    torch_importable: bool = True
    resolution: Resolution | None = field(default=None, compare=False)
    """A resolution of `installed` made already (the doctor's); else made here."""


@dataclass(frozen=True)
class PairChoice:
    pair: Pair | None
    why: str


@dataclass(frozen=True)
class Decision:
    env: EnvChoice | None
    pair: PairChoice
    build: Literal["qflux", "tool"] | None = None
    """An env the run service must build first (then it decides again on the built env's situation)."""


def choose_env(candidates: EnvCandidates) -> EnvChoice:
    """The env by the policy above. A flag or built env without an interpreter is an input error."""
    if candidates.flag_missing is not None:
        raise InputError(
            "no Python interpreter in this training env",
            path=candidates.flag_missing,
            key="--env",
            fix="pass the prefix of an existing env (the folder holding bin/python or python.exe)",
        )
    if candidates.flag is not None:
        return candidates.flag
    if candidates.built_missing is not None:
        built = candidates.built_missing
        raise InputError(
            "the training env built by aipc-env is gone (no Python interpreter)",
            path=built.prefix,
            fix=f"rebuild it: {command('env', '--pair', built.pair) if built.pair else command('env')}",
        )
    for choice in (candidates.built, candidates.used, candidates.conda, candidates.tool, candidates.current):
        if choice is not None:
            return choice
    raise InputError("no Python interpreter to run in", fix="pass --env PREFIX")


def _release_key(release: str) -> tuple[int, ...]:
    return tuple(int(x) for x in release.split("."))


def choose_pair(situation: Situation, purpose: Purpose) -> PairChoice:
    """The pair by the policy above (None: the env is not an XPU env and the purpose asks for no fallback)."""
    matrix, platform = situation.matrix, situation.platform
    if situation.pair_flag:
        return PairChoice(matrix.get(situation.pair_flag), "--pair")
    if purpose == "target":
        return PairChoice(matrix.newest(platform), f"newest supported pair for {platform}")
    resolution = situation.resolution
    if resolution is None and situation.installed:
        resolution = resolve_pair(dict(situation.installed), matrix, platform, torch_version_xpu=situation.torch_version_xpu)
    if resolution is not None and resolution.pair:
        return PairChoice(matrix.by_id[resolution.pair], "resolved from the env's packages")
    recorded = situation.recorded
    if recorded and recorded in matrix.by_id:
        return PairChoice(matrix.by_id[recorded], "recorded when aipc-env built the env")
    if purpose != "build":
        return PairChoice(None, "the env has no torch+xpu or Intel runtime packages")
    for release in sorted(situation.toolkits, key=_release_key, reverse=True):
        usable = [p for p in matrix.for_toolkit(release) if p.certainty == "confirmed" and p.supports(platform)]
        if usable:
            return PairChoice(usable[0], f"matches the installed oneAPI {release}")
    for version in situation.offered_torch:
        usable = [p for p in matrix.pairs if p.newest_torch == version and p.supports(platform)]
        if usable:
            return PairChoice(usable[-1], f"its torch {version} is in the local wheel folder")
    return PairChoice(matrix.newest(platform), "newest supported pair")


def decide(situation: Situation, purpose: Purpose) -> Decision:
    """The env and the pair for a purpose. A qflux run without --env runs in the clone's qflux env, made for the
    pair the "build" policy picks; a run in an interpreter without torch runs in the tool's own env: both are built
    by the run service (`Decision.build`), which then decides again on the built env (a qflux env, an env of the
    tool's that has torch: no second build)."""
    env = situation.env
    build: Literal["qflux", "tool"] | None = None
    if purpose == "run" and situation.qflux_clone is not None and (env is None or env.source not in ("flag", "qflux")):
        situation = replace(situation, env=None, installed=None, resolution=None, recorded=None)  # the env is made for the pair
        env, build, purpose = None, "qflux", "build"
    elif purpose == "run" and env is not None and env.is_current and not situation.torch_importable:
        return Decision(env, PairChoice(None, "the tool's own training env is built first"), "tool")
    return Decision(env, choose_pair(situation, purpose), build)
