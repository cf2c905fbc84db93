"""The conda layer of the shipped locks (lockfiles/<pair>/conda-lock.yml): assembled from a public pixi.lock, read
back by conda-lock's own parser and renderer, closed under `depends` by conda's MatchSpec, every package with its
source; and the rules that use it (which Python it covers, the interpreter drift `env --check` reports). Reads and
checks the files only: nothing is downloaded."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from aipc_env.core.formats import load_versioned
from aipc_env.lock.check import check_pair_lock
from aipc_env.lock.conda_layer import (
    CondaSources,
    RecordSource,
    closure_problems,
    conda_layer_python,
    interpreter_drift,
    layer_for,
    read_conda_lock,
    source_problems,
)
from aipc_env.matrix import load_matrix
from tests.conftest import ROOT, require_tool
from tests.support.scripts import load_script

assemble = load_script("assemble_conda_layer").assemble

PAIRS = sorted(p.name for p in (ROOT / "lockfiles").iterdir() if p.is_dir())
# What the public record shows (prefix-dev/pixi examples/polarify/pixi.lock at this commit, environment py312)
COMMIT = "2b25fc76dd3b5cc50a235387d948474975c40d73"
PYTHON_WIN = (
    "https://conda.anaconda.org/conda-forge/win-64/python-3.12.5-h889d299_0_cpython.conda",
    "4cef304eb8877fd3094c14b57097ccc1b817b4afbf2223dd45d2b61e44064740",
    "db056d8b140ab2edd56a2f9bdb203dcd",
)
PIP = (
    "https://conda.anaconda.org/conda-forge/noarch/pip-24.2-pyhd8ed1ab_0.conda",
    "15b480571a7a4d896aa187648cce99f98bac3926253f028f228d2e9e1cf7c1e1",
    "6721aef6bfe5937abe70181545dd2c51",
)


def test_every_shipped_pair_has_a_conda_layer_for_both_platforms():
    assert PAIRS == ["xpu-2.10", "xpu-2.12", "xpu-2.7", "xpu-2.9"]
    for pair in PAIRS:
        lock = read_conda_lock(ROOT / "lockfiles" / pair / "conda-lock.yml")
        assert lock.metadata.platforms == ["win-64", "linux-64"]
        for platform in ("win-64", "linux-64"):
            assert {"python", "pip"} <= {p.name for p in lock.of(platform)}
            assert conda_layer_python(ROOT / "lockfiles" / pair, platform) == "3.12.5"


def test_conda_locks_own_parser_reads_them_back():
    from conda_lock.lockfile import parse_conda_lock_file

    for pair in PAIRS:
        parsed = parse_conda_lock_file(ROOT / "lockfiles" / pair / "conda-lock.yml")
        by_key = {(p.platform, p.name): p for p in parsed.package}
        python = by_key[("win-64", "python")]
        assert (python.url, python.hash.sha256, python.hash.md5) == PYTHON_WIN
        pip = by_key[("linux-64", "pip")]
        assert (pip.url, pip.hash.sha256, pip.hash.md5) == PIP
        assert len([p for p in parsed.package if p.platform == "win-64"]) == 18
        assert len([p for p in parsed.package if p.platform == "linux-64"]) == 25


def test_conda_lock_renders_the_explicit_file_the_env_build_installs(tmp_path):
    conda_lock = shutil.which("conda-lock") or str(Path(sys.executable).parent / "conda-lock")
    require_tool(None if Path(conda_lock).exists() else "conda-lock is not installed (pip install -e .[lock])")
    from aipc_env.lock.tools import conda_render_argv

    source = ROOT / "lockfiles" / "xpu-2.12" / "conda-lock.yml"
    lock = read_conda_lock(source)
    for platform in ("win-64", "linux-64"):
        subprocess.run(conda_render_argv(conda_lock, source, platform, tmp_path), check=True, capture_output=True, timeout=120)
        lines = (tmp_path / f"conda-{platform}.explicit.txt").read_text().splitlines()
        assert "@EXPLICIT" in lines
        listed = {ln for ln in lines if ln.startswith("https://")}
        assert listed == {f"{p.url}#{p.hash.md5}" for p in lock.of(platform)}
    assert f"{PYTHON_WIN[0]}#{PYTHON_WIN[2]}" in (tmp_path / "conda-win-64.explicit.txt").read_text()


def test_shipped_layers_are_closed_and_sourced():
    for pair in PAIRS:
        folder = ROOT / "lockfiles" / pair
        lock = read_conda_lock(folder / "conda-lock.yml")
        sources = load_versioned(CondaSources, folder / "conda-sources.json")
        assert closure_problems(lock) == [] and source_problems(lock, sources) == []
        (key,) = sources.sources
        record = sources.sources[key]
        assert (record.repository, record.path, record.commit, record.environment) == (
            "prefix-dev/pixi",
            "examples/polarify/pixi.lock",
            COMMIT,
            "py312",
        )
        assert check_pair_lock(folder, load_matrix()) == []


def _doc(pair: str = "xpu-2.12") -> dict:
    return yaml.safe_load((ROOT / "lockfiles" / pair / "conda-lock.yml").read_text())


def _lock(doc: dict):
    from aipc_env.lock.conda_layer import CondaLock

    return CondaLock.model_validate(doc)


def _drop(doc: dict, platform: str, name: str) -> dict:
    doc["package"] = [p for p in doc["package"] if not (p["platform"] == platform and p["name"] == name)]
    return doc


def _set(doc: dict, on: str, name: str, **changes) -> dict:
    for p in doc["package"]:
        if p["platform"] == on and p["name"] == name:
            p.update(changes)
    return doc


def test_closure_names_each_unsatisfied_dependency():
    assert closure_problems(_lock(_drop(_doc(), "win-64", "libzlib"))) == [
        "win-64: python 3.12.5 depends on libzlib >=1.3.1,<2.0a0: not in the lock"
    ]
    old_zlib = "https://conda.anaconda.org/conda-forge/win-64/libzlib-1.2.13-hcfcfb64_5.conda"
    assert closure_problems(_lock(_set(_doc(), "win-64", "libzlib", version="1.2.13", url=old_zlib))) == [
        "win-64: python 3.12.5 depends on libzlib >=1.3.1,<2.0a0: the lock has 1.2.13 (hcfcfb64_5)"
    ]
    # the boundary: the lowest release the spec allows is accepted
    at_floor = "https://conda.anaconda.org/conda-forge/win-64/libzlib-1.3.1-h2466b09_1.conda"
    assert closure_problems(_lock(_set(_doc(), "win-64", "libzlib", version="1.3.1", url=at_floor))) == []
    no_pip = _drop(_doc(), "linux-64", "pip")
    assert closure_problems(_lock(no_pip)) == ["linux-64: no pip"]
    twice = _doc()
    twice["package"].append(next(p for p in twice["package"] if p["name"] == "tzdata"))
    assert closure_problems(_lock(twice)) == ["linux-64: tzdata appears 2 times"]
    one = _doc()
    one["metadata"]["platforms"] = ["linux-64"]
    one["package"] = [p for p in one["package"] if p["platform"] == "linux-64"]
    assert closure_problems(_lock(one)) == ["no conda layer for win-64"]


def test_sources_must_match_the_lock():
    lock = read_conda_lock(ROOT / "lockfiles" / "xpu-2.12" / "conda-lock.yml")
    sources = load_versioned(CondaSources, ROOT / "lockfiles" / "xpu-2.12" / "conda-sources.json")
    tampered = _lock(_set(_doc(), "win-64", "pip", hash={"md5": "0" * 32, "sha256": "0" * 64}))
    assert source_problems(tampered, sources) == [f"win-64: pip 24.2: sha256 {'0' * 64} in the lock, {PIP[1]} where it was read"]
    fewer = sources.model_copy(update={"packages": [s for s in sources.packages if s.name != "tk"]})
    assert source_problems(lock, fewer) == [
        "linux-64: tk 8.6.13: no source recorded for https://conda.anaconda.org/conda-forge/linux-64/"
        "tk-8.6.13-noxft_h4845f30_101.conda",
        "win-64: tk 8.6.13: no source recorded for https://conda.anaconda.org/conda-forge/win-64/tk-8.6.13-h5226925_1.conda",
    ]
    fewer_pkgs = _lock(_drop(_doc(), "win-64", "tk"))
    assert source_problems(fewer_pkgs, sources) == [
        "win-64: https://conda.anaconda.org/conda-forge/win-64/tk-8.6.13-h5226925_1.conda: a source for a package "
        "the lock does not hold"
    ]
    other = sources.model_copy(update={"python": "3.12.6"})
    assert source_problems(lock, other) == [
        "win-64: python 3.12.5 in the lock, 3.12.6 in conda-sources.json",
        "linux-64: python 3.12.5 in the lock, 3.12.6 in conda-sources.json",
    ]


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (lambda d: _set(d, "win-64", "pip", url="https://example.org/pip-24.2-pyhd8ed1ab_0.conda"), "conda-forge"),
        (lambda d: _set(d, "win-64", "pip", hash={"sha256": PIP[1]}), "md5"),
        (lambda d: _set(d, "win-64", "pip", platform="osx-arm64"), "platform"),
        (lambda d: _set(d, "win-64", "pip", manager="pip"), "manager"),
        (lambda d: _set(d, "win-64", "pip", optional=True), "optional"),
    ],
)
def test_a_malformed_conda_layer_is_a_named_input_error(tmp_path, change, named):
    from aipc_env.errors import InputError

    path = tmp_path / "conda-lock.yml"
    path.write_text(yaml.safe_dump(change(_doc())))
    with pytest.raises(InputError) as err:
        read_conda_lock(path)
    assert named in err.value.render() and str(path) in err.value.render()


def test_lock_check_fails_on_a_tampered_copy(tmp_path):
    folder = tmp_path / "xpu-2.12"
    shutil.copytree(ROOT / "lockfiles" / "xpu-2.12", folder)
    matrix = load_matrix()
    assert check_pair_lock(folder, matrix) == []
    (folder / "conda-lock.yml").write_text(yaml.safe_dump(_drop(_doc(), "linux-64", "openssl")))
    problems = check_pair_lock(folder, matrix)
    assert f"{folder / 'conda-lock.yml'}: linux-64: python 3.12.5 depends on openssl >=3.3.1,<4.0a0: not in the lock" in problems
    assert any("a source for a package the lock does not hold" in p for p in problems)


def test_lock_check_holds_lock_meta_to_the_layer(tmp_path):
    import json

    folder = tmp_path / "xpu-2.12"
    shutil.copytree(ROOT / "lockfiles" / "xpu-2.12", folder)
    meta = json.loads((folder / "lock-meta.json").read_text())
    meta["conda_layer"]["python"] = "3.12.4"
    (folder / "lock-meta.json").write_text(json.dumps(meta))
    assert check_pair_lock(folder, load_matrix()) == [
        f"{folder / 'conda-lock.yml'}: python 3.12.5, but lock-meta.json's conda_layer says 3.12.4"
    ]


def test_which_python_the_layer_covers(tmp_path):
    folder = ROOT / "lockfiles" / "xpu-2.12"
    assert layer_for(folder, "win-64", "3.12") == (
        folder / "conda-lock.yml",
        f"interpreter: Python 3.12.5 from the conda layer {folder / 'conda-lock.yml'}",
    )
    path, why = layer_for(folder, "linux-64", "3.13")
    assert path is None and why == (
        "the conda layer holds Python 3.12.5 for linux-64, not 3.13: the interpreter "
        "comes from `conda create python=3.13` (unpinned)"
    )
    path, why = layer_for(tmp_path, "win-64", "3.12")
    assert path is None and "no conda layer" in why and "conda create python=3.12" in why


@pytest.mark.parametrize(
    ("installed", "drift"),
    [("3.12.5", None), ("3.12.12", ("3.12.5", "3.12.12")), ("3.12.4", ("3.12.5", "3.12.4")), ("3.13.1", None), ("3.11.9", None)],
)
def test_interpreter_drift(installed, drift):
    assert interpreter_drift(ROOT / "lockfiles" / "xpu-2.12", "win-64", installed) == drift


def test_assemble_from_a_pixi_lock_refuses_a_missing_root():
    pixi = {
        "version": 6,
        "environments": {"e": {"packages": {"win-64": [{"conda": PYTHON_WIN[0]}], "linux-64": []}}},
        "packages": [{"conda": PYTHON_WIN[0], "sha256": PYTHON_WIN[1], "md5": PYTHON_WIN[2], "depends": []}],
    }
    from aipc_env.errors import InputError

    with pytest.raises(InputError, match="environment e has no pip for win-64"):
        assemble(pixi, "e", "k", RecordSource(repository="o/r", path="pixi.lock", commit=COMMIT))


def test_the_assembler_rebuilds_a_shipped_layer_from_its_records(tmp_path):
    """scripts/assemble_conda_layer.py, run as documented on a pixi.lock holding the shipped layer's records (and
    one package outside the closure), writes the shipped conda-lock.yml's packages and conda-sources.json again."""
    import os

    folder = ROOT / "lockfiles" / "xpu-2.12"
    shipped = _doc()
    records, env = [], {}
    for pkg in shipped["package"]:
        depends = [f"{n} {s}" if s != "*" else n for n, s in pkg["dependencies"].items()]
        records.append({"conda": pkg["url"], "version": pkg["version"], "depends": depends, **pkg["hash"]})
        env.setdefault(pkg["platform"], []).append({"conda": pkg["url"]})
    extra = "https://conda.anaconda.org/conda-forge/noarch/six-1.16.0-pyh6c4a22f_0.conda"
    records.append({"conda": extra, "sha256": "0" * 64, "md5": "0" * 32, "depends": []})
    env["win-64"].append({"conda": extra})
    sources = load_versioned(CondaSources, folder / "conda-sources.json")
    (record,) = sources.sources.values()
    pixi = tmp_path / "pixi.lock"
    pixi.write_text(yaml.safe_dump({"version": 6, "environments": {record.environment: {"packages": env}}, "packages": records}))
    out = tmp_path / "out dir"
    out.mkdir()
    args = [str(pixi), record.repository, record.path, record.commit, record.environment, str(out)]
    pythonpath = os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "assemble_conda_layer.py"), *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": pythonpath},
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    written = yaml.safe_load((out / "conda-lock.yml").read_text())
    assert written["package"] == shipped["package"] and written["metadata"] == shipped["metadata"]
    assert load_versioned(CondaSources, out / "conda-sources.json") == sources


def test_a_bundle_carries_the_layers_packages_only_for_its_python(tmp_path, monkeypatch):
    import aipc_env.fleet.bundle as bundle

    fetched: list = []
    monkeypatch.setattr(bundle, "fill_wheelhouse", lambda artifacts, out, **kw: fetched.extend(artifacts) or [out])
    said: list[str] = []
    folder = ROOT / "lockfiles" / "xpu-2.12"
    assert bundle._conda_packages(folder, "win-64", tmp_path / "c", tmp_path / "cache", "3.11", said.append) == []
    assert fetched == [] and said == [
        "no conda packages: the conda layer holds Python 3.12.5 for win-64, not 3.11: "
        "the interpreter comes from `conda create python=3.11` (unpinned)"
    ]
    assert bundle._conda_packages(folder, "win-64", tmp_path / "c", tmp_path / "cache", "3.12", said.append)
    assert len(fetched) == 18 and (PYTHON_WIN[0], PYTHON_WIN[1]) in {(a.url, a.sha256) for a in fetched}


@pytest.mark.parametrize("python", ["3.12", "3.13"])
def test_a_relock_that_cannot_reach_the_channels_carries_the_layer_over(tmp_path, monkeypatch, python):
    import json

    import aipc_env.lock.lock as lock

    monkeypatch.setattr(lock, "reachable", lambda url: False)  # the channels, as on the machine that made them
    monkeypatch.setattr(lock.shutil, "which", lambda name: "/bin/conda-lock")
    folder = ROOT / "lockfiles" / "xpu-2.12"
    work = tmp_path / "work"
    work.mkdir()
    said: list[str] = []
    status = lock._conda_layer(
        load_matrix().get("xpu-2.12"),
        python,
        work,
        ["win-64", "linux-64"],
        tmp_path / "log",
        {},
        said.append,
        folder,
        ["3.11", "3.12", "3.13"],
    )
    if python == "3.12":
        assert status == json.loads((folder / "lock-meta.json").read_text())["conda_layer"]
        assert (work / "conda-lock.yml").read_bytes() == (folder / "conda-lock.yml").read_bytes()
        assert (work / "conda-sources.json").read_bytes() == (folder / "conda-sources.json").read_bytes()
    else:  # the layer holds 3.12: nothing is carried, and lock-meta.json says why
        assert status["status"] == "unavailable" and not (work / "conda-lock.yml").exists()


def test_without_conda_lock_the_closure_is_a_note_not_a_crash(tmp_path, monkeypatch):
    """A plain install (no `lock` extra) has no conda MatchSpec: lock check still checks everything else, and says
    the closure was not checked; with conda-lock the same broken layer is a problem."""
    from aipc_env.lock import condaspec
    from aipc_env.lock.lockfile import LockMeta, lock_notes

    folder = tmp_path / "xpu-2.12"
    shutil.copytree(ROOT / "lockfiles" / "xpu-2.12", folder)
    (folder / "conda-lock.yml").write_text(yaml.safe_dump(_drop(_doc(), "linux-64", "openssl")))
    meta = load_versioned(LockMeta, folder / "lock-meta.json")
    assert any("not in the lock" in p for p in check_pair_lock(folder, load_matrix()))
    assert condaspec.CLOSURE_UNCHECKED not in lock_notes(meta)
    monkeypatch.setattr(condaspec, "can_check_closure", lambda: False)
    problems = check_pair_lock(folder, load_matrix())
    assert not any("not in the lock" in p for p in problems)
    assert any("a source for a package the lock does not hold" in p for p in problems)  # sources still checked
    assert condaspec.CLOSURE_UNCHECKED in lock_notes(meta)
