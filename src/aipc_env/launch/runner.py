"""Runs the phases of a launch plan inside the training env: standard library only (plus aipc_env.core.procs and
core.fileio, which are standard library too).

Started by the generated launcher (`python -m aipc_env.launch.runner <run dir>/launch.json`). Applies the plan's
environment, runs each phase as an argv (never through a shell), tees its output to the console and the log,
stops at the first failing phase and exits with that phase's exit code. SIGINT/SIGTERM (Ctrl-C / Ctrl-Break on
Windows) stop the running phase's process group in three stages (aipc_env.core.procs.stop_tree), so no training
process outlives the launcher; the runner then exits with 128 + the signal number (130 for Ctrl-C).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from typing import IO, Any

from aipc_env.core import procs
from aipc_env.core.fileio import loads_json
from aipc_env.core.heartbeat import HEARTBEAT_SECONDS, Heartbeat
from aipc_env.errors import ExitCode

PLAN_SCHEMA_VERSION = 1


class _Current:
    proc: subprocess.Popen[bytes] | None = None
    stopping: int | None = None


def _stamp() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")


def _on_signal(signum: int, _frame: object) -> None:
    first = _Current.stopping is None
    _Current.stopping = signum
    proc = _Current.proc
    if not first or proc is None or proc.poll() is not None:
        return
    threading.Thread(target=procs.stop_tree, args=(proc,), kwargs={"first": signum}, daemon=True).start()


def _child_env(plan: dict[str, Any]) -> dict[str, str]:
    env = dict(os.environ)
    for key, value in plan.get("env", {}).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    env["AIPC_LOG_FILE"] = os.path.abspath(plan["log_file"])
    if _console():  # phases draw progress bars; the log gets only their final state (see _LogLines)
        env["AIPC_CONSOLE"] = "1"
    else:
        env.pop("AIPC_CONSOLE", None)
    return env


def _console() -> bool:
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


class _LogLines:
    """What goes into the log when phases draw on a terminal: whole lines, without ANSI escapes, and of a line
    redrawn with carriage returns only its last state."""

    _ESC = re.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")

    def __init__(self, log: IO[bytes]) -> None:
        self.log = log
        self.pending = b""

    def write(self, chunk: bytes) -> None:
        self.pending += chunk
        *lines, self.pending = self.pending.split(b"\n")
        for line in lines:
            self.log.write(self._clean(line) + b"\n")

    def close(self) -> None:
        if self.pending:
            self.log.write(self._clean(self.pending) + b"\n")
            self.pending = b""
        self.log.flush()

    def _clean(self, line: bytes) -> bytes:
        line = self._ESC.sub(b"", line)
        return line.rsplit(b"\r", 1)[-1] if b"\r" in line.rstrip(b"\r") else line.rstrip(b"\r")


def _say_running(line: str) -> None:
    if _Current.stopping is None:
        sys.stdout.write(f"{line}\n")
        sys.stdout.flush()


def run_phase(phase: dict[str, Any], env: dict[str, str], log: IO[bytes]) -> int:
    argv = phase["argv"]
    header = f"[aipc-env {_stamp()}] phase {phase['name']}: {procs.command_line(argv)}\n"
    sys.stdout.write(header)
    sys.stdout.flush()
    log.write(header.encode("utf-8"))
    log.flush()
    try:
        proc = procs.start(argv, cwd=phase.get("cwd") or None, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    except OSError as exc:
        msg = f"[aipc-env] cannot start {argv[0]}: {exc}\n"
        sys.stderr.write(msg)
        log.write(msg.encode("utf-8"))
        return ExitCode.CANNOT_START
    _Current.proc = proc
    out = sys.stdout.buffer
    sink = _LogLines(log) if env.get("AIPC_CONSOLE") == "1" else log
    gate = TracebackGate(sink, lambda: _Current.stopping is not None)
    pipe = proc.stdout
    assert pipe is not None and hasattr(pipe, "read1")  # Popen(stdout=PIPE): a buffered reader
    # a phase silent for longer than its own heartbeat would be (a launcher importing torch before the worker runs,
    # a trainer of another project) still shows a line in time
    beat = Heartbeat(_say_running, f"[aipc-env] phase {phase['name']}: still running", HEARTBEAT_SECONDS + 2)
    with beat:
        for chunk in iter(lambda: pipe.read1(65536), b""):
            beat.touch()
            if _Current.stopping is None:  # once stopping, what the phase prints on its way out goes to the log only
                out.write(chunk)
                out.flush()
            gate.write(chunk)
            log.flush()
    gate.close()
    if isinstance(sink, _LogLines):
        sink.close()
    rc = proc.wait()
    _Current.proc = None
    footer = f"[aipc-env {_stamp()}] phase {phase['name']} exited with {rc}\n"
    log.write(footer.encode("utf-8"))
    return rc


def stop_line(signum: int, phase: str, log_path: str, resume: str | None) -> str:
    """The one line a stopped run gets, on the console and in the log."""
    if signum == signal.SIGINT:
        head = f"[aipc-env] stopped by you (Ctrl-C) during phase {phase}"
    else:
        head = f"[aipc-env] stopped (signal {signum}) during phase {phase}"
    return head + (f"; resume with: {resume}" if resume else "") + f"; log {log_path}\n"


_TRACEBACK_HEAD = b"Traceback (most recent call last):"
_CHAINED = (b"During handling of the above exception", b"The above exception was the direct cause")
_FRAME = re.compile(rb'File ".*", line \d+')
_STOP_EXCEPTIONS = (b"KeyboardInterrupt", b"^C")


class TracebackGate:
    """Between a phase's output and the log: a Python traceback is held from its head line to its exception line
    (the first line after it that is not indented), then written, unless the run is stopping by then; a stop's
    tracebacks (the KeyboardInterrupt in every process of the group, accelerate's CalledProcessError) never reach
    the log. The exception line comes after the signal that caused it, so `stopping` has turned by then."""

    def __init__(self, sink: Any, stopping: Any) -> None:
        self._sink, self._stopping = sink, stopping
        self._partial = b""
        self._held: list[bytes] | None = None
        self._frame = False

    def write(self, chunk: bytes) -> None:
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()
        for line in lines:
            self._line(line + b"\n")
        if len(self._partial) > 65536 and self._held is None:  # a bar redrawn with \r and no newline: not held
            self._sink.write(self._partial)
            self._partial = b""

    def _line(self, line: bytes) -> None:
        bare = line.strip()
        if self._held is None and self._stopping():  # stray pieces of tracebacks two processes interleaved
            if (
                _TRACEBACK_HEAD in bare
                or _FRAME.search(bare)
                or bare.endswith(_STOP_EXCEPTIONS)
                or (self._frame and line[:1] in (b" ", b"\t"))
            ):
                self._frame = not bare.endswith(_STOP_EXCEPTIONS)
                return
            self._frame = False
        if bare.startswith(_TRACEBACK_HEAD) or bare.startswith(_CHAINED):
            self._held = (self._held or []) + [line]
        elif self._held is not None:
            self._held.append(line)
            if bare and line[:1] not in (b" ", b"\t") and not bare.startswith(b"^"):  # the exception line
                self._release()
        else:
            self._sink.write(line)

    def _release(self) -> None:
        held, self._held = self._held or [], None
        if not self._stopping():
            self._sink.write(b"".join(held))

    def close(self) -> None:
        if self._partial:
            self._line(self._partial)
            self._partial = b""
        if self._held is not None:
            self._release()


def without_tracebacks(text: str) -> str:
    """`text` as a stopping run's log gets it: less its Python tracebacks (TracebackGate)."""
    out = bytearray()

    class _Sink:
        def write(self, data: bytes) -> None:
            out.extend(data)

    gate = TracebackGate(_Sink(), lambda: True)
    gate.write(text.encode("utf-8"))
    gate.close()
    return out.decode("utf-8")


def start_background(plan: dict[str, Any], env: dict[str, str], log: IO[bytes]) -> list[subprocess.Popen[bytes]]:
    started: list[subprocess.Popen[bytes]] = []
    for phase in plan.get("background", []):
        line = f"[aipc-env {_stamp()}] background {phase['name']}: {procs.command_line(phase['argv'])}\n"
        log.write(line.encode("utf-8"))
        log.flush()
        try:
            started.append(procs.start(phase["argv"], cwd=phase.get("cwd") or None, env=env, stdout=log, stderr=log))
        except OSError as exc:
            log.write(f"[aipc-env] cannot start {phase['name']}: {exc}\n".encode())
    return started


def stop_background(started: list[subprocess.Popen[bytes]]) -> None:
    """Background phases are asked to stop with SIGTERM (Ctrl-Break on Windows) and then escalated."""
    for proc in started:
        procs.stop_tree(proc, first=signal.SIGTERM if os.name != "nt" else signal.SIGINT)


def _read_plan(path: str) -> dict[str, Any] | str:
    try:
        with open(path, encoding="utf-8") as fh:
            plan = loads_json(fh.read())
    except (OSError, ValueError) as exc:
        return f"cannot read the launch plan {path}: {exc}"
    if not isinstance(plan, dict):
        return f"{path}: a launch plan is a JSON object; write the run again with the matching aipc-env"
    version = plan.get("schema_version", plan.get("plan_version"))
    if version != PLAN_SCHEMA_VERSION:
        return (
            f"{path}: launch plan schema_version {version!r} is not supported by this runner "
            f"({PLAN_SCHEMA_VERSION}); write the run again with the matching aipc-env"
        )
    return plan


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        sys.stderr.write("usage: python -m aipc_env.launch.runner PLAN.json\n")
        return ExitCode.USAGE
    plan = _read_plan(argv[0])
    if isinstance(plan, str):
        sys.stderr.write(f"aipc-env: error: {plan}\n")
        return ExitCode.USAGE
    for sig in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGBREAK", None)):
        if sig is not None:
            signal.signal(sig, _on_signal)
    env = _child_env(plan)
    log_path = plan["log_file"]
    os.makedirs(os.path.dirname(os.path.abspath(log_path)), exist_ok=True)
    with open(log_path, "ab") as log:
        for warning in plan.get("warnings", []):
            line = f"[aipc-env] warning: {warning}\n"
            sys.stderr.write(line)
            log.write(line.encode("utf-8"))
        background = start_background(plan, env, log)
        try:
            for phase in plan["phases"]:
                rc = run_phase(phase, env, log)
                if _Current.stopping is not None:
                    code = 128 + int(_Current.stopping)
                    msg = stop_line(int(_Current.stopping), phase["name"], log_path, plan.get("resume"))
                    sys.stderr.write(msg)
                    log.write(msg.encode("utf-8"))
                    return code
                if rc != ExitCode.OK:
                    msg = f"[aipc-env] phase {phase['name']} failed (exit code {rc}); later phases were not run; log {log_path}\n"
                    sys.stderr.write(msg)
                    log.write(msg.encode("utf-8"))
                    return rc
        finally:
            stop_background(background)
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
