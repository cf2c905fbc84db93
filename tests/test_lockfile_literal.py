"""Lockfile reading and `lock check`, in process, one tamper per case with the whole answer as a literal: every
problem check_pylock, check_public_artifacts and check_pair_lock can name, the notes of a clean lock, and the
refusals of read_pylock and the conda-lock reader. The input is the shipped xpu-2.10 lock, changed one field at a
time; the expected texts are written out by hand."""

from __future__ import annotations

import copy
import json
import shutil
import tomllib
from pathlib import Path

import pytest
import yaml

from aipc_env.errors import InputError
from aipc_env.lock.check import check_pair_lock
from aipc_env.lock.lockfile import (
    LockMeta,
    Pylock,
    PylockPackage,
    available_locks,
    check_public_artifacts,
    check_pylock,
    conda_lock_platforms,
    lock_notes,
    provenance_of,
    read_meta,
    read_pylock,
)
from aipc_env.lock.wheels import load_wheel_manifest
from tests.conftest import ROOT

LOCK = ROOT / "lockfiles" / "xpu-2.10"
LINUX = LOCK / "pylock.linux-64.toml"
P = "pylock.linux-64.toml"


@pytest.fixture(scope="module")
def raw_linux() -> dict:
    raw = tomllib.loads(LINUX.read_text())
    raw["lock_version"] = raw.pop("lock-version")
    return raw


def _lock(raw: dict, change=None) -> Pylock:
    raw = copy.deepcopy(raw)
    if change:
        change(raw["packages"])
    return Pylock.model_validate(raw)


def _pkg(packages: list[dict], name: str) -> dict:
    return next(p for p in packages if p["name"] == name)


def _drop(name):
    return lambda packages: packages.remove(_pkg(packages, name))


def _set(name, key, value):
    return lambda packages: _pkg(packages, name).__setitem__(key, value)


def _no_artifact(name):
    def change(packages):
        _pkg(packages, name)["wheels"] = []
        _pkg(packages, name).pop("sdist", None)

    return change


def _first_wheel(name, **changes):
    def change(packages):
        wheel = _pkg(packages, name)["wheels"][0]
        for key, value in changes.items():
            if key == "sha256":
                wheel["hashes"] = {} if value is None else {"sha256": value}
            else:
                wheel[key] = value

    return change


def _add(name, version):
    return lambda packages: packages.append(
        {
            "name": name,
            "version": version,
            "wheels": [{"url": f"https://example.org/{name}-{version}-py3-none-any.whl", "hashes": {"sha256": "ab" * 32}}],
        }
    )


@pytest.mark.parametrize(
    ("change", "problems"),
    [
        (None, []),
        (_drop("torch"), ["torch is missing, xpu-2.10 needs 2.10.0+xpu"]),
        (_set("torch", "version", "2.10.0"), ["torch is 2.10.0, xpu-2.10 needs 2.10.0+xpu"]),
        (_set("torch", "version", "2.10.1+xpu"), ["torch is 2.10.1+xpu, xpu-2.10 needs 2.10.0+xpu"]),
        (_drop("tbb"), ["tbb missing (xpu-2.10 pins 2022.3.0)"]),
        (_set("tbb", "version", "2022.2.0"), ["tbb is 2022.2.0, xpu-2.10 pins 2022.3.0"]),
        (_set("intel-sycl-rt", "version", "2025.3.2"), ["intel-sycl-rt is 2025.3.2, xpu-2.10 pins 2025.3.1"]),
        (_drop("triton-xpu"), ["Triton packages none; exactly triton-xpu expected"]),
        (_set("triton-xpu", "version", "3.5.0"), ["triton-xpu is 3.5.0, expected 3.6.0"]),
        (
            _add("pytorch-triton-xpu", "3.6.0"),
            ["Triton packages ['pytorch-triton-xpu', 'triton-xpu']; exactly triton-xpu expected"],
        ),
        (_no_artifact("numpy"), ["numpy: no artifact"]),
        (
            _first_wheel("numpy", sha256=None, url="https://files.pythonhosted.org/numpy.whl"),
            ["numpy: artifact https://files.pythonhosted.org/numpy.whl has no sha256"],
        ),
        (
            _first_wheel("numpy", url="https://evil.example/simple/numpy.whl"),  # hashed against PyPI, served elsewhere
            [
                "numpy 2.4.6: artifact 'https://evil.example/simple/numpy.whl' is not on the index the lock says it was "
                "hashed against (https://pypi.org/simple): another host or scheme"
            ],
        ),
        (
            _first_wheel("numpy", url="http://files.pythonhosted.org/numpy.whl"),  # the right host, without TLS
            [
                "numpy 2.4.6: artifact 'http://files.pythonhosted.org/numpy.whl' is not on the index the lock says it was "
                "hashed against (https://pypi.org/simple): another host or scheme"
            ],
        ),
        (_first_wheel("numpy", url="https://pypi.org/packages/numpy.whl"), []),  # the index's own host: fine
        (
            _first_wheel("numpy", sha256=None, url=None, path="wheels/numpy.whl"),
            ["numpy: artifact wheels/numpy.whl has no sha256"],
        ),
        (
            _first_wheel("numpy", sha256="AB" * 32),
            [f"numpy: sha256 {'AB' * 32!r} is not a sha256 digest (64 lowercase hex digits)"],
        ),
        (
            _first_wheel("numpy", sha256="0" * 64),
            [f"numpy: sha256 {'0' * 64!r} is not a sha256 digest (64 lowercase hex digits)"],
        ),
        (
            _first_wheel("numpy", sha256="ab" * 32 + "c"),
            [f"numpy: sha256 {'ab' * 32 + 'c'!r} is not a sha256 digest (64 lowercase hex digits)"],
        ),
        (
            _first_wheel("numpy", sha256="f" * 100),
            [f"numpy: sha256 {'f' * 70!r} is not a sha256 digest (64 lowercase hex digits)"],
        ),
    ],
    ids=lambda v: "" if callable(v) or isinstance(v, list) else str(v),
)
def test_each_problem_of_one_platform(raw_linux, matrix, change, problems):
    lock = _lock(raw_linux, change)
    assert check_pylock(lock, Path(P), matrix.get("xpu-2.10"), "linux-64") == [f"{P}: {p}" for p in problems]


def test_a_pair_naming_two_torch_releases_accepts_either_and_names_both(raw_linux, matrix):
    pair = matrix.get("xpu-2.10").model_copy(update={"torch": ["2.10.0", "2.10.1"]})
    assert check_pylock(_lock(raw_linux), Path(P), pair, "linux-64") == []
    wrong = _lock(raw_linux, _set("torch", "version", "2.9.1+xpu"))
    assert check_pylock(wrong, Path(P), pair, "linux-64") == [f"{P}: torch is 2.9.1+xpu, xpu-2.10 needs 2.10.0+xpu or 2.10.1+xpu"]


def test_triton_where_the_pair_ships_none(raw_linux, matrix):
    pair = matrix.get("xpu-2.10")
    linux_only = pair.model_copy(update={"triton": pair.triton.model_copy(update={"marker": "platform_system == 'Linux'"})})
    win = read_pylock(LOCK / "pylock.win-64.toml")
    assert check_pylock(win, Path("w.toml"), linux_only, "win-64") == [
        "w.toml: triton-xpu present but xpu-2.10 ships no Triton on win-64"
    ]
    assert check_pylock(_lock(raw_linux), Path(P), linux_only, "linux-64") == []


@pytest.mark.parametrize("change", ["sha", "url", "name", "no-name"])
def test_public_artifacts_against_the_manifest(raw_linux, change):
    manifest = load_wheel_manifest()
    lock = _lock(raw_linux)
    torch = next(p for p in lock.packages if p.key == "torch")
    assert provenance_of(torch)["provenance"] == "public-lockfile"
    assert check_public_artifacts(lock, Path(P), manifest) == []
    wheel = torch.wheels[0]
    name = wheel.model_extra["name"]
    entry = manifest.by_file()[name]
    if change == "sha":
        wheel.hashes["sha256"] = "ab" * 32
        expected = [
            f"{P}: torch 2.10.0+xpu: {name} has sha256 {'ab' * 32} in the lock, {entry.sha256} in "
            "environments/xpu-wheels.yaml (unslothai/unsloth:pyproject.toml@d7186efdd03d)"
        ]
    elif change == "url":
        wheel.url = "https://mirror.example.org/" + name
        expected = [
            f"{P}: torch 2.10.0+xpu: {name} has sha256 {entry.sha256} in the lock, {entry.sha256} in "
            "environments/xpu-wheels.yaml (unslothai/unsloth:pyproject.toml@d7186efdd03d)"
        ]
    elif change == "name":
        wheel.model_extra["name"] = "torch-2.10.0+xpu-cp39-cp39-linux_x86_64.whl"
        expected = [
            f"{P}: torch 2.10.0+xpu: torch-2.10.0+xpu-cp39-cp39-linux_x86_64.whl is not a current entry of "
            "environments/xpu-wheels.yaml (superseded, unhashed or unknown)"
        ]
    else:  # without a name the file name comes from the URL, %2B read as +
        del wheel.model_extra["name"]
        expected = []
    assert check_public_artifacts(lock, Path(P), manifest) == expected


@pytest.mark.parametrize(
    ("tool", "found"),
    [
        ({"aipc-env": {"provenance": "public-lockfile", "sources": ["x"]}}, {"provenance": "public-lockfile", "sources": ["x"]}),
        ({"aipc-env": {"index": "https://pypi.org/simple"}}, {"provenance": "index"}),
        ({"aipc-env": "public-lockfile"}, {"provenance": "index"}),
        ("aipc-env", {"provenance": "index"}),
        ({}, {"provenance": "index"}),
        (None, {"provenance": "index"}),
    ],
)
def test_provenance_of(tool, found):
    pkg = PylockPackage.model_validate({"name": "x", "version": "1", "tool": tool})
    assert provenance_of(pkg) == found


def test_the_notes_of_a_clean_lock():
    meta = read_meta(LOCK)
    assert lock_notes(meta) == [
        "conda layer: Python 3.12.5 (assembled from public lock records (conda-sources.json: prefix-dev/pixi "
        "examples/polarify/pixi.lock@2b25fc76dd3b, environment py312); the conda channels could not be reached to "
        "lock it here); 3.11, 3.13: no conda layer; the env build's conda interpreter is Python 3.12 (lock-meta "
        "python), and a --base-python venv brings its own interpreter",
        "covers Python 3.11, 3.12, 3.13; the matrix row also allows 3.14, for which no public hash of every wheel is known",
        "6 package(s) hashed from public lockfiles, not against the live index: `aipc-env lock verify --pair "
        "xpu-2.10` re-checks them on a connected machine",
    ]
    quiet = meta.model_copy(
        update={
            "conda_layer": {"status": "locked", "reason": ""},
            "uncovered_pythons": [],
            "provenance": {"index": 238, "public-lockfile": 0},
        }
    )
    assert lock_notes(quiet) == []
    unavailable = quiet.model_copy(
        update={"conda_layer": {"status": "unavailable", "reason": "the channels could not be reached"}}
    )
    assert lock_notes(unavailable) == [
        "no conda layer: the channels could not be reached; envs get their Python from `conda create` or "
        "--base-python; lock it on a connected machine: nox -s lock -- --pair xpu-2.10"
    ]


@pytest.fixture
def lock_dir(tmp_path) -> Path:
    target = tmp_path / "xpu-2.10"
    shutil.copytree(LOCK, target)
    return target


def _meta(lock_dir: Path, **changes) -> None:
    path = lock_dir / "lock-meta.json"
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


CONDA = "version: 1\nmetadata:\n  content_hash: {{}}\n  channels: []\n  platforms: [{platforms}]\n  sources: []\npackage: []\n"


def test_pair_lock_problems_one_by_one(lock_dir, matrix):
    d = lock_dir
    assert check_pair_lock(d, matrix) == []
    (d / "pylock.win-64.toml").unlink()
    assert check_pair_lock(d, matrix) == [f"{d / 'pylock.win-64.toml'}: missing"]
    shutil.copy(LOCK / "pylock.win-64.toml", d)
    _meta(d, conda_layer={"status": "unavailable", "reason": "x"})
    assert check_pair_lock(d, matrix) == [
        f"{d / 'conda-lock.yml'}: present, but lock-meta.json says the conda channels were unreachable"
    ]
    _meta(d, conda_layer={"status": "locked", "reason": ""})
    assert check_pair_lock(d, matrix) == []
    layer = yaml.safe_load((d / "conda-lock.yml").read_text())
    layer["metadata"]["platforms"] = ["linux-64"]
    layer["package"] = [p for p in layer["package"] if p["platform"] == "linux-64"]
    (d / "conda-lock.yml").write_text(yaml.safe_dump(layer))
    (d / "conda-sources.json").unlink()  # a layer conda-lock made (no sidecar of sources)
    assert check_pair_lock(d, matrix) == [f"{d / 'conda-lock.yml'}: no conda layer for win-64"]
    (d / "conda-lock.yml").unlink()
    assert check_pair_lock(d, matrix) == [f"{d / 'conda-lock.yml'}: missing (conda layer)"]
    _meta(d, matrix_row_hash="sha256:" + "0" * 64)
    assert check_pair_lock(d, matrix)[0] == (
        f"{d / 'lock-meta.json'}: made from an older matrix row of xpu-2.10 (environments/matrix.yaml, pairs: "
        "xpu-2.10); re-lock: nox -s lock -- --pair xpu-2.10"
    )
    (d / "lock-meta.json").unlink()
    assert check_pair_lock(d, matrix) == [f"{d / 'lock-meta.json'}: missing", f"{d / 'conda-lock.yml'}: missing (conda layer)"]


def test_a_tampered_pylock_in_the_folder_is_named(lock_dir, matrix):
    path = lock_dir / "pylock.linux-64.toml"
    path.write_text(path.read_text().replace('version = "3.6.0"', 'version = "3.5.0"', 1))
    assert check_pair_lock(lock_dir, matrix) == [
        f"{path}: triton-xpu is 3.5.0, expected 3.6.0",
        f"{path}: closure not checked: triton-xpu 3.5.0: no core metadata recorded in environments/xpu-wheels.yaml for linux-64",
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('lock-version = "2.0"\n', "lock-version '2.0' is not supported (PEP 751 1.0)"),
        ("packages = []\n", "lock-version None is not supported (PEP 751 1.0)"),
        ('lock-version = "1.0"\nx = [\n', "not valid TOML: Invalid value (at end of document)"),
    ],
)
def test_read_pylock_refusals(tmp_path, text, message):
    path = tmp_path / "pylock.win-64.toml"
    path.write_text(text)
    with pytest.raises(InputError) as caught:
        read_pylock(path)
    assert (caught.value.message, caught.value.path) == (message, str(path))


def test_read_pylock_names_the_bad_key(tmp_path):
    path = tmp_path / "pylock.win-64.toml"
    path.write_text('lock-version = "1.0"\n[[packages]]\nversion = "1.0"\n')
    with pytest.raises(InputError) as caught:
        read_pylock(path)
    assert (caught.value.message, caught.value.path) == ("invalid file: packages[0].name: Field required", str(path))


@pytest.mark.parametrize("text", ["package: []\n", "metadata: null\n", "metadata: {}\n", "- 1\n"])
def test_a_conda_lock_without_platforms_is_refused(tmp_path, text):
    path = tmp_path / "conda-lock.yml"
    path.write_text(text)
    with pytest.raises(InputError) as caught:
        conda_lock_platforms(path)
    assert (caught.value.message, caught.value.path) == ("not a conda-lock v1 file (no metadata.platforms)", str(path))


def test_available_locks(tmp_path):
    assert available_locks(tmp_path / "absent") == set()
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "pylock.win-64.toml").write_text("")
    (tmp_path / "a" / "pylock.linux-64.toml").mkdir()  # a folder is not a lockfile
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "pylock.linux-64.toml").write_text("")
    (tmp_path / "b" / "pylock.osx-64.toml").write_text("")
    (tmp_path / "README.md").write_text("")
    assert available_locks(tmp_path) == {("a", "win-64"), ("b", "linux-64")}


def test_lock_meta_round_trip_is_the_shipped_file():
    meta = read_meta(LOCK)
    assert isinstance(meta, LockMeta) and meta.pair == "xpu-2.10" and meta.xpu_source == "manifest"


@pytest.mark.parametrize(
    ("reader", "name", "what"),
    [(read_pylock, "pylock.win-64.toml", "lockfile"), (conda_lock_platforms, "conda-lock.yml", "conda-lock file")],
)
def test_a_lock_that_is_not_utf8_is_named_by_what_it_is(tmp_path, reader, name, what):
    path = tmp_path / name
    path.write_bytes(b"a = 1\n# caf\xe9\n")
    with pytest.raises(InputError) as caught:
        reader(path)
    assert caught.value.message == (
        f"{what} is not UTF-8 text (invalid continuation byte at byte 11; it looks like a Windows ANSI code page (cp1252))"
    )


def test_two_tritons_where_the_pair_ships_none_are_both_named(raw_linux, matrix):
    pair = matrix.get("xpu-2.10")
    linux_only = pair.model_copy(update={"triton": pair.triton.model_copy(update={"marker": "platform_system == 'Linux'"})})
    lock = _lock(raw_linux, _add("pytorch-triton-xpu", "3.6.0"))
    lock.environments = ["sys_platform == 'win32' and platform_machine == 'AMD64'"]  # as a win-64 lock says
    assert check_pylock(lock, Path(P), linux_only, "win-64") == [
        f"{P}: pytorch-triton-xpu, triton-xpu present but xpu-2.10 ships no Triton on win-64"
    ]


def test_a_public_wheel_with_two_sources_names_both(raw_linux):
    name = "pytorch_triton_xpu-3.5.0-cp311-cp311-win_amd64.whl"
    manifest = load_wheel_manifest()
    entry = manifest.by_file()[name]
    lock = Pylock.model_validate(
        {
            "lock_version": "1.0",
            "packages": [
                {
                    "name": "pytorch-triton-xpu",
                    "version": "3.5.0",
                    "tool": {"aipc-env": {"provenance": "public-lockfile"}},
                    "wheels": [{"name": name, "url": entry.url, "hashes": {"sha256": "ab" * 32}}],
                }
            ],
        }
    )
    assert check_public_artifacts(lock, Path(P), manifest) == [
        f"{P}: pytorch-triton-xpu 3.5.0: {name} has sha256 {'ab' * 32} in the lock, {entry.sha256} in "
        "environments/xpu-wheels.yaml (unslothai/unsloth:pyproject.toml@8bb4a0cf63fc; "
        "HANK572718/torch-xpu-patch:poetry.lock@ac39b116c5d1)"
    ]


@pytest.mark.parametrize(
    ("url", "shown"), [(None, ""), ("torch-9.whl", "torch-9.whl"), ("https://x.org/a/torch-9%2Bxpu.whl", "torch-9+xpu.whl")]
)
def test_a_public_wheel_without_a_name_is_named_by_its_url(url, shown):
    lock = Pylock.model_validate(
        {
            "lock_version": "1.0",
            "packages": [
                {
                    "name": "torch",
                    "version": "9",
                    "tool": {"aipc-env": {"provenance": "public-lockfile"}},
                    "wheels": [{"url": url, "hashes": {"sha256": "ab" * 32}}],
                }
            ],
        }
    )
    assert check_public_artifacts(lock, Path(P), load_wheel_manifest()) == [
        f"{P}: torch 9: {shown} is not a current entry of environments/xpu-wheels.yaml (superseded, unhashed or unknown)"
    ]


def test_two_uncovered_pythons_are_listed():
    meta = read_meta(LOCK).model_copy(update={"uncovered_pythons": ["3.9", "3.14"]})
    assert lock_notes(meta)[1] == (
        "covers Python 3.11, 3.12, 3.13; the matrix row also allows 3.9, 3.14, for which no public hash of every wheel is known"
    )


def test_every_platform_is_checked_after_a_missing_one(lock_dir, matrix):
    (lock_dir / "pylock.win-64.toml").rename(lock_dir / "moved.toml")  # win-64 is checked first
    linux = lock_dir / "pylock.linux-64.toml"
    text = linux.read_text()
    start = text.index('name = "torch-2.10.0+xpu-cp311-cp311-linux_x86_64.whl"')
    sha_at = text.index("sha256 = ", start) + len('sha256 = "')
    linux.write_text(text[:sha_at] + "ab" * 32 + text[sha_at + 64 :])
    assert check_pair_lock(lock_dir, matrix) == [
        f"{lock_dir / 'pylock.win-64.toml'}: missing",
        f"{linux}: torch 2.10.0+xpu: torch-2.10.0+xpu-cp311-cp311-linux_x86_64.whl has sha256 {'ab' * 32} in the "
        "lock, 71ad2f82da0f41eaec159f39fc85854e27c2391efa91b373e550648a6f4aaad3 in environments/xpu-wheels.yaml "
        "(unslothai/unsloth:pyproject.toml@d7186efdd03d)",
    ]


def test_a_conda_layer_for_no_platform_names_both(lock_dir, matrix):
    _meta(lock_dir, conda_layer={"status": "locked", "reason": ""})
    (lock_dir / "conda-lock.yml").write_text(CONDA.format(platforms=""))
    (lock_dir / "conda-sources.json").unlink()
    assert check_pair_lock(lock_dir, matrix) == [f"{lock_dir / 'conda-lock.yml'}: no conda layer for win-64, linux-64"]


def test_locked_packages_follow_the_python_and_platform_markers():
    from aipc_env.trainenv.drift import locked_packages

    lock = Pylock.model_validate(
        {
            "lock_version": "1.0",
            "packages": [
                {
                    "name": "Old_Only",
                    "version": "1.0",
                    "marker": "python_version < '3.11'",
                    "wheels": [{"url": "https://x.org/o.whl", "hashes": {"sha256": "ab" * 32}}],
                },
                {
                    "name": "win-only",
                    "version": "2.0",
                    "marker": "sys_platform == 'win32'",
                    "sdist": {"url": "https://x.org/w.tar.gz", "hashes": {"sha256": "cd" * 32}},
                },
                {"name": "no-version", "wheels": [{"path": "w/n.whl", "hashes": {}}]},
            ],
        }
    )
    assert locked_packages(lock, "linux-64", "3.10") == {"old-only": ("1.0", "ab" * 32), "no-version": ("", "")}
    assert locked_packages(lock, "win-64", "3.12") == {"win-only": ("2.0", "cd" * 32), "no-version": ("", "")}
