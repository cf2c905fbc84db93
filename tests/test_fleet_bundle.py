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
from tests.support.isolation import isolated_env

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
    assert set(manifest["files"]) == files - {"bundle-manifest.json", "bundle-manifest.json.minisig"}
    assert any(f.startswith("wheels/aipc_env-") for f in files) and "bootstrap.sh" in files
    assert "bootstrap.ps1" in files and "&&" not in (fleet_bundle / "bootstrap.ps1").read_text()
    assert manifest["pair"] == "xpu-2.13" and manifest["platform"] == "linux-64"


def test_bootstrap_with_no_network_gives_a_clean_env(fleet_bundle, tmp_path, warm_caches):
    require_tool(distro_python_with_venv())
    bundle = _copy(fleet_bundle, tmp_path / "bundle copy ü")
    prefix = tmp_path / "env"
    env = isolated_env(tmp_path, PATH="/usr/bin:/bin", UV_CACHE_DIR=warm_caches["UV_CACHE_DIR"])
    result = _offline(["sh", str(bundle / "bootstrap.sh"), "--prefix", str(prefix)], env)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "(no network)" in result.stdout
    stub = subprocess.run(
        [str(prefix / "bin" / "python"), "-c", "import torch_stub; print(torch_stub.VALUE)"], capture_output=True, text=True
    )
    assert stub.stdout.strip() == "XPU"
    assert not [p for p in bundle.rglob("*") if p.name == ".tool"]  # the bootstrap's tool env lives outside
    check = _offline(
        [sys.executable, "-m", "aipc_env", "env", "--check", "--bundle", str(bundle), "--prefix", str(prefix), "--json"], env
    )
    assert check.returncode == 0 and json.loads(check.stdout)["drift"] == [], check.stdout[-2000:]


@pytest.mark.parametrize(
    "victim, refusal",
    [
        ("wheels", "damaged or tampered"),
        ("requirements.linux-64.txt", "damaged or tampered"),
        ("verify-bundle.py", "verify-bundle.py is missing or not the one this bundle was made with"),
    ],
)
def test_a_tampered_bundle_is_refused_and_nothing_is_installed(fleet_bundle, tmp_path, victim, refusal):
    bundle = _copy(fleet_bundle, tmp_path / "bundle")
    target = min((bundle / "wheels").glob("pydantic-*.whl")) if victim == "wheels" else bundle / victim
    target.write_bytes(target.read_bytes() + b"\n# tampered")
    prefix = tmp_path / "env"
    env = isolated_env(tmp_path)
    result = _offline(
        [
            sys.executable,
            "-m",
            "aipc_env",
            "env",
            "--bundle",
            str(bundle),
            "--prefix",
            str(prefix),
            "--base-python",
            sys.executable,
        ],
        env,
    )
    assert result.returncode == 1 and "does not match its manifest" in result.stderr
    assert target.relative_to(bundle).as_posix() in result.stderr and not prefix.exists()
    require_tool(distro_python_with_venv())
    boot = _offline(["sh", str(bundle / "bootstrap.sh"), "--prefix", str(prefix)], {**env, "PATH": "/usr/bin:/bin"})
    assert boot.returncode == 1 and refusal in boot.stderr
    assert not prefix.exists() and not (bundle / ".tool").exists()


def _resign(bundle: Path, keys: Path) -> None:
    subprocess.run(
        ["minisign", "-S", "-s", str(keys / "admin.key"), "-m", str(bundle / "bundle-manifest.json")],
        check=True,
        capture_output=True,
        timeout=60,
    )


def _keys(fleet_bundle: Path) -> Path:
    return fleet_bundle.parent / "admin keys"


def _rehash(bundle: Path, rel: str) -> None:
    import hashlib

    manifest = json.loads((bundle / "bundle-manifest.json").read_text())
    manifest["files"][rel] = hashlib.sha256((bundle / rel).read_bytes()).hexdigest()
    (bundle / "bundle-manifest.json").write_text(json.dumps(manifest, indent=2))


def _install(bundle: Path, tmp_path: Path, *extra: str, env_extra: dict | None = None):
    prefix = tmp_path / "env"
    env = isolated_env(tmp_path, **(env_extra or {}))
    env.pop("AIPC_ENV_BUNDLE_TRUST", None) if not env_extra else None
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "aipc_env",
            "env",
            "--bundle",
            str(bundle),
            "--prefix",
            str(prefix),
            "--base-python",
            sys.executable,
            *extra,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    return result, prefix


def test_the_signature_verifies_with_the_real_minisign(fleet_bundle):
    keys = _keys(fleet_bundle)
    result = subprocess.run(
        ["minisign", "-Vm", str(fleet_bundle / "bundle-manifest.json"), "-p", str(keys / "admin.pub")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0 and "Signature and comment signature verified" in result.stdout
    assert "aipc-env bundle xpu-2.13 linux-64" in result.stdout


def test_rehashed_files_and_manifest_without_a_valid_signature_are_refused(fleet_bundle, tmp_path):
    """An attacker who can write the bundle re-hashes the changed file into the manifest: the hashes agree, the
    signature does not; nothing runs, nothing is installed."""
    keys = _keys(fleet_bundle)
    bundle = _copy(fleet_bundle, tmp_path / "bundle")
    victim = bundle / "requirements.linux-64.txt"
    victim.write_text(victim.read_text() + "evil==1.0\n")
    _rehash(bundle, "requirements.linux-64.txt")
    result, prefix = _install(bundle, tmp_path, "--trust", str(keys / "admin.pub"))
    assert result.returncode == 1 and "does not verify" in result.stderr and not prefix.exists()
    require_tool(distro_python_with_venv())
    boot = _offline(
        ["sh", str(bundle / "bootstrap.sh"), "--prefix", str(prefix)],
        isolated_env(tmp_path, PATH="/usr/bin:/bin", AIPC_ENV_BUNDLE_TRUST=str(keys / "admin.pub")),
    )
    assert boot.returncode == 1 and "signature does not verify" in boot.stderr and not prefix.exists()


def test_an_unsigned_bundle_is_refused_with_a_trust_key_and_warned_about_without(fleet_bundle, tmp_path):
    keys = _keys(fleet_bundle)
    bundle = _copy(fleet_bundle, tmp_path / "bundle")
    (bundle / "bundle-manifest.json.minisig").unlink()
    refused, prefix = _install(bundle, tmp_path, "--trust", str(keys / "admin.pub"))
    assert refused.returncode == 1 and "no signature" in refused.stderr and not prefix.exists()
    from aipc_env.fleet.bundle_check import verify_bundle

    warnings: list[str] = []
    verify_bundle(bundle, None, warn=warnings.append)
    assert warnings and "not signed" in warnings[0]


@pytest.mark.parametrize("attack", ["parent-path", "absolute-path", "symlinked-wheel", "planted-pth"])
def test_paths_leave_nothing_inside_the_bundle(fleet_bundle, tmp_path, attack):
    """Signed by the admin's own key after the change, so only the path guard can catch it."""
    keys = _keys(fleet_bundle)
    bundle = _copy(fleet_bundle, tmp_path / "bundle")
    outside = tmp_path / "outside.txt"
    outside.write_text("payload")
    manifest = json.loads((bundle / "bundle-manifest.json").read_text())
    if attack in ("parent-path", "absolute-path"):
        import hashlib

        rel = "../outside.txt" if attack == "parent-path" else str(outside)
        manifest["files"][rel] = hashlib.sha256(b"payload").hexdigest()
        (bundle / "bundle-manifest.json").write_text(json.dumps(manifest))
        _resign(bundle, keys)
        expected = "not a path inside the bundle"
    elif attack == "symlinked-wheel":
        wheel = min((bundle / "wheels").glob("pydantic-*.whl"))
        shutil.copy(wheel, outside)
        wheel.unlink()
        wheel.symlink_to(outside)
        expected = "holds links"
    else:
        pth = bundle / ".tool" / "lib" / "python3.11" / "site-packages" / "evil.pth"
        pth.parent.mkdir(parents=True)
        pth.write_text("import os; os.system('touch pwned')\n")
        expected = "not in the manifest"
    result, prefix = _install(bundle, tmp_path, "--trust", str(keys / "admin.pub"))
    assert result.returncode == 1 and expected in result.stderr, result.stderr[-2000:]
    assert not prefix.exists()


@pytest.mark.parametrize("kind", ["fifo", "dir-link"])
def test_a_bundle_holding_a_fifo_or_a_linked_folder_is_refused(fleet_bundle, tmp_path, kind):
    """The docs say a bundle is regular files and folders: a FIFO (a reader would block on it) or a linked folder is
    refused before anything is read or installed, by env --bundle as by the bootstrap script."""
    bundle = _copy(fleet_bundle, tmp_path / "bundle")
    if kind == "fifo":
        os.mkfifo(bundle / "wheels" / "extra.whl")
    else:
        (tmp_path / "elsewhere").mkdir()
        (bundle / "more").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    result, prefix = _install(bundle, tmp_path, "--trust", str(_keys(fleet_bundle) / "admin.pub"))
    assert result.returncode == 1, result.stderr[-2000:]
    assert ("wheels/extra.whl: FIFO" if kind == "fifo" else "more: link") in result.stderr
    assert "regular files and folders only" in result.stderr and not prefix.exists()


def test_a_bundle_needs_an_empty_folder(fleet_bundle, tmp_path):
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "x").write_text("x")
    result = run_cli(
        "fleet",
        "bundle",
        "--lock",
        str(fleet_bundle / "pylock.linux-64.toml"),
        "--platform",
        "linux-64",
        "--python",
        "3.11",
        "--out",
        str(tmp_path / "used"),
    )
    assert result.returncode == 2 and "not empty" in result.stderr


@pytest.mark.parametrize("kill", [False, True])
def test_an_interrupted_bundle_build_leaves_no_bundle_and_the_next_run_recovers(fleet_bundle, tmp_path, kill):
    """Ctrl-C after the wheels were fetched leaves nothing; a power cut leaves only a hidden partial folder beside
    --out (no bundle, nothing that blocks), which the next run removes before it builds."""
    from aipc_env.fleet.bundle_check import verify_bundle

    out = tmp_path / "bundle"
    argv = [
        "fleet",
        "bundle",
        "--pair",
        "xpu-2.13",
        "--lock",
        str(fleet_bundle / "pylock.linux-64.toml"),
        "--platform",
        "linux-64",
        "--python",
        "3.11",
        "--out",
        str(out),
        "--find-links",
        str(fleet_bundle / "wheels"),
    ]
    env = {"AIPC_ENV_CACHE_DIR": str(tmp_path / "cache")}
    stopped = run_cli(
        *argv,
        env={**env, "AIPC_ENV_INTERRUPT_AT": "bundle:after-wheels", "AIPC_ENV_INTERRUPT_SIGNAL": "KILL" if kill else ""},
        timeout=600,
    )
    assert stopped.returncode == (-9 if kill else 130), stopped.stderr[-2000:]
    assert not out.exists()
    assert bool(list(tmp_path.glob(".bundle-partial-*"))) == kill
    again = run_cli(*argv, env=env, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    assert not list(tmp_path.glob(".bundle-*"))
    verify_bundle(out, warn=lambda _m: None)


def test_a_lock_that_cannot_install_aipc_env_is_refused_before_anything_is_fetched(fleet_bundle, tmp_path):
    """The bootstrap installs aipc-env offline from the bundle: every dependency its wheel declares must be in the
    lock (here cryptography and uv are cut out of it)."""
    text = (fleet_bundle / "pylock.linux-64.toml").read_text(encoding="utf-8")
    blocks = text.split("\n[[packages]]\n")
    kept = [b for b in blocks if not b.startswith(('name = "cryptography"', 'name = "uv"'))]
    assert len(kept) == len(blocks) - 2
    lock = tmp_path / "lock" / "pylock.linux-64.toml"
    lock.parent.mkdir()
    lock.write_text("\n[[packages]]\n".join(kept), encoding="utf-8")
    out = tmp_path / "bundle"
    result = run_cli(
        "fleet",
        "bundle",
        "--lock",
        str(lock),
        "--platform",
        "linux-64",
        "--python",
        "3.11",
        "--out",
        str(out),
        env={"AIPC_ENV_CACHE_DIR": str(tmp_path / "cache")},
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert "cannot install aipc-env offline" in result.stderr and "cryptography is not in the lock" in result.stderr
    assert "uv is not in the lock" in result.stderr
    assert not out.exists()
    fetched = [p.name for p in (tmp_path / "cache").rglob("*.whl") if not p.name.startswith("aipc_env-")]
    assert fetched == []  # only aipc-env's own wheel was built (its Requires-Dist is what is checked)
