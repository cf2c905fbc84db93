"""Where the nox sessions get torch: the decision (pure), the command line nox really runs for each case, and a
real resolution of the CPU case that pulls no nvidia-* package."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from aipc_env.trainenv.torch_source import PYPI, plan_torch_install, take_options
from tests.conftest import ROOT, require_tool
from tests.support.isolation import isolated_env


def test_the_decision():
    xpu = plan_torch_install("2.13.0", intel_gpu=True)
    assert xpu.requirement == "torch==2.13.0+xpu"
    assert xpu.args == ("--index-url", PYPI, "--extra-index-url", "https://download.pytorch.org/whl/xpu")
    cpu = plan_torch_install("2.13.0", intel_gpu=False)
    assert cpu.requirement == "torch==2.13.0+cpu" and cpu.args[-1] == "https://download.pytorch.org/whl/cpu"
    mirror = plan_torch_install("2.13.0", intel_gpu=False, index="https://mirror.example/whl/")
    assert mirror.args[-1] == "https://mirror.example/whl/cpu"
    assert plan_torch_install("2.13.0", intel_gpu=True, index="https://m/torch/xpu").args[-1] == "https://m/torch/xpu"
    wheels = plan_torch_install("2.13.0", intel_gpu=True, build="cpu", wheels="/srv/wheels")
    assert wheels.requirement == "torch==2.13.0+cpu" and wheels.args == ("--find-links", "/srv/wheels")
    with pytest.raises(ValueError, match="xpu, cpu or auto"):
        plan_torch_install("2.13.0", intel_gpu=False, build="cuda")


def test_session_options_override_the_environment():
    overrides, rest = take_options(["--torch", "xpu", "--torch-wheels=/w", "config.yaml", "--dry-run"])
    assert overrides == {"AIPC_ENV_TORCH": "xpu", "AIPC_ENV_TORCH_WHEELS": "/w"} and rest == ["config.yaml", "--dry-run"]


def _nox(tmp_path: Path, **env: str) -> str:
    """Run `nox -s train` against an empty index, so it stops right after printing the torch install line."""
    empty = tmp_path / "empty-index"
    empty.mkdir(exist_ok=True)
    full = isolated_env(tmp_path, drop=("AIPC_ENV_TORCH",), **env)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "nox",
            "-f",
            str(ROOT / "noxfile.py"),
            "-s",
            "train",
            "--envdir",
            str(tmp_path / "nox"),
            "--no-color",
        ],
        capture_output=True,
        text=True,
        env=full,
        timeout=300,
    )
    assert out.returncode != 0  # nothing can be installed from an empty index
    return out.stdout + out.stderr


def test_the_command_line_nox_runs_for_each_case(tmp_path):
    empty = (tmp_path / "empty-index").as_uri()
    text = _nox(tmp_path, AIPC_ENV_TORCH="xpu", AIPC_ENV_TORCH_INDEX=empty + "/xpu")
    assert f"pip install torch==2.13.0+xpu --index-url {PYPI} --extra-index-url {empty}/xpu" in text
    text = _nox(tmp_path, AIPC_ENV_TORCH="cpu", AIPC_ENV_TORCH_INDEX=empty)
    assert f"pip install torch==2.13.0+cpu --index-url {PYPI} --extra-index-url {empty}/cpu" in text
    text = _nox(tmp_path, AIPC_ENV_TORCH="cpu", AIPC_ENV_TORCH_WHEELS=str(tmp_path / "empty-index"))
    assert f"pip install torch==2.13.0+cpu --find-links {tmp_path / 'empty-index'}" in text


def _local_torch_wheels() -> str | None:
    folder = os.environ.get("AIPC_ENV_TORCH_WHEELS")
    return folder if folder and list(Path(folder).glob("torch-2.13.0+cpu-*.whl")) else None


def test_the_cpu_case_resolves_no_nvidia_package(tmp_path):
    """Resolve the train env for Linux with uv against the public index, torch from the CPU source (here the
    local wheel folder CI uses in place of the unreachable PyTorch CPU index): no nvidia-* package."""
    from aipc_env.lock.tools import find_uv

    wheels = _local_torch_wheels()
    require_tool(None if wheels else "no local torch 2.13.0+cpu wheel (set AIPC_ENV_TORCH_WHEELS; .ci/run does)")
    src = plan_torch_install("2.13.0", intel_gpu=False, wheels=wheels)
    out = tmp_path / "resolved.txt"
    result = subprocess.run(
        [
            find_uv(),
            "pip",
            "compile",
            "-",
            "-o",
            str(out),
            "--python-version",
            "3.11",
            "--python-platform",
            "x86_64-unknown-linux-gnu",
            *src.args,
            "--no-header",
            "--quiet",
        ],
        input=f"{src.requirement}\n{ROOT}[train]\n",
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    pins = out.read_text()
    assert "torch==2.13.0+cpu" in pins and "diffusers==" in pins and "bitsandbytes==" in pins
    assert "nvidia-" not in pins
