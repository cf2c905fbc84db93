"""Locking and building against local package indexes made here: a `+xpu` torch on an explicit index, a
same-name decoy on the default index, hash-checked installs, drift, the no-lock path."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from aipc_env.errors import AipcError
from aipc_env.lock.check import check_pair_lock
from aipc_env.lock.lock import Indexes, lock_pair
from aipc_env.lock.lockfile import pylock_path, read_pylock
from aipc_env.lock.tools import CondaTool, conda_create_argv, conda_render_argv, find_uv
from aipc_env.trainenv.build import EnvRequest, build_env, check_env
from tests.conftest import ROOT, run_cli
from tests.support.wheels import make_wheel, write_simple_index

PAIR = "xpu-2.13"
COMMON = ["tinydep>=1.0"]
PY = f"{sys.version_info[0]}.{sys.version_info[1]}"


@pytest.fixture(autouse=True)
def _own_uv_cache(tmp_path_factory, monkeypatch):
    """A uv cache of this module's own: the stand-in wheels must never meet another run's cached copies."""
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "uv-cache"))


@pytest.fixture(scope="module")
def indexes(tmp_path_factory, matrix):
    base = tmp_path_factory.mktemp("indexes")
    pair = matrix.get(PAIR)
    pypi, xpu = [], []
    requires = []
    for pin in pair.runtime_pins:
        requires.append(f"{pin.name}=={pin.version}" + (f"; {pin.marker}" if pin.marker else ""))
        pypi.append(make_wheel(base / "w", pin.name, pin.version))
    pypi += [
        make_wheel(base / "w", "torch", "2.13.0", payload="DECOY"),  # decoy on the default index
        make_wheel(base / "w", "bitsandbytes", "0.50.2"),
        make_wheel(base / "w", "tinydep", "1.0"),
        make_wheel(base / "w", "tinydep", "2.0"),
    ]
    xpu += [
        make_wheel(base / "x", "torch", "2.13.0+xpu", requires=requires, payload="XPU"),
        make_wheel(base / "x", "triton-xpu", "3.7.2"),
        make_wheel(base / "x", "tinydep", "9.9", payload="WRONG-INDEX"),
    ]  # must never be taken
    pypi_simple = write_simple_index(pypi, base / "pypi")
    xpu_simple = write_simple_index(xpu, base / "xpu")
    return Indexes(pypi_simple.as_uri(), xpu_simple.as_uri()), base


@pytest.fixture(scope="module")
def locked(indexes, matrix, tmp_path_factory):
    idx, _ = indexes
    root = tmp_path_factory.mktemp("lockfiles")
    lock_pair(matrix.get(PAIR), root, indexes=idx, python=PY, conda_layer=False, log=root.parent / "lock.log", common=COMMON)
    return root


def _request(matrix, root, prefix, idx, **kw) -> EnvRequest:
    return EnvRequest(
        pair=matrix.get(PAIR),
        prefix=prefix,
        platform="linux-64",
        lock_root=root,
        log=prefix.parent / "env.log",
        indexes=idx,
        base_python=sys.executable,
        common=COMMON,
        **kw,
    )


def _stub(prefix: Path, module: str) -> str:
    return subprocess.run(
        [str(prefix / "bin" / "python"), "-c", f"import {module}; print({module}.VALUE)"], capture_output=True, text=True
    ).stdout.strip()


def test_lock_routes_torch_to_the_xpu_index_and_the_rest_to_pypi(locked, indexes):
    idx, _ = indexes
    for platform in ("linux-64", "win-64"):
        pkgs = read_pylock(pylock_path(locked / PAIR, platform)).by_name()
        assert pkgs["torch"].version == "2.13.0+xpu"
        assert pkgs["torch"].wheels[0].url.startswith(idx.xpu_index_url.rsplit("/simple", 1)[0])
        assert pkgs["tinydep"].version == "2.0" and "/pypi/" in pkgs["tinydep"].wheels[0].url
        assert all(a.hashes.get("sha256") for p in pkgs.values() for a in p.artifacts)
    win = read_pylock(pylock_path(locked / PAIR, "win-64")).by_name()
    lin = read_pylock(pylock_path(locked / PAIR, "linux-64")).by_name()
    assert "oneccl" in lin and "oneccl" not in win and "pyzes" in lin
    meta = json.loads((locked / PAIR / "lock-meta.json").read_text())
    assert meta["pair"] == PAIR and meta["matrix_row_hash"].startswith("sha256:") and "uv" in meta["tools"]
    assert (locked / PAIR / "pylock.linux-64.toml").read_text().startswith("# DO NOT EDIT")


def test_lock_check(locked, matrix, tmp_path):
    problems = check_pair_lock(locked / PAIR, matrix)
    assert problems == [f"{locked / PAIR / 'conda-lock.yml'}: missing (conda layer)"]
    bad = tmp_path / PAIR
    bad.mkdir()
    for f in (locked / PAIR).iterdir():
        (bad / f.name).write_text(f.read_text())
    lock = bad / "pylock.win-64.toml"
    text = lock.read_text()
    lock.write_text(text.replace('name = "intel-sycl-rt"\nversion = "2026.0.0"', 'name = "intel-sycl-rt"\nversion = "2025.3.2"'))
    result = run_cli("lock", "check", "--lock-root", str(tmp_path))
    assert result.returncode == 1
    assert f"{lock}: intel-sycl-rt is 2025.3.2, xpu-2.13 pins 2026.0.0" in result.stdout


def test_build_from_lock_drift_repair_and_noop(locked, indexes, matrix, tmp_path):
    idx, _ = indexes
    prefix = tmp_path / "env (x86) ü"
    result = build_env(_request(matrix, locked, prefix, idx))
    assert result.changed and _stub(prefix, "torch_stub") == "XPU" and _stub(prefix, "tinydep_stub") == "2.0"
    assert check_env(prefix, result.lockfile, "linux-64") == []
    again = build_env(_request(matrix, locked, prefix, idx))
    assert not again.changed and again.drift_before == []  # a no-op: no drift, nothing reinstalled (timed in bench_env)
    # drift: somebody changes a package after the build
    subprocess.run(
        [
            find_uv(),
            "pip",
            "install",
            "--python",
            str(prefix / "bin" / "python"),
            "--index-url",
            idx.pypi_url,
            "tinydep==1.0",
            "bitsandbytes==0.50.2",
            "--reinstall-package",
            "tinydep",
        ],
        check=True,
        capture_output=True,
    )
    drift = check_env(prefix, result.lockfile, "linux-64")
    assert [(d.kind, d.name, d.locked, d.installed) for d in drift] == [("version", "tinydep", "2.0", "1.0")]
    repaired = build_env(_request(matrix, locked, prefix, idx))
    assert repaired.changed and [d.name for d in repaired.drift_before] == ["tinydep"]
    assert check_env(prefix, result.lockfile, "linux-64") == []
    # env --check also holds the interpreter to the lock's conda layer, where that layer is at the env's Python
    import platform as _platform

    import yaml

    here = _platform.python_version()
    with_layer = tmp_path / "with-layer"
    with_layer.mkdir()
    lockfile = with_layer / result.lockfile.name
    shutil.copy(result.lockfile, lockfile)
    layer = yaml.safe_load((ROOT / "lockfiles" / "xpu-2.12" / "conda-lock.yml").read_text())
    for version, drift in ((here, []), (here.rsplit(".", 1)[0] + ".0", [("interpreter", "python", here)])):
        for pkg in layer["package"]:
            if pkg["name"] == "python":  # the record and the file it names, kept consistent (condaspec)
                pkg["url"] = pkg["url"].replace(f"/python-{pkg['version']}-", f"/python-{version}-")
                pkg["version"] = version
        (with_layer / "conda-lock.yml").write_text(yaml.safe_dump(layer))
        got = check_env(prefix, lockfile, "linux-64", interpreter=True)
        assert [(d.kind, d.name, d.installed) for d in got] == drift
        assert check_env(prefix, lockfile, "linux-64") == []  # the build's own no-op check leaves it out


def test_env_check_cli_reports_extra_and_missing(locked, indexes, matrix, tmp_path):
    idx, base = indexes
    prefix = tmp_path / "env"
    build_env(_request(matrix, locked, prefix, idx))
    py = str(prefix / "bin" / "python")
    subprocess.run([find_uv(), "pip", "uninstall", "--python", py, "triton-xpu"], check=True, capture_output=True)
    make_wheel(base / "extra", "stray", "0.1")
    subprocess.run(
        [find_uv(), "pip", "install", "--python", py, str(base / "extra" / "stray-0.1-py3-none-any.whl")],
        check=True,
        capture_output=True,
    )
    out = run_cli("env", "--check", "--pair", PAIR, "--prefix", str(prefix), "--lock-root", str(locked), "--json")
    assert out.returncode == 1
    kinds = {(d["kind"], d["name"]) for d in json.loads(out.stdout)["drift"]}
    assert kinds == {("missing", "triton-xpu"), ("extra", "stray")}


def _state(prefix: Path) -> dict:
    """Everything a failed install must not change: versions, RECORD hashes of every installed file, the manifest."""
    import hashlib

    site = next((prefix / "lib").glob("python*/site-packages"))
    files = {
        str(p.relative_to(site)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(site.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }
    from aipc_env.facts.gather import inspect_env
    from aipc_env.trainenv.envs import env_python

    return {
        "versions": inspect_env(prefix, env_python(prefix)).distributions,
        "files": files,
        "manifest": (prefix / "aipc-env-manifest.json").read_text(),
    }


def _tamper(wheel: Path) -> bytes:
    original = wheel.read_bytes()
    with zipfile.ZipFile(wheel, "a") as zf:
        zf.writestr("evil.py", "print('pwned')")
    return original


def test_a_tampered_wheel_fails_the_hash_check_and_a_healthy_env_stays_as_it_was(locked, indexes, matrix, tmp_path):
    idx, base = indexes
    prefix = tmp_path / "env"
    build_env(_request(matrix, locked, prefix, idx))
    assert check_env(prefix, pylock_path(locked / PAIR, "linux-64"), "linux-64") == []  # healthy to start with
    # someone installs PyPI's torch over the XPU one: the repair must fetch torch again, and meets a tampered wheel
    subprocess.run(
        [
            find_uv(),
            "pip",
            "install",
            "--python",
            str(prefix / "bin" / "python"),
            "--index-url",
            idx.pypi_url,
            "--reinstall-package",
            "torch",
            "torch==2.13.0",
        ],
        check=True,
        capture_output=True,
    )
    assert _stub(prefix, "torch_stub") == "DECOY"
    subprocess.run([find_uv(), "cache", "clean"], capture_output=True)
    before = _state(prefix)
    wheel = base / "xpu" / "files" / "torch-2.13.0+xpu-py3-none-any.whl"
    original = _tamper(wheel)
    try:
        with pytest.raises(AipcError) as exc:
            build_env(_request(matrix, locked, prefix, idx))
        assert "exited with" in exc.value.message
        assert "Hash mismatch" in (prefix.parent / "env.log").read_text()
    finally:
        wheel.write_bytes(original)
    assert _state(prefix) == before


def test_a_fresh_build_that_fails_leaves_no_prefix(locked, indexes, matrix, tmp_path):
    idx, base = indexes
    prefix = tmp_path / "new env"
    wheel = base / "xpu" / "files" / "torch-2.13.0+xpu-py3-none-any.whl"
    original = _tamper(wheel)
    try:
        with pytest.raises(AipcError):
            build_env(_request(matrix, locked, prefix, idx))
    finally:
        wheel.write_bytes(original)
    assert not prefix.exists()


def test_hash_drift_of_an_installed_file_is_found_and_repaired(locked, indexes, matrix, tmp_path):
    idx, _ = indexes
    prefix = tmp_path / "env"
    build_env(_request(matrix, locked, prefix, idx))
    stub = next((prefix / "lib").glob("python*/site-packages/tinydep_stub.py"))
    stub.write_text("VALUE = 'tampered after install'\n")
    lockfile = pylock_path(locked / PAIR, "linux-64")
    drift = check_env(prefix, lockfile, "linux-64")
    assert [(d.kind, d.name, d.files) for d in drift] == [("modified", "tinydep", ["tinydep_stub.py"])]
    out = run_cli("env", "--check", "--pair", PAIR, "--prefix", str(prefix), "--lock-root", str(locked))
    assert out.returncode == 1 and "tinydep 2.0: 1 installed file(s) changed since the install" in out.stdout
    repaired = build_env(_request(matrix, locked, prefix, idx))
    assert repaired.changed and [d.kind for d in repaired.drift_before] == ["modified"]
    assert _stub(prefix, "tinydep_stub") == "2.0" and check_env(prefix, lockfile, "linux-64") == []


def test_lock_check_validates_hashes_encodings_and_the_root(locked, tmp_path):
    bad = tmp_path / "lockfiles" / PAIR
    bad.mkdir(parents=True)
    for f in (locked / PAIR).iterdir():
        (bad / f.name).write_bytes(f.read_bytes())
    lock = bad / "pylock.linux-64.toml"
    text = lock.read_text()
    first = text.index('sha256 = "') + len('sha256 = "')
    lock.write_text(text[:first] + "not-a-hash" + text[first + 64 :])
    win = bad / "pylock.win-64.toml"
    wtext = win.read_text()
    first = wtext.index('sha256 = "') + len('sha256 = "')
    win.write_text(wtext[:first] + "0" * 64 + wtext[first + 64 :])
    result = run_cli("lock", "check", "--lock-root", str(tmp_path / "lockfiles"), "--json")
    assert result.returncode == 1
    problems = json.loads(result.stdout)["pairs"][0]["problems"]
    assert any("'not-a-hash' is not a sha256 digest" in p for p in problems)
    assert any("'" + "0" * 64 + "' is not a sha256 digest" in p for p in problems)
    win.write_bytes(wtext.replace("# DO NOT EDIT", "# DO NOT EDIT \u00e9").encode("latin-1"))
    result = run_cli("lock", "check", "--lock-root", str(tmp_path / "lockfiles"))
    assert result.returncode == 2 and "not UTF-8" in result.stderr and "Traceback" not in result.stderr
    for root in (tmp_path / "missing", win):
        result = run_cli("lock", "check", "--lock-root", str(root))
        assert result.returncode == 2 and "--lock-root" in result.stderr and "Traceback" not in result.stderr


def test_no_lock_says_how_and_unlocked_records_one(indexes, matrix, tmp_path):
    idx, _ = indexes
    root = tmp_path / "lockfiles"
    with pytest.raises(AipcError) as exc:
        build_env(_request(matrix, root, tmp_path / "env", idx))
    assert "nox -s lock -- --pair xpu-2.13" in exc.value.fix and "--unlocked" in exc.value.fix
    result = build_env(_request(matrix, root, tmp_path / "env", idx, unlocked=True))
    assert result.changed and _stub(tmp_path / "env", "torch_stub") == "XPU"
    meta = json.loads((root / PAIR / "lock-meta.json").read_text())
    assert meta["source"].startswith("env --unlocked")
    assert check_env(tmp_path / "env", pylock_path(root / PAIR, "linux-64"), "linux-64") == []


def test_conda_layer_command_lines():
    prefix, lock, explicit = Path("/envs/x y"), Path("/l/conda-lock.yml"), Path("/t/conda-linux-64.explicit.txt")
    assert conda_create_argv(CondaTool("conda-lock", "/b/conda-lock"), prefix, lockfile=lock) == [
        "/b/conda-lock",
        "install",
        "--prefix",
        "/envs/x y",
        "/l/conda-lock.yml",
    ]
    for name in ("micromamba", "mamba", "conda"):
        assert conda_create_argv(CondaTool(name, f"/b/{name}"), prefix, explicit=explicit) == [
            f"/b/{name}",
            "create",
            "--yes",
            "--prefix",
            "/envs/x y",
            "--file",
            str(explicit),
        ]
        assert conda_create_argv(CondaTool(name, f"/b/{name}"), prefix, python="3.12") == [
            f"/b/{name}",
            "create",
            "--yes",
            "--prefix",
            "/envs/x y",
            "--override-channels",
            "-c",
            "conda-forge",
            "python=3.12",
            "pip",
        ]


CONDA_LOCK_FIXTURE = """\
version: 1
metadata:
  content_hash:
    linux-64: 0f1e2d
    win-64: 0f1e2d
  channels:
  - url: conda-forge
    used_env_vars: []
  platforms:
  - linux-64
  - win-64
  sources:
  - environment.yml
package:
- name: python
  version: 3.12.12
  manager: conda
  platform: linux-64
  dependencies: {}
  url: https://conda.anaconda.org/conda-forge/linux-64/python-3.12.12-hd63d673_1_cpython.conda
  hash:
    md5: 5c00c8cea14ee8d02941cab9121dce41
    sha256: 6cca004806ceceea9585d4d655059e951152fc774a471593d4f5138e6a54c81d
  category: main
  optional: false
- name: python
  version: 3.12.12
  manager: conda
  platform: win-64
  dependencies: {}
  url: https://conda.anaconda.org/conda-forge/win-64/python-3.12.12-h0159041_1_cpython.conda
  hash:
    md5: 42ae551e4c15837a582bea63412dc0b4
    sha256: 9ace1a5ec8e6c6d8e4e1d8ec7b4cb2c0b4a0c8e3e5c57f6e6eb3d5ae3e30a4a9
  category: main
  optional: false
"""


def test_conda_lock_render_works_offline(tmp_path):
    import shutil

    from tests.conftest import require_tool

    conda_lock = shutil.which("conda-lock") or str(Path(sys.executable).parent / "conda-lock")
    require_tool(None if Path(conda_lock).exists() else "conda-lock is not installed (pip install -e .[lock])")
    lock = tmp_path / "conda-lock.yml"
    lock.write_text(CONDA_LOCK_FIXTURE)
    subprocess.run(conda_render_argv(conda_lock, lock, "win-64", tmp_path), check=True, capture_output=True, timeout=120)
    text = (tmp_path / "conda-win-64.explicit.txt").read_text()
    assert "@EXPLICIT" in text and "win-64/python-3.12.12-h0159041_1_cpython.conda#" in text


def _cli_build(prefix: Path, locked: Path, idx, *, at: str | None = None, kill: bool = False):
    env = {"AIPC_ENV_INTERRUPT_AT": at or "", "AIPC_ENV_INTERRUPT_SIGNAL": "KILL" if kill else ""}
    return run_cli(
        "env",
        "--pair",
        PAIR,
        "--prefix",
        str(prefix),
        "--lock-root",
        str(locked),
        "--pypi-url",
        idx.pypi_url,
        "--xpu-index-url",
        idx.xpu_index_url,
        "--base-python",
        sys.executable,
        env=env,
        timeout=300,
    )


@pytest.mark.parametrize(
    "at, kill",
    [("env:after-interpreter", False), ("env:after-interpreter", True), ("env:after-install", True), ("env:before-commit", True)],
)
def test_an_interrupted_fresh_build_leaves_nothing_or_is_finished_by_the_next_run(locked, indexes, tmp_path, at, kill):
    """Ctrl-C (SIGINT: the handlers run) leaves no prefix; a power cut (SIGKILL: nothing runs) leaves a
    half-built prefix with its building mark, which the next run removes before building again."""
    from aipc_env.trainenv.build import building_mark

    idx, _ = indexes
    prefix = tmp_path / "new env"
    stopped = _cli_build(prefix, locked, idx, at=at, kill=kill)
    assert stopped.returncode == (-9 if kill else 130), stopped.stderr[-2000:]
    if kill:
        assert prefix.exists() and building_mark(prefix).exists()
    else:
        assert not prefix.exists() and not building_mark(prefix).exists()
    again = _cli_build(prefix, locked, idx)
    assert again.returncode == 0, again.stderr[-2000:]
    assert ("removed the half-built env" in again.stderr) == kill
    assert not building_mark(prefix).exists() and _stub(prefix, "torch_stub") == "XPU"
    check = run_cli("env", "--check", "--pair", PAIR, "--prefix", str(prefix), "--lock-root", str(locked))
    assert check.returncode == 0, check.stdout + check.stderr


@pytest.mark.parametrize(
    "at, kill",
    [
        ("env:after-snapshot", True),
        ("env:after-install", False),
        ("env:after-install", True),
        ("env:rollback-after-remove", True),
    ],
)
def test_an_interrupted_repair_is_rolled_back_then_repaired(locked, indexes, matrix, tmp_path, at, kill):
    """A repair stopped at any instant: Ctrl-C restores the snapshot at once; after a power cut the next run puts
    the snapshot back (even when the site-packages was already removed) and repairs."""
    idx, base = indexes
    prefix = tmp_path / "env"
    build_env(_request(matrix, locked, prefix, idx))
    py = str(prefix / "bin" / "python")
    subprocess.run(
        [
            find_uv(),
            "pip",
            "install",
            "--python",
            py,
            "--index-url",
            idx.pypi_url,
            "tinydep==1.0",
            "--reinstall-package",
            "tinydep",
        ],
        check=True,
        capture_output=True,
    )
    drifted = _state(prefix)
    if at == "env:rollback-after-remove":  # the rollback runs only on a failure: the repair meets a tampered wheel
        wheel = base / "pypi" / "files" / "tinydep-2.0-py3-none-any.whl"
        subprocess.run([find_uv(), "cache", "clean"], capture_output=True)
        original = _tamper(wheel)
        try:
            stopped = _cli_build(prefix, locked, idx, at=at, kill=kill)
        finally:
            wheel.write_bytes(original)
    else:
        stopped = _cli_build(prefix, locked, idx, at=at, kill=kill)
    assert stopped.returncode == (-9 if kill else 130), stopped.stderr[-2000:]
    if not kill:
        assert _state(prefix) == drifted  # rolled back at once
    again = _cli_build(prefix, locked, idx)
    assert again.returncode == 0, again.stderr[-2000:]
    assert ("restored" in again.stderr) == kill
    assert not list(prefix.glob("lib/python*/.*aipc-snapshot*"))
    assert _stub(prefix, "tinydep_stub") == "2.0"
    assert check_env(prefix, pylock_path(locked / PAIR, "linux-64"), "linux-64") == []
