"""Probes on this machine, on fake oneAPI trees with real (scripted) compilers, and with a hung tool."""

from __future__ import annotations

import os
import stat
import sys
import time
from pathlib import Path

import pytest

from aipc_env.facts.gather import GatherOptions, gather_facts
from aipc_env.trainenv.record import EnvRecord, write_env_record
from aipc_env.trainenv.situation import gather_machine
from tests.conftest import OUTPUTS, ROOT

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX fake tools")


def _script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def test_this_machine_facts_are_complete(tmp_path):
    facts = gather_machine(GatherOptions(work_dir=tmp_path))
    assert facts.os.system == "Linux" and facts.memory.total_bytes > 2**30
    assert facts.disk.free_bytes > 0
    assert facts.training_env.distributions.get("pydantic")
    assert facts.registry is None and facts.msvc is None


def test_oneapi_component_layout_with_a_compiler(tmp_path, monkeypatch):
    root = tmp_path / "intel one&api (x86)"
    release = root / "compiler" / "2025.0"
    _script(root / "setvars.sh", "true\n")
    _script(release / "bin" / "icpx", f"cat '{OUTPUTS / 'icpx_version_linux.txt'}'\n")
    (root / "compiler" / "latest").mkdir()
    monkeypatch.setenv("ONEAPI_ROOT", str(root))
    facts = gather_facts(GatherOptions(work_dir=tmp_path))
    (install,) = [i for i in facts.oneapi.installs if i.root == str(root)]
    assert (install.layout, install.version, install.version_source, install.compiler_build) == (
        "component",
        "2025.0",
        "icpx",
        "2025.0.4",
    )
    assert install.releases == ["2025.0"]


def test_activated_toolkit_from_path(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    _script(bindir / "icpx", f"cat '{OUTPUTS / 'icpx_version_linux.txt'}'\n")
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SETVARS_COMPLETED", "1")
    facts = gather_facts(GatherOptions(work_dir=tmp_path))
    assert facts.oneapi.active_version == "2025.0"


def test_a_hung_tool_becomes_a_probe_error_not_a_hang(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    _script(bindir / "sycl-ls", "sleep 30\n")
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    start = time.monotonic()
    facts = gather_facts(GatherOptions(work_dir=tmp_path, command_timeout=1.0))
    assert time.monotonic() - start < 10
    assert any(e.probe == "sycl_ls" and "did not answer" in e.error for e in facts.probe_errors)


def test_env_from_state_is_read_through_its_interpreter(tmp_path):
    prefix = Path(sys.prefix)
    write_env_record(EnvRecord(prefix=str(prefix), python=sys.executable, pair="xpu-2.13", built_at="2026-11-01T00:00:00+00:00"))
    facts = gather_machine(GatherOptions(work_dir=tmp_path))
    env = facts.training_env
    assert env.source == "state" and env.pair == "xpu-2.13" and env.error is None
    assert env.distributions["pydantic"]


def test_missing_env_prefix_is_a_fact(tmp_path):
    facts = gather_machine(GatherOptions(work_dir=tmp_path), env_flag=tmp_path / "no env")
    assert "no Python interpreter" in facts.training_env.error
    assert facts.training_env.source == "flag" and facts.training_env.prefix == str(tmp_path / "no env")


def test_without_a_chosen_env_facts_name_none(tmp_path):
    """facts.gather probes the env it is given and chooses none itself (the policy is trainenv's)."""
    assert gather_facts(GatherOptions(work_dir=tmp_path)).training_env is None


def test_the_local_wheel_folders_torch_is_a_fact(tmp_path, monkeypatch):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for name in (
        "torch-2.9.1+xpu-cp311-cp311-linux_x86_64.whl",
        "torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl",
        "torch-bad-name.whl",
    ):
        (wheels / name).write_bytes(b"")
    monkeypatch.setenv("AIPC_ENV_TORCH_WHEELS", str(wheels))
    assert gather_machine(GatherOptions(work_dir=tmp_path)).local_torch_wheels == ["2.13.0", "2.9.1"]


def test_model_dir_layout(tmp_path):
    model = tmp_path / "Qwen Image Edit ü"
    for part in ("transformer", "text_encoder", "vae", "scheduler", "tokenizer"):
        (model / part).mkdir(parents=True)
    (model / "model_index.json").write_text('{"_class_name": "QwenImageEditPlusPipeline"}')
    (model / "transformer" / "config.json").write_text('{"zero_cond_t": true}')
    facts = gather_facts(GatherOptions(work_dir=tmp_path, model_dir=model))
    assert facts.model.variant == "edit-2511" and facts.model.missing == ["processor"]


def test_root_is_the_checkout():
    from aipc_env.paths import project_root

    assert project_root() == ROOT
