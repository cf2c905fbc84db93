"""A heartbeat: a line at least every few seconds while a long step is silent (issue 54: no silence over 10 s on any
long step a person waits on: imports, model loads, fit steps, the judge, installers). Standard library only: the
training env, the verify worker and the installers all use it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["HEARTBEAT_SECONDS", "Heartbeat", "last_line"]

HEARTBEAT_SECONDS = 5.0
"""A heartbeat's interval: a long step prints a line at least this often. Half the 10 s bound on a silence
(benchmarks/bench_silence.py), so a loaded machine that wakes the thread late still holds it."""


STOP_WAIT_SECONDS = 5.0
"""How long stop() waits for a line being printed (a blocked pipe does not hold the step for longer)."""


class Heartbeat:
    """The one way a long step that cannot report by itself (an import, a model load, a fit step, an installer)
    says it is alive: a line every `every` seconds (HEARTBEAT_SECONDS) of silence naming what it waits on and the
    seconds since that began, and how much is left where `left` (a text, or a function giving one) knows it. Lines
    of the step's own said through `say` (or shown elsewhere: `touch`) restart the count, so a heartbeat only fills
    silences; `waiting` names the next thing waited on. start()/stop() or a `with` block."""

    def __init__(
        self,
        say: Callable[[str], object],
        label: str,
        every: float | None = None,
        *,
        left: str | Callable[[], str | None] | None = None,
    ) -> None:
        self._say, self._label, self._left = say, label, left
        self._every = HEARTBEAT_SECONDS if every is None else every
        self._lock = threading.Lock()
        self._since = self._last = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def say(self, line: str) -> None:
        """A line of the step's own: printed, and the silence counted from it."""
        self.touch()
        self._say(line)

    def touch(self) -> None:
        """The step showed something of its own (written elsewhere): the silence counts from now."""
        with self._lock:
            self._last = time.monotonic()

    def waiting(self, label: str, left: str | Callable[[], str | None] | None = None) -> None:
        """What the step waits on from now (its seconds counted from now), and how much is left (or what tells)."""
        with self._lock:
            self._label, self._since = label, time.monotonic()
            if left is not None:
                self._left = left

    def _run(self) -> None:
        while True:
            with self._lock:
                due = self._last + self._every
            if self._stop.wait(max(0.0, due - time.monotonic())):
                return
            with self._lock:
                now = time.monotonic()
                if now < self._last + self._every:  # the step spoke meanwhile
                    continue
                self._last = now
                label, since, left = self._label, self._since, self._left
            remaining = left() if callable(left) else left
            self._say(f"{label} ({now - since:.0f} s{f'; {remaining}' if remaining else ''})")

    def start(self) -> Heartbeat:
        self._thread.start()
        return self

    def stop(self) -> None:
        """No line after this returns: the thread is told to end and waited for (a line it was printing ends)."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=STOP_WAIT_SECONDS)

    @property
    def running(self) -> bool:
        """Started and not yet stopped (its thread still alive)."""
        return self._thread.is_alive()

    def __enter__(self) -> Heartbeat:  # noqa: PYI034 - typing_extensions.Self is not in every training env
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def last_line(log: Path, limit: int = 100) -> Callable[[], str | None]:
    """A `left` for a heartbeat around an installer: the last line it wrote to its log (what it is doing now)."""

    def read() -> str | None:
        try:
            with log.open("rb") as fh:
                fh.seek(max(0, fh.seek(0, 2) - 4096))
                tail = fh.read().decode("utf-8", "replace")
        except OSError:
            return None
        lines = [line.strip() for line in tail.replace("\r", "\n").splitlines() if line.strip()]
        if not lines:
            return None
        text = "".join(c if c.isprintable() else "?" for c in lines[-1])
        return f"{log.name}: {text[:limit]}"

    return read
