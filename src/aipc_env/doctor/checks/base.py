"""Check types: a finding per check, and the registry the doctor runs. Checks are pure functions of facts."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from functools import cached_property
from typing import TYPE_CHECKING

from pydantic import BaseModel

from aipc_env.core.invocation import command
from aipc_env.core.platforms import Platform
from aipc_env.core.specs import Identifier
from aipc_env.facts.model import Facts
from aipc_env.lock.lockfile import Pylock
from aipc_env.matrix import Matrix, Pair
from aipc_env.matrix.resolve import Resolution, resolve_pair

if TYPE_CHECKING:  # pragma: no cover
    from aipc_env.trainenv.select import Situation

__all__ = [
    "CheckContext",
    "CheckSpec",
    "Finding",
    "Status",
    "Verdict",
    "check",
    "fail",
    "ok",
    "skip",
    "specs_of",
    "warn",
]


class Status(str, Enum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"
    CRASH = "crash"
    """The check itself raised: a bug in aipc-env, reported without stopping the other checks."""


class Finding(BaseModel):
    """What one check concluded. `ok` carries no fix; `warn`/`fail` always carry one."""

    id: Identifier
    category: str
    title: str
    status: Status
    seen: str
    why: str = ""
    fix: str = ""
    details: list[str] = []


@dataclass(frozen=True)
class Verdict:
    """What a check function returns; the runner adds the check's id, category and title."""

    status: Status
    seen: str
    why: str = ""
    fix: str = ""
    details: tuple[str, ...] = ()


def ok(seen: str, *details: str) -> Verdict:
    return Verdict(Status.OK, seen, details=details)


def warn(seen: str, why: str, fix: str, *details: str) -> Verdict:
    return Verdict(Status.WARN, seen, why, fix, details)


def fail(seen: str, why: str, fix: str, *details: str) -> Verdict:
    return Verdict(Status.FAIL, seen, why, fix, details)


def skip(seen: str) -> Verdict:
    return Verdict(Status.SKIP, seen)


@dataclass
class CheckContext:
    """What every check may use besides the facts: the matrix, and derived values computed once."""

    facts: Facts
    matrix: Matrix
    locks: frozenset[tuple[str, str]] = frozenset()
    """(pair, platform) of every lockfile in the checkout: fixes point at `nox -s env` only where it works."""
    lock_for: Callable[[str, Platform], Pylock | None] | None = None
    """The checkout's lock of (pair, platform), read by the caller (checks do no I/O themselves)."""
    conda_python_for: Callable[[str, Platform], str | None] | None = None
    """The interpreter version the checkout's conda layer of (pair, platform) holds, or None (no layer): read by
    the caller."""

    @property
    def platform(self) -> Platform:
        return "win-64" if self.facts.is_windows else "linux-64"

    @property
    def installed(self) -> dict[str, str]:
        env = self.facts.training_env
        return env.distributions if env and not env.error else {}

    @cached_property
    def resolution(self) -> Resolution:
        probe = self.facts.device_probe
        return resolve_pair(
            self.installed, self.matrix, self.platform, torch_version_xpu=probe.torch_version_xpu if probe else None
        )

    @cached_property
    def situation(self) -> Situation:
        """The env and pair policy's situation, from the facts (the doctor reads nothing more)."""
        from aipc_env.trainenv.situation import situation_from_facts

        return situation_from_facts(self.facts, self.matrix, self.platform, self.installed, self.resolution)

    @cached_property
    def pair(self) -> Pair | None:
        """The env's pair by the one policy (trainenv.select.choose_pair): resolved from its packages, else the
        pair recorded when it was built."""
        from aipc_env.trainenv.select import decide

        return decide(self.situation, "run").pair.pair

    @cached_property
    def fallback_pair(self) -> Pair:
        """The pair to build for when the env has none (the policy's fallback: installed toolkit, else newest)."""
        from dataclasses import replace

        from aipc_env.trainenv.select import decide

        pair = decide(replace(self.situation, installed=None, resolution=None, recorded=None), "build").pair.pair
        assert pair is not None
        return pair

    def env_fix(self, pair: Pair | None = None) -> str:
        """The command that builds or repairs the training env for a pair, and works on a fresh clone: from the
        lock where the checkout has one, else from the specs (recording this machine's lock)."""
        pair = pair or self.pair or self.fallback_pair
        if (pair.id, self.platform) in self.locks:
            return command("env", "--pair", pair.id)
        return (
            f"{command('env', '--pair', pair.id, '--unlocked')} (no lock for {pair.id} in this checkout: it resolves "
            "from the PyTorch XPU index and records this machine's lock)"
        )


CheckFn = Callable[[CheckContext], Verdict]


@dataclass(frozen=True)
class CheckSpec:
    id: str
    category: str
    title: str
    fn: CheckFn
    order: int = 0


_DECLARED = itertools.count()


def check(id: str, category: str, title: str) -> Callable[[CheckFn], CheckFn]:
    """Declare a check: a pure function of the context returning a Verdict (`ok`, `warn`, `fail`, `skip`).
    The spec is attached to the function; aipc_env.doctor.checks lists the modules whose checks run. The check
    modules call it after each def (`check("ram", ...)(check_ram)`) rather than as a decorator: mutmut leaves
    decorated functions unmutated, and the checks are what mutation testing must reach."""

    def deco(fn: CheckFn) -> CheckFn:
        fn.spec = CheckSpec(id=id, category=category, title=title, fn=fn, order=next(_DECLARED))  # type: ignore[attr-defined]  # the check registry marks the function object itself
        return fn

    return deco


def specs_of(module: object) -> list[CheckSpec]:
    """The checks a module declares, in the order they were declared."""
    found = [v.spec for v in vars(module).values() if callable(v) and isinstance(getattr(v, "spec", None), CheckSpec)]
    return sorted(found, key=lambda s: s.order)
