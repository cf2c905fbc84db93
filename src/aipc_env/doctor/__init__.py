"""The doctor: gather facts once, run every check in isolation, build a versioned report.

facts (aipc_env.facts) -> checks (doctor.checks, pure) -> DoctorReport (here) -> render (doctor.render) or JSON.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, ClassVar, Final, Literal

from pydantic import BaseModel

from aipc_env.core.formats import VersionedModel
from aipc_env.doctor.checks import CATEGORIES, REGISTRY, CheckContext, CheckSpec, Finding, Status
from aipc_env.errors import ExitCode, InputError
from aipc_env.facts.model import Facts
from aipc_env.matrix import Matrix
from aipc_env.matrix.resolve import Resolution

if TYPE_CHECKING:  # pragma: no cover
    from aipc_env.core.platforms import Platform
    from aipc_env.lock.lockfile import Pylock

__all__ = [
    "REPORT_SCHEMA_VERSION",
    "CheckCatalog",
    "CheckInfo",
    "DoctorReport",
    "Summary",
    "run_checks",
    "select_checks",
]

REPORT_SCHEMA_VERSION: Final = 1


class Summary(BaseModel):
    ok: int = 0
    warn: int = 0
    fail: int = 0
    skip: int = 0
    crash: int = 0

    @property
    def problems(self) -> int:
        return self.fail + self.crash


class DoctorReport(VersionedModel):
    """`aipc-env doctor --json`: stable, versioned, holds the facts so a fleet can re-check offline."""

    FORMAT: ClassVar[str] = "doctor report"
    FIX: ClassVar[str] = "write it with `aipc-env doctor --json`"
    schema_version: Literal[1] = REPORT_SCHEMA_VERSION
    facts: Facts
    resolution: Resolution
    findings: list[Finding]
    summary: Summary
    bottom_line: str = ""
    """One sentence first: can this machine train, and if not, the first thing to fix."""
    seconds: float

    @property
    def exit_code(self) -> int:
        return ExitCode.PROBLEMS if self.summary.problems else ExitCode.OK


class CheckInfo(BaseModel):
    id: str
    category: str
    title: str


class CheckCatalog(VersionedModel):
    """`aipc-env doctor --list-checks --json`."""

    FORMAT: ClassVar[str] = "check catalog"
    schema_version: Literal[1] = 1
    checks: list[CheckInfo]


def select_checks(names: Iterable[str] | None) -> list[CheckSpec]:
    order = list(REGISTRY)
    specs = sorted(REGISTRY.values(), key=lambda s: (CATEGORIES.index(s.category), order.index(s.id)))
    if not names:
        return specs
    wanted = list(names)
    unknown = [n for n in wanted if n not in REGISTRY]
    if unknown:
        raise InputError(f"unknown check(s): {', '.join(unknown)}", key="--check", fix="see `aipc-env doctor --list-checks`")
    return [s for s in specs if s.id in wanted]


def _run_one(spec: CheckSpec, ctx: CheckContext) -> Finding:
    try:
        verdict = spec.fn(ctx)
        status = verdict.status
        if status in (Status.WARN, Status.FAIL) and not verdict.fix:  # invariant: a problem carries a fix
            raise AssertionError(f"check {spec.id} reported {status.value} without a fix")
        return Finding(
            id=spec.id,
            category=spec.category,
            title=spec.title,
            status=status,
            seen=verdict.seen,
            why=verdict.why,
            fix=verdict.fix,
            details=list(verdict.details),
        )
    except Exception as exc:  # noqa: BLE001 - one broken check must not stop the others
        return Finding(
            id=spec.id,
            category=spec.category,
            title=spec.title,
            status=Status.CRASH,
            seen=f"the check itself failed: {type(exc).__name__}: {exc}",
            why="this is a bug in aipc-env",
            fix="report it with `aipc-env doctor --json` output",
            details=traceback.format_exc().splitlines(),
        )


def run_checks(
    facts: Facts,
    matrix: Matrix,
    names: Iterable[str] | None = None,
    *,
    locks: Iterable[tuple[str, str]] = (),
    lock_for: Callable[[str, Platform], Pylock | None] | None = None,
    conda_python_for: Callable[[str, Platform], str | None] | None = None,
) -> DoctorReport:
    start = time.perf_counter()
    ctx = CheckContext(facts=facts, matrix=matrix, locks=frozenset(locks), lock_for=lock_for, conda_python_for=conda_python_for)
    findings = [_run_one(spec, ctx) for spec in select_checks(names)]
    summary = Summary()
    for f in findings:
        setattr(summary, f.status.value, getattr(summary, f.status.value) + 1)
    return DoctorReport(
        facts=facts,
        resolution=ctx.resolution,
        findings=findings,
        summary=summary,
        bottom_line=bottom_line(findings, has_intel_gpu=ctx.facts.has_intel_gpu),
        seconds=round(time.perf_counter() - start, 4),
    )


def bottom_line(findings: list[Finding], *, has_intel_gpu: bool) -> str:
    """The doctor's verdict in one sentence (pure)."""
    problems = [f for f in findings if f.status in (Status.FAIL, Status.CRASH)]
    warnings = [f for f in findings if f.status == Status.WARN]
    if not has_intel_gpu:
        return (
            "No Intel GPU here: this machine runs the built-in default on the CPU (`aipc-env train`, or `nox -s "
            "train`); fine-tuning Qwen-Image-Edit needs an Intel Core Ultra or Arc GPU."
        )
    if problems:
        first = problems[0]
        return f"Not ready to train: {len(problems)} problem(s); first {first.title.lower()}: {first.seen}" + (
            f" (fix: {first.fix})" if first.fix else ""
        )
    if warnings:
        return f"Ready to train, with {len(warnings)} warning(s) below."
    return "Ready to train."
