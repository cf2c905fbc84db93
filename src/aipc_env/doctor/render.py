"""Rendering of doctor findings for people: marks, colours and verbosity live here and nowhere else. Every value
enters rich's Text through `visible` (rich would drop a BEL or a carriage return silently; escaped, a person sees
it); the styles are the tool's own, printed by the one console (core.terminal.console)."""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

from aipc_env.core.terminal import visible
from aipc_env.doctor import DoctorReport
from aipc_env.doctor.checks import Finding, Status

__all__ = ["MARKS", "render_report"]

MARKS = {Status.OK: "✓", Status.WARN: "!", Status.FAIL: "✗", Status.SKIP: "-", Status.CRASH: "☠"}
ASCII_MARKS = {Status.OK: "+", Status.WARN: "!", Status.FAIL: "x", Status.SKIP: "-", Status.CRASH: "X"}
STYLES = {Status.OK: "green", Status.WARN: "yellow", Status.FAIL: "bold red", Status.SKIP: "dim", Status.CRASH: "bold magenta"}


def _marks(console: Console) -> dict[Status, str]:
    encoding = (getattr(console.file, "encoding", None) or "utf-8").lower()
    return MARKS if "utf" in encoding else ASCII_MARKS


def _finding(console: Console, f: Finding, verbose: bool, marks: dict[Status, str]) -> None:
    line = Text("  ")
    line.append(f"[{marks[f.status]}] ", style=STYLES[f.status])
    line.append(visible(f.title), style="bold" if f.status in (Status.FAIL, Status.CRASH) else "")
    line.append(visible(f"  {f.seen}"), style="dim" if f.status == Status.SKIP else "")
    console.print(line)
    if f.status in (Status.WARN, Status.FAIL, Status.CRASH):
        if f.why:
            console.print(Text(visible(f"      why: {f.why}")))
        if f.fix:
            console.print(Text(visible(f"      fix: {f.fix}"), style="cyan"))
    show_details = verbose or (f.status in (Status.WARN, Status.FAIL) and f.details)
    if (show_details and f.status != Status.CRASH) or (verbose and f.status == Status.CRASH):
        for d in f.details:
            console.print(Text(visible(f"      • {d}"), style="dim"))


def render_report(report: DoctorReport, console: Console, *, verbose: bool = False) -> None:
    facts = report.facts
    marks = _marks(console)
    env = facts.training_env
    head = Text("aipc-env doctor", style="bold")
    head.append(visible(f"  {facts.os.pretty_name or facts.os.system}" + (f" · env {env.prefix}" if env else "")), style="dim")
    console.print(head)
    if report.bottom_line:
        console.print(Text(visible(report.bottom_line), style="bold"))
    category = None
    for f in report.findings:
        if f.category != category:
            category = f.category
            console.print(Text(visible(category), style="bold underline"))
        _finding(console, f, verbose, marks)
    s = report.summary
    counts = f"{s.fail} failed, {s.warn} warnings, {s.ok} ok, {s.skip} skipped" + (f", {s.crash} crashed" if s.crash else "")
    if s.problems:
        cats = len({f.category for f in report.findings if f.status in (Status.FAIL, Status.CRASH)})
        console.print(Text(f"Doctor found problems in {cats} categor{'y' if cats == 1 else 'ies'}: {counts}.", style="bold red"))
    elif s.warn:
        console.print(Text(f"No blocking problems; {counts}.", style="yellow"))
    else:
        console.print(Text(f"No issues found: {counts}.", style="green"))
