"""Write a plan's launcher and run it, passing the exit code through and forwarding stop signals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import TextIO

from aipc_env.launch.plan import LaunchPlan
from aipc_env.launch.scripts import write_launcher

__all__ = ["launcher_argv", "run_launcher", "write_and_run"]


def launcher_argv(script: Path) -> list[str]:
    """How to start a launcher, from its own folder (the cwd): for a .bat only its fixed name is on cmd's command
    line, so a folder holding `&`, `%` or `^` is never parsed by cmd."""
    if script.suffix == ".bat":
        comspec = os.environ.get("COMSPEC", "cmd.exe")
        return [comspec, "/d", "/c", script.name]
    return ["/bin/sh", str(script)]


def run_launcher(script: Path, stdout: TextIO | None = None) -> int:
    """Run the launcher in the foreground; SIGTERM to us is passed on; the launcher's exit code is returned."""
    proc = subprocess.Popen(launcher_argv(script), cwd=script.parent, stdout=stdout)

    def _pass_on(signum: int, _frame: object) -> None:
        try:
            proc.send_signal(signum)
        except OSError:
            pass

    previous = signal.signal(signal.SIGTERM, _pass_on)
    try:
        while True:
            try:
                return proc.wait()
            except KeyboardInterrupt:  # the terminal sent SIGINT to the whole group; wait for the runner to stop
                continue
    finally:
        signal.signal(signal.SIGTERM, previous)


def write_and_run(plan: LaunchPlan, *, dry_run: bool = False, stdout: TextIO | None = None) -> tuple[Path, int]:
    script = write_launcher(plan)
    if dry_run:
        return script, 0
    sys.stdout.flush()
    return script, run_launcher(script, stdout=stdout)
