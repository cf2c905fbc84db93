"""Shared test fixtures: isolated state dirs, the matrix, recorded facts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures"
MACHINES = FIXTURES / "machines"
OUTPUTS = FIXTURES / "outputs"


@pytest.fixture(autouse=True)
def _isolated_state(tmp_path_factory, monkeypatch):
    """No test reads or writes the real per-user state or cache."""
    base = tmp_path_factory.mktemp("state")
    monkeypatch.setenv("AIPC_ENV_STATE_DIR", str(base / "state"))
    monkeypatch.setenv("AIPC_ENV_CACHE_DIR", str(base / "cache"))


@pytest.fixture(scope="session")
def matrix():
    from aipc_env.matrix import load_matrix

    return load_matrix()


def run_cli(*args: str, env: dict | None = None, cwd: Path | None = None, timeout: float = 120,
            input: str | None = None) -> subprocess.CompletedProcess:
    """Run `python -m aipc_env ...` in a real subprocess, the way users run it."""
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    return subprocess.run([sys.executable, "-m", "aipc_env", *args], capture_output=True, text=True,
                          env=full_env, cwd=cwd or ROOT, timeout=timeout, input=input)


def require_tool(reason: str | None) -> None:
    """Skip a test whose tool is missing, with the reason; under CI=true a missing tool is a failure."""
    if reason is None:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true and a tool this test needs is missing: {reason}")
    pytest.skip(reason)
