"""The one way aipc-env runs a probe command: argv only, a timeout, the whole process tree stopped."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass

__all__ = ["Completed", "ProbeFailed", "run_capture", "which"]


@dataclass(frozen=True)
class Completed:
    returncode: int
    stdout: str
    stderr: str


class ProbeFailed(Exception):
    """A probe command could not run, timed out, or failed; the message says which."""


def which(name: str, path: str | None = None) -> str | None:
    return shutil.which(name, path=path)


def run_capture(argv: list[str], *, timeout: float = 20.0, env: dict[str, str] | None = None,
                check: bool = True) -> Completed:
    """Run argv (never through a shell); raise ProbeFailed on a missing program, timeout or non-zero exit."""
    kwargs: dict = {}
    if sys.platform == "win32":
        kwargs["creationflags"] = subprocess.CREATE_NEW_PROCESS_GROUP | getattr(subprocess, "CREATE_NO_WINDOW", 0)
    else:
        kwargs["start_new_session"] = True
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                env=env, **kwargs)
    except FileNotFoundError:
        raise ProbeFailed(f"{argv[0]}: not found") from None
    except OSError as exc:
        raise ProbeFailed(f"{argv[0]}: cannot start ({exc.strerror})") from None
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_tree(proc)
        proc.communicate()
        raise ProbeFailed(f"{os.path.basename(argv[0])} did not answer within {timeout:g} s") from None
    result = Completed(proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))
    if check and proc.returncode != 0:
        tail = (result.stderr.strip() or result.stdout.strip()).splitlines()[-1:] or [""]
        raise ProbeFailed(f"{os.path.basename(argv[0])} exited with {proc.returncode}: {tail[0][:200]}")
    return result


def _kill_tree(proc: subprocess.Popen) -> None:
    if sys.platform == "win32":
        subprocess.run(["taskkill", "/F", "/T", "/PID", str(proc.pid)], capture_output=True, check=False)
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
