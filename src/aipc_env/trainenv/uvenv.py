"""The one way aipc-env builds an env of its own with uv: a venv on this Python, a requirements file installed into
it, and a stamp holding the digest of every input, written last. A prefix whose stamp matches is reused as it is; a
build interrupted anywhere leaves no stamp, so the next run builds again. Used by the installed tool's own training
env (tool_env) and the qflux env (qflux_env)."""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from aipc_env.errors import AipcError, ExitCode
from aipc_env.trainenv.envs import env_python

__all__ = ["StampedVenv", "build_stamped_venv", "digest_of", "stamp_matches"]


@dataclass(frozen=True)
class StampedVenv:
    """What to build: `label` names it in progress lines and errors ("training env", "qflux env")."""

    label: str
    prefix: Path
    stamp: str
    """The stamp's file name inside the prefix."""
    digest: str
    requirements_name: str
    requirements: str
    """The requirements file's text, written into the prefix as `requirements_name`."""
    install_args: tuple[str, ...]
    """Arguments after `uv pip install --python PY -r FILE`: constraints, where torch comes from."""
    describe: str
    """What the progress line says is being installed ("12 requirements")."""
    cost: str
    """What it costs the first time, said beside it."""
    echo: bool = False
    """Whether uv's own progress reaches the terminal (it is always in build.log)."""


def digest_of(parts: Iterable[str]) -> str:
    """The digest of a build's inputs; this Python's version is always one of them."""
    return hashlib.sha256("\n".join([*parts, sys.version]).encode()).hexdigest()


def stamp_matches(prefix: Path, stamp: str, digest: str) -> bool:
    """Whether the env at `prefix` was built, to the end, from inputs of this digest."""
    path = prefix / stamp
    try:
        return env_python(prefix).is_file() and path.is_file() and path.read_text(encoding="utf-8").strip() == digest
    except (OSError, UnicodeDecodeError):  # a stamp that cannot be read is no stamp: build again
        return False


def build_stamped_venv(spec: StampedVenv, log: Callable[[str], None] = print) -> Path:
    """Build (or repair) the env unless its stamp matches; returns its interpreter. Progress lines go to `log`,
    the installer's output to <prefix>/build.log."""
    from aipc_env.core.fileio import atomic_write_text
    from aipc_env.core.heartbeat import Heartbeat, last_line
    from aipc_env.core.procs import run_logged
    from aipc_env.lock.tools import find_uv
    from aipc_env.trainenv.torch_source import torch_source_fix, uv_environment

    python = env_python(spec.prefix)
    if stamp_matches(spec.prefix, spec.stamp, spec.digest):
        return python
    spec.prefix.mkdir(parents=True, exist_ok=True)
    (spec.prefix / spec.stamp).unlink(missing_ok=True)  # a build interrupted from here on is redone by the next run
    req = spec.prefix / spec.requirements_name
    atomic_write_text(req, spec.requirements)
    logfile = spec.prefix / "build.log"
    log(f"{spec.label}: installing {spec.describe} with uv ({spec.cost}; also logged to {logfile})")
    uv, fix = find_uv(), torch_source_fix(logfile)
    beat = Heartbeat(log, f"{spec.label}: uv still installing {spec.describe}", left=last_line(logfile))
    try:
        beat.start()
        run_logged(
            [uv, "venv", "--allow-existing", "-q", "-p", sys.executable, str(spec.prefix)],
            logfile,
            echo=False,
            fix=fix,
            env=uv_environment(),
            beat=beat,
        )
        run_logged(
            [uv, "pip", "install", "--python", str(python), "-r", str(req), *spec.install_args],
            logfile,
            echo=spec.echo,
            fix=fix,
            env=uv_environment(),
            beat=beat,
        )
    except AipcError as exc:
        raise AipcError(
            f"the {spec.label} could not be built: {exc.message}",
            path=spec.prefix,
            exit_code=ExitCode.PROBLEMS,
            fix=exc.fix,
        ) from None
    finally:
        beat.stop()
    atomic_write_text(spec.prefix / spec.stamp, spec.digest)
    log(f"{spec.label}: ready ({python})")
    return python
