"""Progress of the cache and fit phases: a rich bar with rate and ETA when the run is attached to a terminal
(the runner sets AIPC_CONSOLE=1 then, and keeps the bar's redraws out of the log), plain lines with rate and ETA
otherwise."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable

__all__ = ["PhaseProgress", "console_attached"]


def console_attached() -> bool:
    return os.environ.get("AIPC_CONSOLE") == "1"


def _eta(seconds: float) -> str:
    seconds = max(0, round(seconds))
    return f"{seconds // 60}:{seconds % 60:02d}" if seconds >= 60 else f"{seconds} s"


class PhaseProgress:
    """`with PhaseProgress("cache", total, unit="samples") as p: p.advance(line)`; `line` is the plain log line
    of the item (printed above the bar on a terminal, as is in a log)."""

    def __init__(self, label: str, total: int, *, unit: str, done: int = 0, log: Callable[[str], None] = print):
        self.label, self.total, self.unit, self.done, self.log = label, total, unit, done, log
        self.start = time.perf_counter()
        self.first = done
        self._rich = None
        if console_attached() and total > 0:
            try:
                from rich.console import Console
                from rich.progress import (
                    BarColumn,
                    MofNCompleteColumn,
                    Progress,
                    TextColumn,
                    TimeElapsedColumn,
                    TimeRemainingColumn,
                )
            except ImportError:  # rich is optional inside a training env
                return
            console = Console(file=sys.stdout, force_terminal=True, highlight=False, soft_wrap=True)
            self._rich = Progress(
                TextColumn(f"[bold]{label}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[rate]}"),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                console=console,
                transient=False,
            )
            self._task = self._rich.add_task(label, total=total, completed=done, rate="")

    def __enter__(self) -> PhaseProgress:  # noqa: PYI034 - typing_extensions.Self is not in every training env
        if self._rich is not None:
            self._rich.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._rich is not None:
            self._rich.stop()

    def rate(self) -> float:
        elapsed = time.perf_counter() - self.start
        return (self.done - self.first) / elapsed if elapsed > 0 else 0.0

    def advance(self, line: str = "", n: int = 1, *, quiet: bool = False) -> None:
        """One more item done; `line` describes it. quiet: count it without a line (e.g. already cached)."""
        self.done += n
        if quiet:
            self.first += n  # not work done now: keep it out of the rate
            if self._rich is not None:
                self._rich.update(self._task, completed=self.done)
            return
        rate = self.rate()
        eta = (self.total - self.done) / rate if rate > 0 else 0.0
        stats = f"{rate:.1f} {self.unit}/s, ETA {_eta(eta)}"
        if self._rich is not None:
            if line:
                self._rich.console.print(line, markup=False)
            self._rich.update(self._task, completed=self.done, rate=f"{rate:.1f} {self.unit}/s")
        else:
            self.log(
                f"{line}  [{self.done}/{self.total}, {stats}]" if line else f"{self.label}: {self.done}/{self.total}, {stats}"
            )

    def note(self, line: str) -> None:
        """A line that is not an item (a checkpoint written): above the bar on a terminal, as is in a log."""
        if self._rich is not None:
            self._rich.console.print(line, markup=False)
        else:
            self.log(line)
