"""Start a written launcher the way users would, passing its exit code through (aipc_env.core.procs does the running)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TextIO

from aipc_env.core.procs import run_foreground

__all__ = ["launcher_argv", "run_launcher"]


def launcher_argv(script: Path) -> list[str]:
    """How to start a launcher, from its own folder (the cwd): for a .bat only its fixed name is on cmd's command
    line, so a folder holding `&`, `%` or `^` is never parsed by cmd."""
    if script.suffix == ".bat":
        comspec = os.environ.get("COMSPEC", "cmd.exe")
        return [comspec, "/d", "/c", script.name]
    return ["/bin/sh", str(script)]


def run_launcher(script: Path, stdout: TextIO | None = None) -> int:
    """Run the launcher in the foreground from its folder; its exit code is returned."""
    sys.stdout.flush()
    return run_foreground(launcher_argv(script), cwd=script.parent, stdout=stdout)
