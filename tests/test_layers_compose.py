"""The pip layer installs into a prefix laid out as conda leaves it without removing or replacing what conda owns:
conda-meta/*.json records (written by py-rattler, conda's own record format) of python, pip, setuptools and wheel,
their dist-info with INSTALLER "conda" (PyPI's wheels of the conda layer's releases: pip 24.2, setuptools 72.2.0,
wheel 0.44.0). The install runs for real (uv, as the build runs it) from a pylock compiled from PyPI."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aipc_env.errors import AipcError
from aipc_env.lock.tools import find_uv, uv_install_argv
from aipc_env.trainenv.build import install_pip_layer
from aipc_env.trainenv.layers import conda_owned

CONDA = {"pip": "24.2", "setuptools": "72.2.0", "wheel": "0.44.0"}
"""The shipped conda layer's (lockfiles/*/conda-lock.yml)."""


PY = f"{sys.version_info[0]}.{sys.version_info[1]}"


def _site(prefix: Path) -> Path:
    (site,) = prefix.glob("lib/python3.*/site-packages")
    return site


def _conda_record(prefix: Path, name: str, version: str, build: str, files: list[str]) -> None:
    from rattler import BuildString, PackageRecord, PrefixPaths, PrefixRecord, RepoDataRecord

    package = PackageRecord(name, version, BuildString(build), 0, "noarch" if name != "python" else "linux-64")
    file_name = f"{name}-{version}-{build}.conda"
    repodata = RepoDataRecord(
        package,
        file_name,
        f"https://conda.anaconda.org/conda-forge/noarch/{file_name}",
        "https://conda.anaconda.org/conda-forge/",
    )
    record = PrefixRecord(repodata, PrefixPaths(), files=[Path(f) for f in files])
    (prefix / "conda-meta").mkdir(exist_ok=True)
    record.write_to_path(prefix / "conda-meta" / f"{name}-{version}-{build}.json", pretty=True)


def _conda_prefix(folder: Path) -> Path:
    """A prefix as conda leaves it: the interpreter, conda's pip, setuptools and wheel with their records."""
    uv = find_uv()
    prefix = folder / "conda env (x86) ü"
    subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(prefix)], check=True)
    python = prefix / "bin" / "python"
    subprocess.run([uv, "pip", "install", "-q", "--python", str(python), *(f"{n}=={v}" for n, v in CONDA.items())], check=True)
    site = _site(prefix)
    rel = site.relative_to(prefix).as_posix()
    _conda_record(prefix, "python", f"{PY}.0", "h2ad013b_0_cpython", [f"bin/python{PY}"])
    for name, version in CONDA.items():
        (info,) = site.glob(f"{name}-{version}.dist-info")
        (info / "INSTALLER").write_text("conda\n", encoding="utf-8")
        files = [f"{rel}/{line.split(',')[0]}" for line in (info / "RECORD").read_text(encoding="utf-8").splitlines() if line]
        _conda_record(prefix, name, version, "pyhd8ed1ab_0", files)
    return prefix


def _fingerprint(prefix: Path) -> dict[str, str]:
    """Every file conda's records list, with its sha256 (missing: 'gone'), and the records themselves."""
    from rattler import PrefixRecord

    out = {}
    for record_path in sorted((prefix / "conda-meta").glob("*.json")):
        out[record_path.name] = hashlib.sha256(record_path.read_bytes()).hexdigest()
        for f in PrefixRecord.from_path(record_path).files:
            path = prefix / f
            out[str(f)] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "gone"
    return out


@pytest.fixture(scope="module")
def pylock(tmp_path_factory) -> Path:
    """A real pylock from PyPI for Linux and this CPython with setuptools at conda's version, and its core metadata
    recorded the way `aipc-env lock` records it (for this interpreter)."""
    from aipc_env.lock.requires import IndexReader, record_metadata

    folder = tmp_path_factory.mktemp("lock")
    (folder / "req.in").write_text("six==1.17.0\nsetuptools==72.2.0\n", encoding="utf-8")
    out = folder / "pylock.toml"
    subprocess.run(
        [
            find_uv(),
            "pip",
            "compile",
            "-q",
            str(folder / "req.in"),
            "--format",
            "pylock.toml",
            "-o",
            str(out),
            "--python-version",
            PY,
            "--python-platform",
            "linux",
            "--no-header",
        ],
        check=True,
    )
    data = tomllib.loads(out.read_text(encoding="utf-8"))
    for pkg in data["packages"]:
        pkg.setdefault("tool", {})["aipc-env"] = {"provenance": "index", "index": "https://pypi.org/simple"}
    assert record_metadata(data, {"https://pypi.org/simple": IndexReader("https://pypi.org/simple")}) == []
    out.write_text(tomli_w.dumps(data), encoding="utf-8")
    return out


@pytest.mark.pypi
def test_the_plain_exact_sync_would_remove_condas_pip_and_wheel(tmp_path, pylock):
    """Why the pip layer needs the guard: uv's exact sync of the lock, on the same prefix, removes conda's files."""
    prefix = _conda_prefix(tmp_path)
    argv = uv_install_argv(find_uv(), prefix / "bin" / "python", pylock) + ["--dry-run"]
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    assert "Would uninstall 2 packages" in done.stderr and " - pip==24.2" in done.stderr and " - wheel==0.44.0" in done.stderr


@pytest.mark.pypi
def test_the_pip_layer_leaves_everything_conda_owns(tmp_path, pylock):
    prefix = _conda_prefix(tmp_path)
    python = prefix / "bin" / "python"
    subprocess.run([find_uv(), "pip", "install", "-q", "--python", str(python), "idna==3.10"], check=True)  # a stray
    before = _fingerprint(prefix)
    assert set(conda_owned(prefix)) == {"pip", "setuptools", "wheel"}
    log = tmp_path / "env.log"
    owned = install_pip_layer(prefix, python, pylock, "linux-64", PY, log, [])
    assert set(owned) == {"pip", "setuptools", "wheel"}
    assert _fingerprint(prefix) == before  # every conda file and record as it was
    site = _site(prefix)
    for name, version in CONDA.items():
        assert (site / f"{name}-{version}.dist-info" / "INSTALLER").read_text(encoding="utf-8") == "conda\n"
    assert list(site.glob("six-1.17.0.dist-info")) and not list(site.glob("idna-*.dist-info"))  # installed, removed
    assert subprocess.run([str(python), "-m", "pip", "--version"], capture_output=True, text=True).stdout.startswith("pip 24.2")


@pytest.mark.pypi
def test_a_lock_that_needs_another_version_of_condas_setuptools_stops_before_installing(tmp_path, pylock):
    prefix = _conda_prefix(tmp_path)
    data = tomllib.loads(pylock.read_text(encoding="utf-8"))
    for pkg in data["packages"]:
        if pkg["name"] == "six":
            pkg["tool"]["aipc-env"]["requires-dist"] = ["setuptools>=77.0.3"]  # as torch 2.13+ does
        if pkg["name"] == "setuptools":
            pkg["version"] = "81.0.0"
    clash = tmp_path / "pylock.toml"
    clash.write_text(tomli_w.dumps(data), encoding="utf-8")
    before = _fingerprint(prefix)
    with pytest.raises(AipcError) as caught:
        install_pip_layer(prefix, prefix / "bin" / "python", clash, "linux-64", PY, tmp_path / "env.log", [])
    assert "setuptools: conda has 72.2.0 (setuptools-72.2.0-pyhd8ed1ab_0), the lock 81.0.0" in caught.value.message
    assert "requires setuptools>=77.0.3" in caught.value.message
    assert _fingerprint(prefix) == before and not list(_site(prefix).glob("six-*"))


def test_a_prefix_without_conda_records_owns_nothing(tmp_path):
    assert conda_owned(tmp_path) == {}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(st.text(max_size=300), st.binary(max_size=300).map(lambda b: b.decode("latin-1"))))
def test_a_hostile_conda_record_is_a_named_error(tmp_path, text):
    meta = tmp_path / "conda-meta"
    shutil.rmtree(meta, ignore_errors=True)
    meta.mkdir()
    (meta / "x-1-0.json").write_text(text, encoding="utf-8", errors="surrogateescape")
    try:
        owned = conda_owned(tmp_path)
    except AipcError as exc:
        assert "x-1-0.json" in exc.message
    else:
        assert isinstance(owned, dict)


def test_a_truncated_record_names_its_file(tmp_path):
    (tmp_path / "conda-meta").mkdir()
    (tmp_path / "conda-meta" / "pip-24.2-pyhd8ed1ab_0.json").write_text('{"name": "pip", "version": ', encoding="utf-8")
    with pytest.raises(AipcError) as caught:
        conda_owned(tmp_path)
    assert "pip-24.2-pyhd8ed1ab_0.json cannot be read" in caught.value.message
