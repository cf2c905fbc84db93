"""The suite leaves the user's own folders alone: the guard (tests/support/user_folders.py) fails a pytest run that
changed aipc-env's real per-user folders, naming the paths, and the isolation (conftest.py, tests/support/
isolation.py) reaches fixtures wider than a test and subprocesses with an environment of their own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.support.isolation import isolated_env

TINY = """
import os
from pathlib import Path


def test_one():
    target = os.environ.get("WRITE_INTO")
    if target:
        path = Path(os.path.expanduser(target))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("left behind")
"""


def _guarded_run(tmp_path: Path, write_into: str | None, *, workers: int = 0) -> tuple[subprocess.CompletedProcess, Path]:
    """pytest with the guard alone on a generated one-test file, in a fresh HOME with no XDG_* or AIPC_ENV_*
    variable (so the guard's real folders are that HOME's); the test writes `write_into` (~ is that HOME)."""
    folder = tmp_path / "tiny run"
    folder.mkdir()
    (folder / "test_tiny.py").write_text(TINY, encoding="utf-8")
    (folder / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")  # not the project's addopts
    env = isolated_env(
        tmp_path, clean_home=True, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "src")]), WRITE_INTO=write_into
    )
    xdist = ["-n", str(workers), "--dist", "loadfile"] if workers else ["-p", "no:xdist"]
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "tests.support.user_folders",
            *xdist,
            "-p",
            "no:cacheprovider",
            "-q",
            "test_tiny.py",
        ],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return result, tmp_path / "home"


def test_a_run_that_writes_nothing_there_passes(tmp_path):
    result, home = _guarded_run(tmp_path, None)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "1 passed" in result.stdout and "folders changed" not in result.stdout
    assert not (home / ".local").exists()


def test_writing_beside_the_tools_folders_passes(tmp_path):
    """Only aipc-env's own folders are watched: another program's data folder is not the guard's business."""
    result, home = _guarded_run(tmp_path, "~/.local/share/aipc-env-other/x.txt")
    assert result.returncode == 0, result.stdout[-3000:]
    assert (home / ".local" / "share" / "aipc-env-other" / "x.txt").is_file()


@pytest.mark.parametrize(
    "write_into, named",
    [
        ("~/.local/share/aipc-env/runs/recommend-smoke/launch.sh", ".local/share/aipc-env/runs/recommend-smoke/launch.sh"),
        ("~/.local/state/aipc-env/env.json", ".local/state/aipc-env/env.json"),
        ("~/.cache/aipc-env/logs/x.log", ".cache/aipc-env/logs/x.log"),
        ("~/.config/aipc-env/settings.yaml", ".config/aipc-env/settings.yaml"),
    ],
)
def test_a_run_that_writes_into_a_real_folder_fails_naming_the_path(tmp_path, write_into, named):
    result, home = _guarded_run(tmp_path, write_into)
    assert result.returncode == 1, result.stdout[-3000:]
    assert "1 passed" in result.stdout  # the test itself passed: the guard failed the run
    assert "the user's own aipc-env folders changed during the run" in result.stdout
    assert f"{home}/{named} (new)" in result.stdout


def test_a_changed_file_in_an_existing_folder_fails_the_run(tmp_path):
    """A folder the user had before the run: a file rewritten with a new size is named as changed."""
    runs = tmp_path / "home" / ".local" / "share" / "aipc-env" / "runs"
    runs.mkdir(parents=True)
    (runs / "mine.txt").write_text("the user's")
    result, _ = _guarded_run(tmp_path, "~/.local/share/aipc-env/runs/mine.txt")
    assert result.returncode == 1, result.stdout[-3000:]
    assert f"{runs / 'mine.txt'} (changed)" in result.stdout and "(new)" not in result.stdout


def test_the_guard_is_the_controllers_under_xdist(tmp_path):
    """With workers the controller records before they start and checks after they finish (the suite's way)."""
    result, home = _guarded_run(tmp_path, "~/.local/share/aipc-env/w.txt", workers=1)
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    assert f"{home}/.local/share/aipc-env/w.txt (new)" in result.stdout


@pytest.fixture(scope="module")
def seen_by_a_module_fixture(tmp_path_factory) -> dict[str, str]:
    """What a tool started by a module-scoped fixture (set up before any test's own isolation) takes as its
    per-user folders."""
    code = "from aipc_env import paths; print(paths.data_dir(), paths.state_dir(), paths.cache_dir(), sep='\\n')"
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )
    assert result.returncode == 0, result.stderr
    return dict(zip(("data", "state", "cache"), result.stdout.splitlines()))


def test_a_module_fixture_gets_the_runs_own_folders(seen_by_a_module_fixture, tmp_path_factory):
    shared = tmp_path_factory.getbasetemp()
    for kind, folder in seen_by_a_module_fixture.items():
        assert shared in Path(folder).parents, (kind, folder)


def test_the_isolated_environment_of_a_subprocess(tmp_path, monkeypatch):
    for name, value in {
        "AIPC_ENV_TORCH_WHEELS": "/w",
        "AIPC_ENV_DATA_DIR": "/real",
        "XDG_DATA_HOME": "/x",
        "PIPX_HOME": "/p",
        "NOX_ONE": "1",
        "VIRTUAL_ENV": "/v",
        "KEEP_ME": "k",
    }.items():
        monkeypatch.setenv(name, value)
    env = isolated_env(tmp_path / "own", drop=("NOX",), PATH="/usr/bin:/bin", KEEP_ME=None)
    assert (env["AIPC_ENV_DATA_DIR"], env["AIPC_ENV_STATE_DIR"], env["AIPC_ENV_CACHE_DIR"]) == (
        str(tmp_path / "own" / "data"),
        str(tmp_path / "own" / "state"),
        str(tmp_path / "own" / "cache"),
    )
    assert env["PATH"] == "/usr/bin:/bin" and env["HOME"] == os.environ["HOME"] and env["XDG_DATA_HOME"] == "/x"
    assert "NOX_ONE" not in env and "KEEP_ME" not in env and env["VIRTUAL_ENV"] == "/v"
    assert isolated_env(tmp_path, drop=("AIPC_ENV_TORCH",)).get("AIPC_ENV_TORCH_WHEELS") is None
    clean = isolated_env(tmp_path / "login", clean_home=True)
    assert clean["HOME"] == str(tmp_path / "login" / "home") and (tmp_path / "login" / "home").is_dir()
    assert clean["AIPC_ENV_TORCH_WHEELS"] == "/w" and clean["KEEP_ME"] == "k"
    for name in (
        "AIPC_ENV_DATA_DIR",
        "AIPC_ENV_STATE_DIR",
        "AIPC_ENV_CACHE_DIR",
        "XDG_DATA_HOME",
        "PIPX_HOME",
        "NOX_ONE",
        "VIRTUAL_ENV",
    ):
        assert name not in clean, name
