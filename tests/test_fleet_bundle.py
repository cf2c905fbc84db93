"""Offline bundles: built from a lock (stand-in XPU wheels on local indexes, aipc-env's dependencies from the
package index), bootstrapped inside `unshare -n` (no network) into an env whose drift check is clean; a tampered
file makes the install refuse and leaves no prefix."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import distro_python_with_venv, require_tool, run_cli

pytestmark = pytest.mark.slow


def _offline(argv: list[str], env: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    require_tool(None if shutil.which("unshare") else "unshare (util-linux) is missing")
    probe = subprocess.run(["unshare", "-n", "true"], capture_output=True)
    require_tool(None if probe.returncode == 0 else "unshare -n is not permitted here (needs root or user namespaces)")
    return subprocess.run(["unshare", "-n", "--", *argv], capture_output=True, text=True, env=env, timeout=timeout)


def _copy(bundle: Path, dest: Path) -> Path:
    shutil.copytree(bundle, dest)
    return dest


def test_the_bundle_lists_every_file_with_its_hash(fleet_bundle):
    manifest = json.loads((fleet_bundle / "bundle-manifest.json").read_text())
    files = {p.relative_to(fleet_bundle).as_posix() for p in fleet_bundle.rglob("*") if p.is_file()}
    assert set(manifest["files"]) == files - {"bundle-manifest.json"}
    assert any(f.startswith("wheels/aipc_env-") for f in files) and "bootstrap.sh" in files
    assert "bootstrap.ps1" in files and "&&" not in (fleet_bundle / "bootstrap.ps1").read_text()
    assert manifest["pair"] == "xpu-2.13" and manifest["platform"] == "linux-64"


def test_bootstrap_with_no_network_gives_a_clean_env(fleet_bundle, tmp_path):
    require_tool(distro_python_with_venv())
    bundle = _copy(fleet_bundle, tmp_path / "bundle copy ü")
    prefix = tmp_path / "env"
    env = {**os.environ, "PATH": "/usr/bin:/bin", "AIPC_ENV_STATE_DIR": str(tmp_path / "state"),
           "AIPC_ENV_CACHE_DIR": str(tmp_path / "cache"), "UV_CACHE_DIR": str(tmp_path / "uv-cache")}
    result = _offline(["sh", str(bundle / "bootstrap.sh"), "--prefix", str(prefix)], env)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "(no network)" in result.stdout
    stub = subprocess.run([str(prefix / "bin" / "python"), "-c", "import torch_stub; print(torch_stub.VALUE)"],
                          capture_output=True, text=True)
    assert stub.stdout.strip() == "XPU"
    check = _offline([str(bundle / ".tool" / "bin" / "aipc-env"), "env", "--check", "--bundle", str(bundle),
                      "--prefix", str(prefix), "--json"], env)
    assert check.returncode == 0 and json.loads(check.stdout)["drift"] == [], check.stdout[-2000:]


@pytest.mark.parametrize("victim", ["wheels", "requirements.linux-64.txt"])
def test_a_tampered_bundle_is_refused_and_nothing_is_installed(fleet_bundle, tmp_path, victim):
    bundle = _copy(fleet_bundle, tmp_path / "bundle")
    target = min((bundle / "wheels").glob("pydantic-*.whl")) if victim == "wheels" else bundle / victim
    target.write_bytes(target.read_bytes() + b"\n# tampered")
    prefix = tmp_path / "env"
    env = {**os.environ, "AIPC_ENV_STATE_DIR": str(tmp_path / "state"), "AIPC_ENV_CACHE_DIR": str(tmp_path / "c")}
    result = _offline([sys.executable, "-m", "aipc_env", "env", "--bundle", str(bundle),
                       "--prefix", str(prefix), "--base-python", sys.executable], env)
    assert result.returncode == 1 and "does not match its manifest" in result.stderr
    assert target.relative_to(bundle).as_posix() in result.stderr and not prefix.exists()
    require_tool(distro_python_with_venv())
    boot = _offline(["sh", str(bundle / "bootstrap.sh"), "--prefix", str(prefix)], {**env, "PATH": "/usr/bin:/bin"})
    assert boot.returncode != 0 and "damaged or tampered" in boot.stderr
    assert not prefix.exists() and not (bundle / ".tool").exists()


def test_a_bundle_needs_an_empty_folder(fleet_bundle, tmp_path):
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "x").write_text("x")
    result = run_cli("fleet", "bundle", "--lock", str(fleet_bundle / "pylock.linux-64.toml"), "--platform",
                     "linux-64", "--python", "3.11", "--out", str(tmp_path / "used"))
    assert result.returncode == 2 and "not empty" in result.stderr
