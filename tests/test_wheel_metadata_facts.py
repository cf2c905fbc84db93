"""The XPU wheels' metadata as read facts: a `published` record quotes its source at a commit (or the wheel it read),
naming every package it requires; the re-locked xpu-2.12 honours torch 2.12's setuptools<82; every pylock says which
platform it is for (PEP 751 `environments`); `lock check` names the packages that stand on inferred metadata."""

from __future__ import annotations

import copy
import tomllib
from pathlib import Path

import pytest
from packaging.version import Version
from pydantic import ValidationError

from aipc_env.core.platforms import PLATFORMS
from aipc_env.lock.check import inferred_metadata
from aipc_env.lock.lockfile import Pylock, check_pylock, pylock_path, read_pylock
from aipc_env.lock.wheels import WheelMetadata, load_wheel_manifest
from tests.conftest import ROOT

SHIPPED = ["xpu-2.7", "xpu-2.9", "xpu-2.10", "xpu-2.12"]
TRITON = "intel/intel-xpu-backend-for-triton"
QUOTE = {
    "repository": TRITON,
    "path": "setup.py",
    "commit": "432512b432bd29c21c907bc39f60c6ee0a2f51b2",
    "lines": ["install_requires=[", '"pyelftools",', "\"importlib-metadata; python_version < '3.10'\","],
}
RECORD = {
    "package": "triton-xpu",
    "version": "3.7.1",
    "certainty": "published",
    "sources": ["the tag's setup.py"],
    "requires_dist": ["pyelftools", "importlib-metadata; python_version < '3.10'"],
    "quotes": [QUOTE],
}


def test_the_published_records_are_the_triton_releases_read_at_their_commits():
    published = [
        (m.package, m.version, [(q.repository, q.path, q.commit) for q in m.quotes])
        for m in load_wheel_manifest().metadata
        if m.certainty == "published"
    ]
    assert published == [
        ("pytorch-triton-xpu", "3.3.1", [(TRITON, "python/setup.py", "b0e26b7359c147b8aa0af686c20510fb9b15990a")]),
        ("pytorch-triton-xpu", "3.5.0", [(TRITON, "setup.py", "1b0418a9a454b2b93ab8d71f40e59d2297157fae")]),
        ("triton-xpu", "3.6.0", [(TRITON, "setup.py", "225cdbde3ea155d5ed4c0aad1f2aa4bd2b3c4a3d")]),
        ("triton-xpu", "3.7.0", [(TRITON, "setup.py", "64bb0de394fe1b9e163758380ce8eed25511bb5e")]),
        ("triton-xpu", "3.7.1", [(TRITON, "setup.py", "432512b432bd29c21c907bc39f60c6ee0a2f51b2")]),
        ("triton-xpu", "3.7.2", [(TRITON, "setup.py", "933a430299f705a1834670495060016ebd34fd83")]),
    ]


def test_the_shipped_record_model_accepts_the_example():
    assert WheelMetadata.model_validate(RECORD).quotes[0].where == f"{TRITON}:setup.py@{QUOTE['commit']}"


def _without(key: str) -> dict:
    quote = {k: v for k, v in QUOTE.items() if k != key}
    return {**RECORD, "quotes": [quote]}


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({**RECORD, "quotes": []}, "a published record needs `quotes`"),
        ({k: v for k, v in RECORD.items() if k != "quotes"}, "a published record needs `quotes`"),
        (_without("commit"), "a quote names either repository, path and commit, or url and sha256"),
        (_without("repository"), "a quote names either repository, path and commit, or url and sha256"),
        (_without("path"), "a quote names either repository, path and commit, or url and sha256"),
        ({**RECORD, "quotes": [{**QUOTE, "commit": "release/3.7.1"}]}, "String should match pattern"),
        ({**RECORD, "quotes": [{**QUOTE, "lines": []}]}, "List should have at least 1 item"),
        (
            {**RECORD, "quotes": [{**QUOTE, "url": "https://x/y.whl", "sha256": "a" * 64}]},
            "a quote names either repository, path and commit, or url and sha256",
        ),
        (
            {**RECORD, "quotes": [{"url": "https://x/y.whl", "lines": ["Requires-Dist: pyelftools"]}]},
            "a quote names either repository, path and commit, or url and sha256",
        ),
        (
            {**RECORD, "quotes": [{**QUOTE, "lines": ['"pyelftools",']}]},
            "published, but no quoted line shows importlib-metadata; python_version < '3.10'",
        ),
        (
            {**RECORD, "requires_dist": [*RECORD["requires_dist"], "setuptools<82"]},
            "published, but no quoted line shows setuptools<82",
        ),
    ],
)
def test_a_published_record_without_its_quoted_source_is_refused(record, message):
    with pytest.raises(ValidationError) as caught:
        WheelMetadata.model_validate(record)
    assert message in str(caught.value)


def test_the_same_record_marked_inferred_needs_no_quote():
    assert WheelMetadata.model_validate({**RECORD, "certainty": "inferred", "quotes": []}).certainty == "inferred"


def test_a_quote_of_a_read_wheel_names_url_and_sha256():
    record = {
        **RECORD,
        "quotes": [
            {
                "url": "https://x/triton_xpu-3.7.1-cp312-cp312-win_amd64.whl.metadata",
                "sha256": "a" * 64,
                "lines": ["Requires-Dist: pyelftools", "Requires-Dist: importlib-metadata"],
            }
        ],
    }
    assert WheelMetadata.model_validate(record).quotes[0].sha256 == "a" * 64


@pytest.mark.parametrize(
    ("version", "setuptools"),
    [
        ("2.7.1+xpu", 'setuptools; python_version >= "3.12"'),
        ("2.10.0+xpu", 'setuptools; python_version >= "3.12"'),
        ("2.11.0+xpu", "setuptools<82"),
        ("2.12.0+xpu", "setuptools<82"),
        ("2.12.1+xpu", "setuptools<82"),
        ("2.13.0+xpu", "setuptools>=77.0.3"),
        ("2.14.0+xpu", "setuptools>=77.0.3"),
    ],
)
def test_torch_records_carry_setuptools_extras_and_requires_python(version, setuptools):
    for platform in PLATFORMS:
        record = load_wheel_manifest().metadata_for("torch", version, platform)
        assert [r for r in record.requires_dist if r.startswith("setuptools")] == [setuptools]
        extras = [r for r in record.requires_dist if "extra ==" in r]
        assert extras[:2] == ['optree>=0.13.0; extra == "optree"', 'opt-einsum>=3.3; extra == "opt-einsum"']
        assert record.requires_python == (">=3.9.0" if version.startswith("2.7") else ">=3.10")


@pytest.mark.parametrize("version", ["2.11.0+xpu", "2.12.0+xpu", "2.12.1+xpu"])
def test_torch_2_11_and_2_12_pin_the_onemkl_license(version):
    record = load_wheel_manifest().metadata_for("torch", version, "win-64")
    assert "onemkl-license==2025.3.1" in record.requires_dist


@pytest.mark.parametrize(
    ("package", "version", "requires_python"),
    [
        ("pytorch-triton-xpu", "3.5.0", ">=3.9,<3.15"),
        ("triton-xpu", "3.6.0", ">=3.10,<3.15"),
        ("triton-xpu", "3.7.1", ">=3.10,<3.15"),
        ("triton-xpu", "3.8.0", ">=3.10,<3.16"),
    ],
)
def test_triton_from_3_5_requires_importlib_metadata_below_3_10(package, version, requires_python):
    record = load_wheel_manifest().metadata_for(package, version, "linux-64")
    assert "importlib-metadata; python_version < '3.10'" in record.requires_dist
    assert record.requires_python == requires_python


@pytest.mark.parametrize("platform", PLATFORMS)
def test_xpu_2_12_pins_a_setuptools_below_82(platform):
    lock = read_pylock(pylock_path(ROOT / "lockfiles" / "xpu-2.12", platform))
    setuptools = lock.by_name()["setuptools"]
    assert Version(setuptools.version) < Version("82") and setuptools.version == "81.0.0"
    assert setuptools.wheels[0].hashes["sha256"] == "fdd925d5c5d9f62e4b74b30d6dd7828ce236fd6ed998a08d81de62ce5a6310d6"


ENVIRONMENTS = {
    "win-64": ["sys_platform == 'win32' and platform_machine == 'AMD64'"],
    "linux-64": ["sys_platform == 'linux' and platform_machine == 'x86_64'"],
}


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("pair", SHIPPED)
def test_every_shipped_pylock_says_its_environment(pair, platform):
    raw = tomllib.loads(pylock_path(ROOT / "lockfiles" / pair, platform).read_text(encoding="utf-8"))
    assert raw["environments"] == ENVIRONMENTS[platform]


@pytest.fixture(scope="module")
def win_lock(matrix) -> dict:
    raw = tomllib.loads(pylock_path(ROOT / "lockfiles" / "xpu-2.12", "win-64").read_text(encoding="utf-8"))
    raw["lock_version"] = raw.pop("lock-version")
    return raw


@pytest.mark.parametrize(
    ("environments", "shown"),
    [
        (None, "missing"),
        ([], "missing"),
        (ENVIRONMENTS["linux-64"], str(ENVIRONMENTS["linux-64"])),
        ([*ENVIRONMENTS["win-64"], "sys_platform == 'linux'"], str([*ENVIRONMENTS["win-64"], "sys_platform == 'linux'"])),
        (["sys_platform == 'win32'"], "[\"sys_platform == 'win32'\"]"),
    ],
)
def test_lock_check_refuses_a_pylock_without_its_environment(win_lock, matrix, environments, shown):
    raw = copy.deepcopy(win_lock)
    raw["environments"] = environments
    problems = check_pylock(Pylock.model_validate(raw), Path("p.toml"), matrix.get("xpu-2.12"), "win-64")
    assert problems == [
        f"p.toml: environments is {shown}, a win-64 lock says {ENVIRONMENTS['win-64']} (PEP 751); "
        "re-lock: nox -s lock -- --pair xpu-2.12"
    ]


def test_the_right_environment_is_no_problem(win_lock, matrix):
    assert check_pylock(Pylock.model_validate(win_lock), Path("p.toml"), matrix.get("xpu-2.12"), "win-64") == []


@pytest.mark.parametrize(
    ("pair", "inferred"),
    [
        ("xpu-2.7", ["torch 2.7.1+xpu (win-64, linux-64)", "torchvision 0.22.1+xpu (win-64, linux-64)"]),
        ("xpu-2.12", ["torch 2.12.0+xpu (win-64, linux-64)", "torchvision 0.27.0+xpu (win-64, linux-64)"]),
    ],
)
def test_lock_check_names_the_packages_on_inferred_metadata(pair, inferred):
    assert inferred_metadata(ROOT / "lockfiles" / pair) == inferred


def test_a_triton_record_turned_inferred_is_named_too(tmp_path):
    from aipc_env.lock.wheels import WheelManifest

    manifest = load_wheel_manifest()
    changed = WheelManifest.model_validate(
        {
            **manifest.model_dump(),
            "metadata": [
                {**m.model_dump(), "certainty": "inferred"}
                if m.package == "triton-xpu" and m.version == "3.7.1"
                else m.model_dump()
                for m in manifest.metadata
            ],
        }
    )
    assert inferred_metadata(ROOT / "lockfiles" / "xpu-2.12", changed) == [
        "torch 2.12.0+xpu (win-64, linux-64)",
        "torchvision 0.27.0+xpu (win-64, linux-64)",
        "triton-xpu 3.7.1 (win-64, linux-64)",
    ]
