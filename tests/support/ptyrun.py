"""Run a command as a person does: on a real pseudo-terminal of a given size (standard library pty), and read back
every byte it wrote there. Also the same command into a pipe, for comparison. POSIX only."""

from __future__ import annotations

import errno
import fcntl
import os
import select
import struct
import subprocess
import sys
import termios
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Seen:
    code: int
    raw: bytes

    @property
    def text(self) -> str:
        return self.raw.decode("utf-8", "replace").replace("\r\n", "\n")


def cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "COLUMNS", "LINES", "TERM")}
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    env["TERM"] = "xterm-256color"
    env.update(extra)
    return env


def on_pty(
    args: list[str],
    *,
    columns: int = 80,
    env: dict[str, str] | None = None,
    cwd: Path = ROOT,
    timeout: float = 120,
    argv: list[str] | None = None,
) -> Seen:
    """`python -m aipc_env ARGS` (or `argv`) with stdin, stdout and stderr on one pty of `columns` x 40."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    proc = subprocess.Popen(
        argv or [sys.executable, "-m", "aipc_env", *args],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env or cli_env(),
        cwd=cwd,
        start_new_session=True,
    )
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                data = os.read(master, 65536)
            except OSError as exc:  # EIO: the child closed its side
                if exc.errno == errno.EIO:
                    break
                raise
            if not data:
                break
            chunks.append(data)
        else:
            proc.kill()
            raise TimeoutError(f"{args} still running after {timeout} s")
    finally:
        os.close(master)
    return Seen(proc.wait(timeout=30), b"".join(chunks))


def on_pipe(
    args: list[str], *, env: dict[str, str] | None = None, cwd: Path = ROOT, timeout: float = 120, argv: list[str] | None = None
) -> Seen:
    done = subprocess.run(
        argv or [sys.executable, "-m", "aipc_env", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env or cli_env(),
        cwd=cwd,
        timeout=timeout,
    )
    return Seen(done.returncode, done.stdout)
