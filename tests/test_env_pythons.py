"""Every Python a lock covers can be built: the shipped locks cover 3.11, 3.12 and 3.13 (lock-meta `pythons`), and
the env build and its dry run take each of them, and refuse one the lock does not cover, by name. Interpreters this
machine has: pyenv's CPython 3.10.13, 3.11.7, 3.12.1 and 3.13.0 and Debian's 3.11.2 (uv can download none here);
each covered one is used for real: the build runs with it as --base-python through the METADATA check and the
interpreter layer, and uv's own install of the lock (`uv pip sync --dry-run`, as the build runs it) accepts it."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from aipc_env.errors import AipcError, ExitCode
from aipc_env.lock.lockfile import pylock_path, read_meta
from aipc_env.lock.tools import find_uv, uv_install_argv
from aipc_env.trainenv.build import EnvRequest, build_env, building_mark, env_python_version, lock_pythons
from tests.conftest import ROOT, require_tool, run_cli

LOCKS = ROOT / "lockfiles"
PAIR = "xpu-2.12"
PYENV = Path.home() / ".pyenv" / "versions"


def _interpreter(minor: str) -> Path | None:
    found = sorted(PYENV.glob(f"{minor}.*/bin/python{minor}"))
    return found[-1] if found else (Path(shutil.which(f"python{minor}")) if shutil.which(f"python{minor}") else None)


def test_every_shipped_lock_covers_3_11_to_3_13():
    for lock_dir in sorted(p for p in LOCKS.iterdir() if p.is_dir()):
        assert lock_pythons(lock_dir) == ["3.11", "3.12", "3.13"], lock_dir.name
        assert read_meta(lock_dir).python == "3.12"


@pytest.mark.parametrize("python", ["3.11", "3.13"])
def test_the_dry_run_plans_each_covered_python(python):
    result = run_cli("env", "--pair", PAIR, "--dry-run", "--python", python, "--json")
    assert result.returncode == ExitCode.OK, result.stderr
    plan = json.loads(result.stdout)
    assert plan["python"] == python
    tag = f"cp3{python.split('.')[1]}"
    files = [a["filename"] for a in plan["artifacts"]]
    for name in ("torch-2.12.0+xpu", "torchvision-0.27.0+xpu", "triton_xpu-3.7.1"):
        assert [f for f in files if f.startswith(name)] and all(tag in f for f in files if f.startswith(name)), name


@pytest.mark.parametrize("python", ["3.10", "3.14"])
def test_the_dry_run_refuses_a_python_the_lock_does_not_cover(python):
    result = run_cli("env", "--pair", PAIR, "--dry-run", "--python", python, "--json")
    assert result.returncode == ExitCode.USAGE, result.stdout + result.stderr
    error = json.loads(result.stdout)
    assert f"covers Python 3.11, 3.12, 3.13, not {python}" in error["message"]
    assert "--python 3.11 or --python 3.12 or --python 3.13" in error["fix"]


def _request(matrix, prefix: Path, **kw) -> EnvRequest:
    return EnvRequest(
        pair=matrix.get(PAIR), prefix=prefix, platform="linux-64", lock_root=LOCKS, log=prefix.parent / "env.log", **kw
    )


def test_the_envs_python_is_the_asked_one_else_the_locks(matrix, tmp_path):
    assert env_python_version(_request(matrix, tmp_path / "e")) == "3.12"
    assert env_python_version(_request(matrix, tmp_path / "e", python="3.13")) == "3.13"


@pytest.mark.parametrize("python", ["3.10", "3.14"])
def test_the_build_refuses_an_uncovered_python_before_anything_is_made(matrix, tmp_path, python):
    prefix = tmp_path / "env"
    with pytest.raises(AipcError) as caught:
        build_env(_request(matrix, prefix, python=python))
    assert caught.value.message == f"the {PAIR} lock covers Python 3.11, 3.12, 3.13, the env's interpreter is {python}"
    assert not prefix.exists() and not building_mark(prefix).exists()


@pytest.mark.parametrize("python", ["3.11", "3.12", "3.13"])
def test_the_build_runs_with_each_covered_interpreter_of_this_machine(matrix, tmp_path, monkeypatch, python):
    """--base-python of each minor: past the lock's Python check and the real-METADATA check (the lock's XPU wheels
    are local stand-ins carrying the records' METADATA), the interpreter layer is made from that interpreter; then
    uv, as the build runs it, plans the whole pip layer of the real lock for it."""
    from tests.test_wheel_metadata_install import _stand_in

    base = _interpreter(python)
    require_tool(None if base is not None else f"no CPython {python} on this machine (pyenv or python{python} on PATH)")
    assert base is not None
    root = _stand_in(tmp_path)
    prefix = tmp_path / f"env {python}"
    monkeypatch.setenv("AIPC_ENV_INTERRUPT_AT", "env:after-interpreter")
    req = EnvRequest(
        pair=matrix.get(PAIR), prefix=prefix, platform="linux-64", lock_root=root, log=tmp_path / "env.log", base_python=str(base)
    )
    assert env_python_version(req) == python
    with pytest.raises(KeyboardInterrupt):
        build_env(req)
    log = (tmp_path / "env.log").read_text(encoding="utf-8")
    assert f"Using CPython {python}." in log and str(base) in log
    assert not prefix.exists()  # the interrupted build removed its half-made env
    venv = tmp_path / f"venv {python}"
    subprocess.run([find_uv(), "venv", "-q", "--python", str(base), str(venv)], check=True)
    argv = uv_install_argv(find_uv(), venv / "bin" / "python", pylock_path(LOCKS / PAIR, "linux-64")) + ["--dry-run"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "Would install 96 packages" in done.stderr, done.stderr[-500:]
