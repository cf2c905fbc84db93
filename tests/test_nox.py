"""The nox sessions as users run them (real nox, real uv, a throwaway --envdir): a session ends with aipc-env's own
exit code, and a torch source that cannot be reached is a failure that names both ways around it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from aipc_env.errors import ExitCode
from tests.conftest import ROOT, find_tool, require_tool
from tests.support.isolation import isolated_env


def _nox(tmp_path, *args: str, env: dict[str, str] | None = None, timeout: float = 900):
    try:
        import nox  # noqa: F401
    except ImportError:
        require_tool("nox is not installed (the dev extra has it)")
    require_tool(None if find_tool("uv") else "uv is not on PATH")
    full = isolated_env(tmp_path, drop=("VIRTUAL_ENV", "NOX"), **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "--envdir", str(tmp_path / "nox"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full,
    )


@pytest.mark.slow
def test_sessions_end_with_aipc_envs_exit_code(tmp_path):
    bad = _nox(tmp_path, "-s", "resolve", "--", "--pip-list", str(tmp_path / "no such list.txt"))
    assert bad.returncode == ExitCode.USAGE, bad.stderr[-3000:]
    assert "no such list.txt" in bad.stderr and "Traceback" not in bad.stderr
    doctor = _nox(tmp_path, "-s", "doctor", "--", "--json")  # the session's first run: its env is installed now
    assert doctor.returncode in (ExitCode.OK, ExitCode.PROBLEMS), doctor.stderr[-3000:]
    report = json.loads(doctor.stdout)  # one JSON document: the installer's output went to stderr
    assert report["findings"] and "Resolved" in doctor.stderr
    has_fail = '"status": "fail"' in doctor.stdout or '"status": "crash"' in doctor.stdout
    assert doctor.returncode == (ExitCode.PROBLEMS if has_fail else ExitCode.OK)
    # problems found are the doctor's answer: exit 1 without nox's red "Command ... failed" (the env is installed now)
    found = _nox(tmp_path, "-s", "doctor", "--", "--facts", str(ROOT / "tests/fixtures/machines/win11_16gb.json"))
    assert found.returncode == ExitCode.PROBLEMS, found.stderr[-3000:]
    assert "Doctor found problems" in found.stdout and "problems found (exit code 1)" in found.stderr
    assert "failed with exit code" not in found.stderr and "Session doctor failed" not in found.stderr


@pytest.mark.slow
def test_an_unreachable_torch_index_names_both_variables(tmp_path):
    env = {"AIPC_ENV_TORCH_INDEX": "http://127.0.0.1:9/whl", "UV_HTTP_RETRIES": "0"}
    for var in ("AIPC_ENV_TORCH_WHEELS", "AIPC_ENV_TORCH"):
        env[var] = ""
    result = _nox(tmp_path, "-s", "train", "--", "--torch", "cpu", env=env)
    assert result.returncode == 1
    out = result.stdout + result.stderr
    assert "torch could not be installed" in out
    assert "AIPC_ENV_TORCH_WHEELS" in out and "AIPC_ENV_TORCH_INDEX" in out
