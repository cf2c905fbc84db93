"""Generated .bat launchers executed for real under Wine's cmd, with a fake setvars.bat and a stand-in
interpreter (a real Windows exe built with mingw) that records its arguments and environment."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from aipc_env.launch.plan import Activation, LaunchPlan, Phase
from aipc_env.launch.render import write_launcher
from tests.conftest import require_tool
from tests.support.wine import fake_oneapi_bat, make_wine, read_record, stop_wine, wine_reason

pytestmark = pytest.mark.wine

USER_VALUE = 'a|b & echo INJECTED "q" %PATH% !x! ^caret (x86)'


@pytest.fixture(scope="module")
def wine(tmp_path_factory):
    require_tool(wine_reason())
    w = make_wine(tmp_path_factory.mktemp("wine"))
    yield w
    stop_wine(w)


def _setup(wine, tmp_path: Path, *, fail_setvars: bool = False, exit_code: int = 0, with_oneapi: bool = True):
    base = tmp_path / "Users & Co (x86)"
    run = base / "run & echo INJECTED ^ 100% !x! (x86)"
    exe = base / "env (x86) & more" / "python.exe"
    exe.parent.mkdir(parents=True)
    shutil.copy(wine.standin, exe)
    oneapi = fake_oneapi_bat(base / "Program Files (x86)" / "Intel" / "oneAPI", fail=fail_setvars) if with_oneapi else None
    record = base / "record.txt"
    plan = LaunchPlan(
        platform="win-64",
        run_dir=str(run),
        python=wine.winpath(exe),
        oneapi=Activation(folder=wine.winpath(oneapi), name="setvars.bat", release="2025.3") if oneapi else None,
        env={
            "PYTHONUTF8": "1",
            "SYCL_CACHE_PERSISTENT": "1",
            "USER_VALUE": USER_VALUE,
            "PYTHONHOME": None,
            "AIPC_STANDIN_OUT": wine.winpath(record),
            "AIPC_STANDIN_EXIT": str(exit_code),
        },
        phases=[Phase(name="fit", argv=["unused"])],
        log_file=wine.winpath(run / "train.log"),
    )
    return write_launcher(plan), record, wine.winpath(run)


def test_exact_command_environment_and_exit_code(wine, tmp_path):
    script, record, run_win = _setup(wine, tmp_path, exit_code=7)
    result = wine.run_bat(script, NoDefaultCurrentDirectoryInExePath="keep me", PYTHONHOME="C:\\bad")
    assert result.returncode == 7, result.stderr
    args, env, cwd = read_record(record)
    assert args == ["-m", "aipc_env.launch.runner", "launch.json"]
    assert cwd == run_win
    # the environment after setvars (which reached its component vars.bat by bare name)
    assert env["SETVARS_COMPLETED"] == "1" and env["FAKE_ONEAPI_RELEASE"] == "2025.3"
    assert env["CMPLR_ROOT"].endswith(r"compiler\2025.3\env\..")
    # cleared only for the setvars call, restored after
    assert env["AIPC_SEEN_NDCD"] == "[]"
    assert env["NoDefaultCurrentDirectoryInExePath"] == "keep me"
    # values pass through untouched; an empty value unsets
    assert env["USER_VALUE"] == USER_VALUE
    assert env["PYTHONUTF8"] == "1" and env["SYCL_CACHE_PERSISTENT"] == "1"
    assert "PYTHONHOME" not in env
    assert b"INJECTED" not in result.stdout


def test_variable_absent_stays_absent(wine, tmp_path):
    script, record, _ = _setup(wine, tmp_path)
    result = wine.run_bat(
        script, unset=("NoDefaultCurrentDirectoryInExePath",), NOT_FOR_THE_RUN="x"
    )  # a variable of ours is passed, so the env reaching cmd is this one
    assert result.returncode == 0, result.stderr
    _, recorded, _ = read_record(record)
    assert recorded.get("NOT_FOR_THE_RUN") == "x"
    assert "NoDefaultCurrentDirectoryInExePath" not in recorded


def test_failing_setvars_stops_before_the_interpreter(wine, tmp_path):
    script, record, _ = _setup(wine, tmp_path, fail_setvars=True)
    result = wine.run_bat(script)
    # Windows' cmd passes setvars' `exit /b 9` through `call`; Wine 8's cmd turns it into 1 (a Wine bug)
    assert result.returncode in (9, 1)
    assert b"oneAPI activation failed with exit code" in result.stderr
    assert not record.exists()


def test_no_toolkit_no_activation(wine, tmp_path):
    script, record, _ = _setup(wine, tmp_path, with_oneapi=False)
    result = wine.run_bat(script)
    assert result.returncode == 0, result.stderr
    _, env, _ = read_record(record)
    assert "SETVARS_COMPLETED" not in env


def test_missing_env_file_is_a_clear_error(wine, tmp_path):
    script, _, _ = _setup(wine, tmp_path)
    (script.parent / "launch.env").unlink()
    result = wine.run_bat(script)
    assert result.returncode == 2 and b"launch.env is missing" in result.stderr


def test_vcvars_is_called_when_cl_is_missing(wine, tmp_path):
    script, record, _ = _setup(wine, tmp_path, with_oneapi=False)
    vs = tmp_path / "Microsoft Visual Studio (x86)" / "VC" / "Auxiliary" / "Build"
    vs.mkdir(parents=True)
    (vs / "vcvars64.bat").write_text('@echo off\r\nset "FAKE_VCVARS=ran"\r\nset "VSCMD_VER=17.14"\r\nexit /b 0\r\n')
    import json

    plan = json.loads((script.parent / "launch.json").read_text())
    plan["vcvars"] = {"folder": wine.winpath(vs), "name": "vcvars64.bat", "release": None}
    from aipc_env.launch.plan import LaunchPlan

    write_launcher(LaunchPlan.model_validate(plan))
    result = wine.run_bat(script)
    assert result.returncode == 0, result.stderr
    _, env, _ = read_record(record)
    assert env["FAKE_VCVARS"] == "ran" and env["VSCMD_VER"] == "17.14"
