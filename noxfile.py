"""User entry points. Every session is a thin call of `python -m aipc_env ...`; the logic lives in src/aipc_env.

    nox -s doctor [-- --json ...]     check this machine (fast: no torch import)
    nox -s train [-- config.yaml]     train (no config: the built-in tiny default, no download)
    nox -s verify                      prove NF4, Adam8bit and LoRA round-trips work on this device
    nox -s lock / nox -s env           lockfiles per pair; build the training env from one
    nox -s tests                       the test suite
"""

from __future__ import annotations

import nox

nox.options.reuse_venv = "yes"
nox.options.sessions = ["doctor"]

CONSTRAINTS = ("-c", "environments/constraints-dev.txt")
"""Exact dev pins; torch==2.13.0 keeps pip from pulling a multi-GB CUDA build."""


def _aipc(session: nox.Session, *args: str) -> None:
    session.run("python", "-m", "aipc_env", *args, *session.posargs)


@nox.session
def doctor(session: nox.Session) -> None:
    """Check this machine against every runbook item; a fix for every problem."""
    session.install("-e", ".")
    _aipc(session, "doctor")


@nox.session
def resolve(session: nox.Session) -> None:
    """Which torch+xpu / oneAPI pair a `pip list` shows: nox -s resolve -- --pip-list FILE."""
    session.install("-e", ".")
    _aipc(session, "resolve")


@nox.session
def lock(session: nox.Session) -> None:
    """(Admin, connected machine) resolve pairs into lockfiles/: nox -s lock [-- --pair ID ...] [--pip-only]."""
    session.install("-e", ".[lock]")
    _aipc(session, "lock")


@nox.session
def env(session: nox.Session) -> None:
    """Build or repair the training env from its lock: nox -s env [-- --pair ID --prefix PATH --check --unlocked]."""
    session.install("-e", ".[lock]")
    _aipc(session, "env")


@nox.session(name="patch-requirements")
def patch_requirements(session: nox.Session) -> None:
    """Make a qwen-image-finetune requirements.txt installable on XPU: nox -s patch-requirements -- PATH."""
    session.install("-e", ".")
    _aipc(session, "patch-requirements")


@nox.session
def verify(session: nox.Session) -> None:
    """NF4 quantize/matmul, Adam8bit and LoRA round-trips on this device (the training env's stack)."""
    session.install("-e", ".[train]", *CONSTRAINTS)
    _aipc(session, "verify")


@nox.session
def train(session: nox.Session) -> None:
    """Validate a config, write its launcher, run cache then fit. No config: the built-in tiny default."""
    session.install("-e", ".[train]", *CONSTRAINTS)
    _aipc(session, "train")


@nox.session
def tests(session: nox.Session) -> None:
    """The test suite (CPU; Wine tests run where wine is installed)."""
    session.install("-e", ".[train,lock,dev]", *CONSTRAINTS)
    session.run("python", "-m", "pytest", *session.posargs)
