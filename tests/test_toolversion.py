"""Tool versions read from files (issue 26): equal to what `--version` prints for the real conda-lock, entry
points written by the real pip and uv (spaces in the path), Miniforge-style conda-meta layouts, the nearest
environment winning over a conda root above it, and a process only where no file says it, all at once."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from aipc_env.facts.gather import _conda, inspect_env
from aipc_env.facts.parse import parse_tool_version
from aipc_env.facts.toolversion import (
    candidate_prefixes,
    conda_meta_version,
    env_layout_from_files,
    shebang_interpreter,
    version_from_files,
)
from tests.conftest import find_tool, require_tool
from tests.support.wheels import make_wheel

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX layouts")


def _executable(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def _record(prefix: Path, name: str, version: str, build: str = "h0_0") -> Path:
    """A conda-meta record as conda writes one (the fields conda itself reads, and the file list)."""
    meta = prefix / "conda-meta"
    meta.mkdir(parents=True, exist_ok=True)
    path = meta / f"{name}-{version}-{build}.json"
    path.write_text(
        json.dumps(
            {
                "build": build,
                "build_number": 0,
                "channel": "https://conda.anaconda.org/conda-forge",
                "name": name,
                "version": version,
                "subdir": "linux-64",
                "files": [f"bin/{name}"],
                "requested_spec": name,
            }
        )
    )
    return path


def test_real_conda_lock_version_equals_what_it_prints():
    exe = find_tool("conda-lock")
    require_tool(None if exe else "conda-lock (the lock extra) is not on PATH")
    found = version_from_files("conda-lock", Path(exe))
    printed = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=120, check=True).stdout
    assert found is not None and found.source == "dist-info"
    assert found.version == parse_tool_version(printed) and found.version in printed


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_entry_points_written_by_real_installers(tmp_path, installer):
    """pip writes `#!/bin/sh` + `'''exec' "..."` for a path with spaces; uv writes its own form. Both are read
    back to the venv that holds the distribution, and the version equals what the tool prints."""
    uv = find_tool("uv")
    require_tool(None if installer == "pip" or uv else "uv is not on PATH")
    venv = tmp_path / "tools & (x86) ü" / "v e n v"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    wheel = make_wheel(tmp_path / "wheels", "stand-tool", "3.1.4", scripts={"stand-tool": "stand_tool_stub:main"})
    if installer == "pip":
        argv = [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(venv / "bin" / "python"),
            "install",
            "--no-index",
            "--no-deps",
            "-q",
            str(wheel),
        ]
    else:
        argv = [uv, "pip", "install", "--python", str(venv / "bin" / "python"), "--offline", "--no-deps", str(wheel)]
    subprocess.run(argv, check=True, capture_output=True, env={**os.environ, "PIP_CONSTRAINT": ""})
    script = venv / "bin" / "stand-tool"
    assert shebang_interpreter(script) in (venv / "bin" / "python", venv / "bin" / "python3", None)
    found = version_from_files("stand-tool", script)
    assert found is not None and found.version == "3.1.4"
    printed = subprocess.run([str(script)], capture_output=True, text=True, check=True).stdout.strip()
    assert printed == found.version


def test_pip_long_path_shebang_form(tmp_path):
    script = _executable(tmp_path / "x", "#!/bin/sh\n'''exec' '/opt/my env/bin/python' \"$0\" \"$@\"\n' '''\n")
    assert shebang_interpreter(script) == Path("/opt/my env/bin/python")
    assert shebang_interpreter(_executable(tmp_path / "y", "#!/usr/bin/env python3\n")) is None
    binary = tmp_path / "z"
    binary.write_bytes(b"\x7fELF\x02\x01")
    assert shebang_interpreter(binary) is None


def test_miniforge_layout_reads_conda_meta(tmp_path):
    root = tmp_path / "miniforge3"
    _record(root, "conda", "25.9.1", "py312h7900ff3_0")
    _record(root, "conda-lock", "3.0.4", "pyhd8ed1ab_0")  # conda-lock-*.json also matches the conda-* pattern
    _record(root, "mamba", "2.3.2", "h0f3c2d4_1")
    conda = _executable(root / "bin" / "conda", f"#!{root}/bin/python\nimport sys\n")
    mamba = _executable(root / "bin" / "mamba", "\x7fELF")
    assert version_from_files("conda", conda).version == "25.9.1"
    assert version_from_files("conda", conda).source == "conda-meta"
    assert version_from_files("mamba", mamba).version == "2.3.2"
    assert version_from_files("conda-lock", root / "bin" / "conda-lock").version == "3.0.4"


def test_windows_layouts_find_the_root(tmp_path):
    """Scripts\\conda.exe, condabin\\conda.bat and Library\\bin\\mamba.exe all belong to the Miniforge root."""
    root = tmp_path / "Zoë Müller" / "miniforge3"
    _record(root, "conda", "25.9.1")
    _record(root, "mamba", "2.3.3")
    for entry in ("Scripts/conda.exe", "condabin/conda.bat"):
        assert version_from_files("conda", _executable(root / entry, "MZ")).version == "25.9.1"
    assert version_from_files("mamba", _executable(root / "Library" / "bin" / "mamba.exe", "MZ")).version == "2.3.3"


def test_the_nearest_environment_wins_over_a_conda_root_above_it(tmp_path):
    root = tmp_path / "miniforge3"
    _record(root, "conda-lock", "2.5.7")
    env = root / "envs" / "train"
    _record(env, "python", "3.12.7")
    site = env / "lib" / "python3.12" / "site-packages" / "conda_lock-4.0.3.dist-info"
    site.mkdir(parents=True)
    (site / "METADATA").write_text("Metadata-Version: 2.4\nName: conda-lock\nVersion: 4.0.3\n\nVersion: 9\n")
    script = _executable(env / "bin" / "conda-lock", f"#!{env}/bin/python\n")
    assert candidate_prefixes(script)[0] == env
    assert version_from_files("conda-lock", script).version == "4.0.3"


def test_ambiguous_or_missing_records_say_nothing(tmp_path):
    prefix = tmp_path / "env"
    for version in ("1.0", "2.0"):
        info = prefix / "lib" / "python3.12" / "site-packages" / f"dup-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Name: dup\nVersion: {version}\n")
    script = _executable(prefix / "bin" / "dup", "#!/bin/true\n")
    assert version_from_files("dup", script) is None
    _record(prefix, "big", "1.0")
    (prefix / "conda-meta" / "big-1.0-h0_0.json").write_text("{not json")
    assert conda_meta_version(prefix, "big") is None


def test_tools_without_files_are_asked_all_at_once(tmp_path, monkeypatch):
    """A standalone micromamba and a conda with no record: each asked `--version`; the two runs overlap."""
    log = tmp_path / "log"
    bindir = tmp_path / "bare bin"
    for name, text in (("conda", "conda 24.1.0"), ("micromamba", "2.0.5")):
        _executable(
            bindir / name,
            f"#!/bin/sh\necho start {name} $(date +%s.%N) >> '{log}'\nsleep 1\n"
            f"echo end {name} $(date +%s.%N) >> '{log}'\necho '{text}'\n",
        )
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}/usr/bin:/bin")
    for var in ("CONDA_EXE", "MAMBA_EXE"):
        monkeypatch.delenv(var, raising=False)
    tools = {t.name: t for t in _conda(10)}
    assert (tools["conda"].version, tools["conda"].version_source) == ("24.1.0", "process")
    assert (tools["micromamba"].version, tools["micromamba"].version_source) == ("2.0.5", "process")
    times = {}
    for line in log.read_text().splitlines():
        kind, name, when = line.split()
        times[(kind, name)] = float(when)
    assert times[("start", "micromamba")] < times[("end", "conda")]
    assert times[("start", "conda")] < times[("end", "micromamba")]


def test_tools_with_records_start_no_process(tmp_path, monkeypatch):
    root = tmp_path / "miniforge3"
    _record(root, "conda", "25.9.1")
    marker = tmp_path / "started"
    _executable(root / "bin" / "conda", f"#!/bin/sh\ntouch '{marker}'\necho conda 0.0.0\n")
    monkeypatch.setenv("PATH", f"{root / 'bin'}{os.pathsep}/usr/bin:/bin")
    monkeypatch.delenv("CONDA_EXE", raising=False)
    (conda,) = [t for t in _conda(10) if t.name == "conda"]
    assert (conda.version, conda.version_source) == ("25.9.1", "conda-meta")
    assert not marker.exists()


@pytest.mark.parametrize("maker", ["venv", "uv"])
def test_env_layout_from_files_equals_the_interpreters_answer(tmp_path, maker):
    uv = find_tool("uv")
    require_tool(None if maker == "venv" or uv else "uv is not on PATH")
    prefix = tmp_path / "train env ü"
    argv = (
        [sys.executable, "-m", "venv", "--without-pip", str(prefix)]
        if maker == "venv"
        else [uv, "venv", "--python", sys.executable, str(prefix)]
    )
    subprocess.run(argv, check=True, capture_output=True)
    layout = env_layout_from_files(prefix)
    assert layout is not None
    ask = subprocess.run(
        [
            str(prefix / "bin" / "python"),
            "-I",
            "-c",
            "import sys, sysconfig; print('.'.join(map(str, sys.version_info[:3])));print(sysconfig.get_paths()['purelib'])",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    version, purelib = ask.stdout.split("\n")[:2]
    assert layout[0] == version and Path(layout[1][0]).resolve() == Path(purelib).resolve()
    env = inspect_env(prefix, prefix / "bin" / "python")
    assert env.error is None and env.python_version == version


def test_env_that_sees_system_site_packages_asks_its_interpreter(tmp_path):
    prefix = tmp_path / "sys env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(prefix)], check=True)
    assert env_layout_from_files(prefix) is None
    env = inspect_env(prefix, prefix / "bin" / "python")
    assert env.error is None and env.python_version == ".".join(map(str, sys.version_info[:3]))
