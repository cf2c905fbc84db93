"""Launch plans and rendered scripts (pure): activation choice, env files, no user data in code."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from aipc_env import __version__
from aipc_env.errors import ExitCode
from aipc_env.facts import load_facts
from aipc_env.facts.model import MsvcInfo, OneApiInfo, OneApiInstall
from aipc_env.launch.accelerate import accelerate_config_text
from aipc_env.launch.plan import LaunchPlan, Phase, base_env, choose_oneapi, choose_vcvars
from aipc_env.launch.render import render_env_bat, render_env_sh, render_launcher, template_text
from tests.conftest import MACHINES

NASTY = r"C:\Users\Zoë & Co (x86)\100% !bang! ^caret"


def plan(**kw) -> LaunchPlan:
    base = dict(
        platform="win-64",
        run_dir=NASTY + r"\run",
        python=NASTY + r"\env\python.exe",
        env={"USER_VAL": 'a|b & echo INJECTED "q" %PATH%'},
        phases=[Phase(name="fit", argv=["x"])],
        log_file=NASTY + r"\run\train.log",
    )
    base.update(kw)
    return LaunchPlan(**base)


def test_scripts_hold_no_user_data():
    p = plan()
    for plan_ in (p, p.model_copy(update={"platform": "linux-64"})):
        name, text = render_launcher(plan_)
        assert "Zoë" not in text and "INJECTED" not in text and "100%" not in text
        # the launcher is the template in launchers/, with only the version and the exit codes filled in
        expected = template_text(name).replace("@AIPC_ENV_VERSION@", __version__)
        assert "@AIPC_EXIT_USAGE@" in expected
        expected = expected.replace("@AIPC_EXIT_USAGE@", str(int(ExitCode.USAGE)))
        for code in ExitCode:
            expected = expected.replace(f"@AIPC_EXIT_{code.name}@", str(int(code)))
        assert text.replace("\r\n", "\n").splitlines() == expected.splitlines()
    env = render_env_bat(p)
    assert f"AIPC_PYTHON={NASTY}\\env\\python.exe" in env.splitlines()
    assert "\r\n" in env


def test_sh_env_file_is_shell_quoted():
    p = plan(platform="linux-64", python="/home/zoë/it's $(rm -rf ~)/bin/python")
    text = render_env_sh(p)
    assert "export AIPC_PYTHON='/home/zoë/it'\"'\"'s $(rm -rf ~)/bin/python'" in text


def test_values_that_cmd_cannot_carry_are_rejected():
    with pytest.raises(ValidationError, match="line break"):
        plan(env={"X": "a\nb"})
    with pytest.raises(ValidationError, match="not a valid environment variable name"):
        plan(env={"BAD NAME": "x"})


def test_oneapi_matching_release_only(matrix):
    good = load_facts(MACHINES / "win11_core_ultra_32gb.json")
    act, warnings = choose_oneapi(matrix.get("xpu-2.11"), good.oneapi, "win-64")
    assert act.name == "oneapi-vars.bat" and act.folder.endswith(r"oneAPI\2025.3") and not warnings
    mismatch = load_facts(MACHINES / "win11_oneapi_2025_0_over_torch_2_10.json")
    act, warnings = choose_oneapi(matrix.get("xpu-2.10"), mismatch.oneapi, "win-64")
    assert act is None and "2025.0 is installed but xpu-2.10 needs 2025.3" in warnings[0]
    act, warnings = choose_oneapi(matrix.get("xpu-2.10"), OneApiInfo(), "win-64")
    assert act is None and "no oneAPI toolkit found" in warnings[0]
    component = OneApiInfo(
        installs=[
            OneApiInstall(
                root="/opt/intel/oneapi",
                version="2025.2",
                layout="component",
                setvars="/opt/intel/oneapi/setvars.sh",
                releases=["2025.2"],
            )
        ]
    )
    act, _ = choose_oneapi(matrix.get("xpu-2.9"), component, "linux-64")
    assert (act.folder, act.name) == ("/opt/intel/oneapi", "setvars.sh")
    # a pair that compiles no kernels on Windows needs no toolkit
    assert choose_oneapi(matrix.get("xpu-2.6"), good.oneapi, "win-64") == (None, [])


def test_vcvars(matrix):
    good = load_facts(MACHINES / "win11_core_ultra_32gb.json")
    act, _ = choose_vcvars(matrix.get("xpu-2.11"), good.msvc, "win-64")
    assert act.name == "vcvars64.bat" and act.folder.endswith(r"VC\Auxiliary\Build")
    act, warnings = choose_vcvars(matrix.get("xpu-2.11"), MsvcInfo(), "win-64")
    assert act is None and "Desktop development with C++" in warnings[0]
    assert choose_vcvars(matrix.get("xpu-2.11"), None, "linux-64") == (None, [])


def test_base_env():
    env = base_env("win-64", pythonpath=[r"C:\a", r"C:\b"], device="xpu:1", engine="qflux", extra={"HF_HOME": "x"})
    assert env["PYTHONPATH"] == r"C:\a;C:\b" and env["ONEAPI_DEVICE_SELECTOR"] == "level_zero:1"
    assert env["QFLUX_DOTENV_LOADED"] == "1" and env["PYTHONUTF8"] == "1" and env["SYCL_CACHE_PERSISTENT"] == "1"
    assert env["PYTHONHOME"] is None and env["HF_HOME"] == "x"
    assert "QFLUX_DOTENV_LOADED" not in base_env("linux-64", pythonpath=[], device=None, engine="builtin")


def test_accelerate_config_quotes_no():
    import yaml

    text = accelerate_config_text("auto")
    parsed = yaml.safe_load(text)
    assert parsed["distributed_type"] == "NO" and parsed["mixed_precision"] == "no"
    assert parsed["dynamo_backend"] == "no" and parsed["num_processes"] == 1 and parsed["use_cpu"] is False


@pytest.mark.parametrize("text", ["[1, 2]", '"plan"', "{", '{"schema_version": 9}'])
def test_the_runner_names_a_plan_it_cannot_run(tmp_path, text):
    """launch.json is read back by the runner inside the training env: a file that is not a plan of its version is
    a one-line usage error, never a traceback."""
    from aipc_env.launch import runner

    plan = tmp_path / "launch.json"
    plan.write_text(text, encoding="utf-8")
    assert runner.main([str(plan)]) == ExitCode.USAGE
