"""Verify results as models (parsed from the worker's JSON) and their table."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel
from rich.console import Console
from rich.table import Table
from rich.text import Text

from aipc_env.core.formats import VersionedModel
from aipc_env.core.terminal import visible

__all__ = ["StepResult", "VerifyReport", "render_verify"]


class StepResult(BaseModel):
    id: str
    title: str
    passed: bool
    summary: str
    seconds: float
    metrics: dict[str, Any] = {}
    hint: str | None = None
    traceback: str | None = None


class VerifyReport(VersionedModel):
    """`aipc-env verify --json`: every step of the verification, with its metrics."""

    FORMAT: ClassVar[str] = "verify report"
    schema_version: Literal[1] = 1
    device: str
    pair: str | None = None
    env_prefix: str
    import_seconds: float
    work_seconds: float
    dtypes: list[str]
    bf16_slowdown: float | None = None
    inject: list[str] = []
    steps: list[StepResult]
    passed: bool

    @property
    def summary(self) -> str:
        good = sum(s.passed for s in self.steps)
        failed = [s.id for s in self.steps if not s.passed]
        return f"{good}/{len(self.steps)} steps passed" + (f" (failed: {', '.join(failed)})" if failed else "")


def render_verify(console: Console, report: VerifyReport, verbose: bool = False) -> None:
    table = Table(
        "step",
        "result",
        "time",
        title=visible(f"aipc-env verify on {report.device}" + (f" ({report.pair})" if report.pair else "")),
    )
    for s in report.steps:
        table.add_row(
            visible(s.title),
            Text(visible(("PASS  " if s.passed else "FAIL  ") + s.summary), style="" if s.passed else "red"),
            f"{s.seconds:.2f} s",
        )
    console.print(table)
    if verbose:
        for s in report.steps:
            console.print(Text(visible(f"{s.id}: {s.metrics}"), style="dim"))
            if s.traceback:
                console.print(Text(visible(s.traceback), style="dim"))
    verdict = "All steps passed" if report.passed else "Verification FAILED"
    console.print(
        Text(
            f"{verdict}: {report.summary}; work {report.work_seconds:.1f} s "
            f"(+{report.import_seconds:.1f} s imports). dtypes: {', '.join(report.dtypes)}",
            style="green" if report.passed else "bold red",
        )
    )
