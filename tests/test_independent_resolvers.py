"""The shipped locks against resolvers that are not aipc-env's closure check: pip's own (pip >= 26.3 installs a
pylock.toml; dry run) and `uv pip compile`. The PyTorch XPU index cannot be reached here: its wheels are served as
local stand-ins carrying the manifest's METADATA (tests/support/xpu_lock.py); PyPI's packages come from PyPI.

What pip 26.3 can check: its pylock support refuses --platform, --python-version, --abi and --implementation
("Platform and interpreter constraints ... are not supported when selecting requirements from 'pylock....toml'"),
so it installs a pylock only for the interpreter it runs with. Here that is this machine's CPython on Linux: the
linux-64 lock of every pair on that Python; a win-64 lock is refused by the lock's own PEP 751 `environments`.
`uv pip compile` resolves the locked pins for every Python and platform each lock lists."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from packaging.markers import Marker
from packaging.utils import canonicalize_name

from aipc_env.core.platforms import PLATFORMS, marker_environment
from aipc_env.lock.lockfile import pylock_path, read_meta
from tests.conftest import ROOT, find_tool, require_tool
from tests.support.xpu_lock import stand_in_xpu_lock

pytestmark = [pytest.mark.pypi, pytest.mark.slow]  # network-bound: pip fetches every locked wheel

LOCKS = ROOT / "lockfiles"
SHIPPED = ["xpu-2.7", "xpu-2.9", "xpu-2.10", "xpu-2.12"]
PY = f"{sys.version_info[0]}.{sys.version_info[1]}"
TARGET = {"win-64": "x86_64-pc-windows-msvc", "linux-64": "x86_64-unknown-linux-gnu"}


@pytest.fixture(scope="module")
def pip(tmp_path_factory) -> Path:
    """A venv with pip >= 26.3 (the first pip that installs pylock.toml)."""
    venv = tmp_path_factory.mktemp("pip") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    got = subprocess.run([str(python), "-m", "pip", "install", "-q", "pip>=26.3"], capture_output=True, text=True, timeout=300)
    require_tool(None if got.returncode == 0 else f"pip>=26.3 could not be installed: {got.stderr[-300:]}")
    return python


def _pip_dry_run(python: Path, lock: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(python), "-m", "pip", "install", "--dry-run", "--ignore-installed", "--disable-pip-version-check", "-r", lock.name],
        capture_output=True,
        text=True,
        cwd=lock.parent,
        timeout=600,
    )


def test_pip_installs_each_linux_lock_on_this_python(pip, tmp_path):
    """Every shipped pair whose lock covers this Python, the four pip runs side by side (network-bound)."""
    pairs = [p for p in SHIPPED if PY in read_meta(LOCKS / p).pythons]
    assert pairs, f"no shipped lock covers this machine's Python {PY}"
    locks = [stand_in_xpu_lock(pylock_path(LOCKS / p, "linux-64"), "linux-64", tmp_path / p) for p in pairs]
    with ThreadPoolExecutor(len(locks)) as pool:
        results = list(pool.map(lambda lock: _pip_dry_run(pip, lock), locks))
    for pair, result in zip(pairs, results, strict=True):
        assert result.returncode == 0, (pair, result.stderr[-3000:])
        assert f"torch-{read_meta(LOCKS / pair).torch}+xpu" in result.stdout.split("Would install", 1)[1], pair


def test_pip_refuses_a_lock_for_another_platform(pip, tmp_path):
    lock = stand_in_xpu_lock(pylock_path(LOCKS / "xpu-2.12", "win-64"), "win-64", tmp_path / "xpu")
    result = _pip_dry_run(pip, lock)
    assert result.returncode != 0
    assert "Provided environment does not satisfy any of the environments specified in the lock file" in result.stderr


def test_pip_finds_a_dependency_the_lock_lacks(pip, tmp_path):
    """The same lock without setuptools: torch 2.12.0+xpu's setuptools<82 (from the stand-in's METADATA) is
    unpinned, which pip refuses in hash-checking mode."""
    lock = stand_in_xpu_lock(pylock_path(LOCKS / "xpu-2.12", "linux-64"), "linux-64", tmp_path / "xpu")
    raw = lock.read_text(encoding="utf-8")
    start = raw.index('[[packages]]\nname = "setuptools"')
    lock.write_text(raw[:start] + raw[raw.index("[[packages]]", start + 1) :], encoding="utf-8")
    result = _pip_dry_run(pip, lock)
    assert result.returncode != 0
    assert "setuptools<82" in result.stderr and "torch==2.12.0+xpu" in result.stderr


def _uv_compile(
    lockfile: Path, links: Path, platform: str, python: str, tmp_path: Path, change=lambda reqs: reqs
) -> tuple[subprocess.CompletedProcess, dict[str, str], dict[str, str]]:
    """Compile the lock's pins that apply to (platform, python); returns the result, what it resolved and what the
    lock has there (canonical name -> version)."""
    uv = find_tool("uv")
    require_tool(None if uv else "uv is not installed")
    packages = tomllib.loads(lockfile.read_text(encoding="utf-8"))["packages"]
    env = marker_environment(platform, python)
    applying = {
        canonicalize_name(p["name"]): p["version"] for p in packages if not p.get("marker") or Marker(p["marker"]).evaluate(env)
    }
    reqs = tmp_path / "locked.in"
    reqs.write_text("\n".join(change([f"{n}=={v}" for n, v in applying.items()])) + "\n", encoding="utf-8")
    result = subprocess.run(
        [
            uv,
            "pip",
            "compile",
            str(reqs),
            "--python-version",
            python,
            "--python-platform",
            TARGET[platform],
            "--find-links",
            str(links),
            "--only-binary",
            ":all:",
            # wheels only, so nothing is built: no interpreter of that Python is needed, and uv would otherwise try
            # to download one for builds (unreachable here: ~10 s of retries per compile, 87-132 s a test in CI)
            "--no-python-downloads",
            "--no-header",
            "--no-annotate",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    resolved = dict(line.split("==", 1) for line in result.stdout.splitlines() if "==" in line)
    return result, {canonicalize_name(n): v.split(";")[0].strip() for n, v in resolved.items()}, applying


@pytest.mark.parametrize("pair", SHIPPED)
def test_uv_compiles_each_lock_to_itself_on_every_python_and_platform(pair, tmp_path):
    """uv resolves the locked pins with the packages' real metadata (PyPI) and the stand-ins' (manifest): nothing
    conflicts and nothing is missing (it adds no package the lock lacks); each Python and platform side by side."""
    cases = [(platform, python) for platform in PLATFORMS for python in read_meta(LOCKS / pair).pythons]
    links = {
        platform: stand_in_xpu_lock(pylock_path(LOCKS / pair, platform), platform, tmp_path / platform).parent
        for platform in PLATFORMS
    }

    def compile_one(case):
        platform, python = case
        work = tmp_path / f"{platform}-{python}"
        work.mkdir()
        return _uv_compile(pylock_path(LOCKS / pair, platform), links[platform], platform, python, work)

    with ThreadPoolExecutor(len(cases)) as pool:
        for case, (result, resolved, applying) in zip(cases, pool.map(compile_one, cases), strict=True):
            assert result.returncode == 0, (case, result.stderr[-3000:])
            assert resolved == applying, case


def test_uv_refuses_the_setuptools_xpu_2_12_pinned_before(tmp_path):
    lockfile = pylock_path(LOCKS / "xpu-2.12", "win-64")
    links = stand_in_xpu_lock(lockfile, "win-64", tmp_path / "xpu").parent
    result, _, _ = _uv_compile(
        lockfile,
        links,
        "win-64",
        "3.12",
        tmp_path,
        change=lambda reqs: [r.replace("setuptools==81.0.0", "setuptools==84.2.1") for r in reqs],
    )
    assert result.returncode != 0
    assert "torch==2.12.0+xpu depends on setuptools<82" in result.stderr
