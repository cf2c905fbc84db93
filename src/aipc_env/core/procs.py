"""The one process layer: how aipc-env starts, runs and stops other programs. Standard library only (the launch
runner imports it inside any training env). Only this module and `launch/runner.py` import `subprocess`.

- `start`: argv only (never a shell), in a new process group, so the whole tree can be signalled.
- `stop_tree`: three stages: interrupt (SIGINT / Ctrl-Break), then terminate (SIGTERM / taskkill), then kill
  (SIGKILL / taskkill /F), each after a grace period, and a final sweep of the group.
- `run_capture`: a probe with a timeout; a missing program, a timeout or a failure raises `ProbeFailed`.
- `run_logged`: a build step whose output goes to a log; a failure raises `CommandFailed` naming the log.
- `run_foreground`: a launcher in the foreground; stop signals are passed on; its exit code is returned.
- `run_lines`: a worker to its end, each line of its output handed on; Ctrl-C is passed on and waited for.
"""

from __future__ import annotations

import contextlib
import io
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

from aipc_env.core.heartbeat import Heartbeat, last_line
from aipc_env.errors import AipcError, ExitCode

__all__ = [
    "GRACE_SECONDS",
    "CommandFailed",
    "Completed",
    "ProbeFailed",
    "command_line",
    "pid_alive",
    "run_capture",
    "run_foreground",
    "run_lines",
    "run_logged",
    "signal_group",
    "start",
    "stop_tree",
    "which",
]

IS_WINDOWS = os.name == "nt"
GRACE_SECONDS = 10.0


@dataclass(frozen=True)
class Completed:
    returncode: int
    stdout: str
    stderr: str


class ProbeFailed(Exception):
    """A probe command could not run, timed out, or failed; the message says which."""


class CommandFailed(AipcError):
    """A step aipc-env ran failed: names the command, its exit code and the log that holds its output."""

    exit_code = ExitCode.PROBLEMS

    def __init__(self, argv: list[str], returncode: int, log: Path | None, fix: str | None = None):
        super().__init__(
            f"`{command_line(argv)}` exited with {returncode}",
            path=log,
            fix=fix or ("read the log; nothing after this step was changed" if log else None),
        )
        self.argv = argv
        self.returncode = returncode


def which(name: str, path: str | None = None) -> str | None:
    return shutil.which(name, path=path)


def command_line(argv: list[str]) -> str:
    """How a command reads on this platform (for messages and logs, never for running it)."""
    return subprocess.list2cmdline(argv) if IS_WINDOWS else shlex.join(argv)


def _group_kwargs() -> dict[str, Any]:
    if IS_WINDOWS:
        return {"creationflags": subprocess.CREATE_NEW_PROCESS_GROUP}  # type: ignore[attr-defined]  # Windows-only names (windll, CREATE_NEW_PROCESS_GROUP, CTRL_BREAK_EVENT); this branch runs there
    return {"start_new_session": True}


def start(
    argv: list[str],
    *,
    cwd: str | Path | None = None,
    env: dict[str, str] | None = None,
    stdin: Any = subprocess.DEVNULL,
    stdout: Any = None,
    stderr: Any = None,
    hide_window: bool = False,
) -> subprocess.Popen[bytes]:
    """Start argv in a new process group (never through a shell). OSError when it cannot start."""
    kwargs = _group_kwargs()
    if IS_WINDOWS and hide_window:
        kwargs["creationflags"] |= getattr(subprocess, "CREATE_NO_WINDOW", 0)
    return subprocess.Popen(argv, cwd=cwd, env=env, stdin=stdin, stdout=stdout, stderr=stderr, **kwargs)


def signal_group(proc: subprocess.Popen[Any], signum: int) -> None:
    """Send a signal to the process group of proc (Windows: Ctrl-Break for SIGINT/SIGBREAK, else taskkill)."""
    try:
        if IS_WINDOWS:
            if signum == signal.SIGTERM:
                subprocess.run(["taskkill", "/T", "/PID", str(proc.pid)], capture_output=True, check=False)
            elif signum == getattr(signal, "SIGKILL", 9):
                subprocess.run(["taskkill", "/F", "/T", "/PID", str(proc.pid)], capture_output=True, check=False)
            else:
                proc.send_signal(signal.CTRL_BREAK_EVENT)  # type: ignore[attr-defined]  # Windows-only names (windll, CREATE_NEW_PROCESS_GROUP, CTRL_BREAK_EVENT); this branch runs there
        else:
            os.killpg(proc.pid, signum)
    except (ProcessLookupError, PermissionError, OSError):
        pass


def stop_tree(proc: subprocess.Popen[Any], *, grace: float = GRACE_SECONDS, first: int = signal.SIGINT) -> int | None:
    """Stop proc and its group in three stages (first signal, SIGTERM, SIGKILL), `grace` seconds apart.
    Returns the exit code (None if it could not be reaped)."""
    stages = [first, signal.SIGTERM, getattr(signal, "SIGKILL", 9)]
    for i, signum in enumerate(dict.fromkeys(stages)):
        if proc.poll() is not None:
            break
        signal_group(proc, signum)
        try:
            proc.wait(timeout=grace if i < 2 else max(grace, 5.0))
        except subprocess.TimeoutExpired:
            continue
    if not IS_WINDOWS:  # sweep what is left of the group (grandchildren)
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError, OSError):
            pass
    return proc.poll()


def run_capture(
    argv: list[str],
    *,
    timeout: float = 20.0,
    env: dict[str, str] | None = None,
    cwd: str | Path | None = None,
    check: bool = True,
) -> Completed:
    """Run a probe; raise ProbeFailed on a missing program, a timeout or (check=True) a non-zero exit."""
    try:
        proc = start(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, hide_window=True)
    except FileNotFoundError:
        raise ProbeFailed(f"{argv[0]}: not found") from None
    except OSError as exc:
        raise ProbeFailed(f"{argv[0]}: cannot start ({exc.strerror})") from None
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop_tree(proc, grace=0.5, first=signal.SIGTERM)
        proc.communicate()
        raise ProbeFailed(f"{os.path.basename(argv[0])} did not answer within {timeout:g} s") from None
    result = Completed(proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))
    if check and proc.returncode != 0:
        tail = (result.stderr.strip() or result.stdout.strip()).splitlines()[-1:] or [""]
        raise ProbeFailed(f"{os.path.basename(argv[0])} exited with {proc.returncode}: {tail[0][:200]}")
    return result


def _stderr_line(text: str) -> None:
    sys.stderr.write(f"{text}\n")
    sys.stderr.flush()


def run_logged(
    argv: list[str],
    log: Path,
    *,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    echo: bool = True,
    fix: str | None = None,
    beat: Heartbeat | None = None,
) -> str:
    """Run a step, append its output to the log (and echo it to stderr, with a heartbeat line naming the step and its
    log's last line while it is silent), raise CommandFailed on failure. `beat`: the caller's own heartbeat, told of
    the echoed output, instead of that one."""
    log.parent.mkdir(parents=True, exist_ok=True)
    own = beat is None and echo
    beat = beat or Heartbeat(_stderr_line, f"  ... {Path(argv[0]).stem} still running", left=last_line(log))
    with log.open("a", encoding="utf-8") as fh, beat if own else contextlib.nullcontext():
        fh.write(f"$ {command_line(argv)}\n")
        fh.flush()
        try:
            proc = start(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        except OSError as exc:
            fh.write(f"cannot start: {exc}\n")
            raise CommandFailed(argv, 127, log, fix=fix) from None
        chunks: list[bytes] = []
        assert proc.stdout is not None
        # Popen(stdout=PIPE) without text mode: stdout is a buffered reader, which has read1 (IO[bytes] does not)
        stdout = cast("io.BufferedReader", proc.stdout)
        try:
            for chunk in iter(lambda: stdout.read1(65536), b""):
                chunks.append(chunk)
                text = chunk.decode("utf-8", "replace")
                fh.write(text)
                fh.flush()
                if echo:
                    beat.touch()
                    sys.stderr.write(text)
                    sys.stderr.flush()
            rc = proc.wait()
        except BaseException:
            stop_tree(proc, grace=2.0)
            raise
    if rc != ExitCode.OK:
        raise CommandFailed(argv, rc, log, fix=fix)
    return b"".join(chunks).decode("utf-8", "replace")


def run_foreground(argv: list[str], *, cwd: str | Path, stdout: IO[str] | None = None) -> int:
    """Run a launcher in the foreground and return its exit code. SIGTERM to us is passed on to its group;
    Ctrl-C reaches it from the terminal (or is passed on), and we wait for it to stop."""
    proc = subprocess.Popen(argv, cwd=cwd, stdout=stdout)  # same group: the terminal's Ctrl-C reaches it
    forwarded = threading.Event()

    def _pass_on(signum: int, _frame: object) -> None:
        forwarded.set()
        try:
            proc.send_signal(signum)
        except OSError:
            pass

    previous = signal.signal(signal.SIGTERM, _pass_on) if threading.current_thread() is threading.main_thread() else None
    try:
        while True:
            try:
                return proc.wait()
            except KeyboardInterrupt:  # the terminal sent SIGINT to the whole group; wait for the runner to stop
                time.sleep(0.05)
                continue
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def run_lines(argv: list[str], *, env: dict[str, str], on_line: Callable[[str], object]) -> int:
    """Run a worker to its end and return its exit code: each line of its stdout goes to `on_line`, its stderr
    passes through. Ctrl-C here is passed on to its group (it stops cleanly or says it was interrupted) and waited
    for. OSError when it cannot start."""
    proc = start(argv, env=env, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    lines = iter(proc.stdout.readline, b"")
    while True:
        try:
            for raw in lines:
                on_line(raw.decode("utf-8", "replace").rstrip("\r\n"))
            return proc.wait()
        except KeyboardInterrupt:
            signal_group(proc, signal.SIGINT)


def pid_alive(pid: int) -> bool:
    """Whether a process with this id runs on this machine (a zombie counts as gone)."""
    if pid <= 0:
        return False
    if IS_WINDOWS:
        import ctypes

        handle = ctypes.windll.kernel32.OpenProcess(0x1000, False, pid)  # type: ignore[attr-defined]  # Windows-only names (windll, CREATE_NEW_PROCESS_GROUP, CTRL_BREAK_EVENT); this branch runs there
        if not handle:
            return False
        code = ctypes.c_ulong()
        ok = ctypes.windll.kernel32.GetExitCodeProcess(handle, ctypes.byref(code))  # type: ignore[attr-defined]  # Windows-only names (windll, CREATE_NEW_PROCESS_GROUP, CTRL_BREAK_EVENT); this branch runs there
        ctypes.windll.kernel32.CloseHandle(handle)  # type: ignore[attr-defined]  # Windows-only names (windll, CREATE_NEW_PROCESS_GROUP, CTRL_BREAK_EVENT); this branch runs there
        return bool(ok) and code.value == 259  # STILL_ACTIVE
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return True
