"""The install-time METADATA check (lock/wheelcheck.py) against the real wheels' METADATA of the recorded releases:
PyPI's torchvision, torch and upstream triton wheels, recorded under tests/fixtures/pypi-metadata/ (URL, wheel sha256,
METADATA sha256; tests/fixtures/record_pypi_metadata.py) and read again from PyPI in the `pypi` tier. The XPU index's
own wheels cannot be reached here; PyPI's wheels of the same releases are built from the same setup.py."""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aipc_env.core.platforms import PLATFORMS, marker_environment
from aipc_env.lock.coremeta import CoreMetadata, parse_core_metadata
from aipc_env.lock.lockfile import read_pylock
from aipc_env.lock.wheelcheck import check_xpu_metadata, compare_metadata, deciding_requirements, requested_extras
from aipc_env.lock.wheels import load_wheel_manifest
from tests.conftest import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "pypi-metadata"
INDEX = json.loads((FIXTURES / "index.json").read_text(encoding="utf-8"))["wheels"]
LOCKS = ROOT / "lockfiles"
NO_EXTRAS: frozenset[str] = frozenset()
XPU_BUILD_ADDS = re.compile(
    r"^(intel-|onemkl-|dpcpp-cpp-rt$|mkl$|tbb$|tcmlib$|umf$|oneccl|impi-rt$|pyzes$|pytorch-triton-xpu$|triton-xpu$)"
)
"""What PyTorch's XPU build adds to torch's Requires-Dist: the Intel runtime and its Triton (xpu-stack.md, section 1)."""


def _fixture(name: str) -> CoreMetadata:
    return parse_core_metadata((FIXTURES / f"{name}.METADATA").read_bytes())


def _platform_of(file: str) -> str:
    return "win-64" if "win_amd64" in file else "linux-64"


def _locked() -> set[tuple[str, str]]:
    """(package, version) of every torch, torchvision and Triton release a shipped lock installs."""
    return {
        (pkg.name, pkg.version or "")
        for path in LOCKS.glob("*/pylock.*.toml")
        for pkg in read_pylock(path).packages
        if pkg.name in ("torch", "torchvision", "pytorch-triton-xpu", "triton-xpu")
    }


LOCKED = sorted(_locked())


def test_the_fixtures_are_what_their_index_says():
    assert len(INDEX) == len(list(FIXTURES.glob("*.METADATA"))) >= 40
    for row in INDEX:
        raw = (FIXTURES / f"{row['file']}.METADATA").read_bytes()
        assert hashlib.sha256(raw).hexdigest() == row["metadata_sha256"], row["file"]
        assert row["url"].startswith("https://files.pythonhosted.org/") and row["url"].endswith("/" + row["file"])
        meta = parse_core_metadata(raw)
        assert row["file"].startswith(f"{meta.name}-{meta.version}-")


def test_every_locked_release_has_a_real_wheel_to_compare_with():
    files = {row["file"] for row in INDEX}
    for name, version in LOCKED:
        public = version.split("+")[0]
        project = "triton" if "triton" in name else name
        assert any(f.startswith(f"{project}-{public}-") for f in files), (name, version)


@pytest.mark.parametrize("row", [r for r in INDEX if r["file"].startswith("torchvision-")], ids=lambda r: r["file"])
def test_torchvision_records_pass_the_check_against_pypis_wheel_of_the_same_release(row):
    """Name, Requires-Python and the Requires-Dist that decide an install are equal; the version differs only by the
    XPU index's local label."""
    found = _fixture(row["file"])
    manifest = load_wheel_manifest()
    platform = _platform_of(row["file"])
    record = manifest.metadata_for("torchvision", f"{found.version}+xpu", platform) or manifest.metadata_for(
        "torchvision", found.version, platform
    )
    assert record is not None
    env = marker_environment(platform, "3.12")
    differences = compare_metadata(record.core(), found, NO_EXTRAS, env)
    expected = [] if record.version == found.version else [("Version", record.version, found.version)]
    assert differences == expected
    # with every extra asked for, the extras' lines are equal too (the records carry them: gdown, scipy)
    assert compare_metadata(record.core(), found, frozenset({"gdown", "scipy"}), env) == expected


@pytest.mark.parametrize("row", [r for r in INDEX if r["file"].startswith("torch-")], ids=lambda r: r["file"])
def test_torch_records_differ_from_pypis_cpu_wheel_only_by_the_xpu_builds_runtime(row):
    found = _fixture(row["file"])
    record = load_wheel_manifest().metadata_for("torch", f"{found.version}+xpu", "win-64")
    assert record is not None
    env = marker_environment("win-64", "3.12")
    for extras in (NO_EXTRAS, frozenset({"optree", "opt-einsum", "pyyaml"})):
        want = deciding_requirements(record.requires_dist, extras, env)
        got = deciding_requirements(found.requires_dist, extras, env)
        assert set(got) <= set(want), set(got) - set(want)
        added = {re.split(r"[=<>!~;\[ ]", want[k])[0] for k in set(want) - set(got)}
        assert added and all(XPU_BUILD_ADDS.match(n) for n in added), added
    fields = {f for f, _, _ in compare_metadata(record.core(), found, NO_EXTRAS, env)}
    assert fields == {"Version", "Requires-Dist"}  # same name, same Requires-Python


@pytest.mark.parametrize("version", ["3.2.0", "3.3.0", "3.3.1", "3.4.0", "3.5.0", "3.6.0"])
def test_triton_records_extras_are_written_as_setuptools_wrote_the_same_extras(version):
    """Up to 3.6 Intel's setup.py keeps upstream's extras_require: its records' 12-13 `extra ==` lines (read from the
    quoted setup.py) equal those of PyPI's upstream triton wheel of the same release, line for line once normalised."""
    found = next(_fixture(r["file"]) for r in INDEX if r["file"].startswith(f"triton-{version}-"))
    record = next(m for m in load_wheel_manifest().metadata if "triton" in m.package and m.version == version)
    env = marker_environment("linux-64", "3.12")
    every = frozenset({"build", "tests", "tutorials"})

    def extra_lines(lines: tuple[str, ...] | list[str]) -> set[str]:
        return set(deciding_requirements(lines, every, env)) - set(deciding_requirements(lines, NO_EXTRAS, env))

    assert extra_lines(record.requires_dist) == extra_lines(found.requires_dist)
    assert len(extra_lines(record.requires_dist)) in (12, 13)


@pytest.mark.parametrize("version", ["3.3.1", "3.5.0", "3.6.0", "3.7.0"])
def test_the_published_triton_records_carry_their_setup_pys_extras(version):
    record = next(m for m in load_wheel_manifest().metadata if "triton" in m.package and m.version == version)
    assert record.certainty == "published"
    assert sum('extra == "' in line for line in record.requires_dist) == 13


@pytest.mark.parametrize("version", ["3.3.1", "3.5.0", "3.6.0", "3.7.0", "3.7.1"])
def test_unrequested_extras_decide_nothing(version):
    """A Triton wheel with its extras' lines and a record without them (or the other way) pass; asking for an extra
    makes its lines count."""
    record = next(m for m in load_wheel_manifest().metadata if "triton" in m.package and m.version == version)
    env = marker_environment("linux-64", "3.12")
    bare = CoreMetadata(
        record.package, record.version, tuple(r for r in record.requires_dist if "extra ==" not in r), record.requires_python
    )
    assert compare_metadata(record.core(), bare, NO_EXTRAS, env) == []
    assert compare_metadata(bare, record.core(), NO_EXTRAS, env) == []
    asked = compare_metadata(record.core(), bare, frozenset({"build"}), env)
    if any('extra == "build"' in r for r in record.requires_dist):
        assert [f for f, _, _ in asked] == ["Requires-Dist"] and "cmake" in asked[0][1] and "lit" in asked[0][1]
    else:
        assert asked == []


def test_the_check_compares_name_version_python_and_requirements_normalised():
    env = marker_environment("linux-64", "3.12")
    a = CoreMetadata("TorchVision", "0.24.1+xpu", ("torch (==2.9.1)", "Pillow (!=8.3.*,>=5.3.0)"), ">=3.10,<3.15")
    same = CoreMetadata("torchvision", "0.24.1+xpu", ("torch==2.9.1", "pillow>=5.3.0,!=8.3.*"), "<3.15,>=3.10")
    assert compare_metadata(a, same, NO_EXTRAS, env) == []
    assert [
        f
        for f, _, _ in compare_metadata(
            a, CoreMetadata("torchvisionx", a.version, a.requires_dist, a.requires_python), NO_EXTRAS, env
        )
    ] == ["Name"]
    assert [
        f for f, _, _ in compare_metadata(a, CoreMetadata(a.name, "0.24.1", a.requires_dist, a.requires_python), NO_EXTRAS, env)
    ] == ["Version"]
    assert [f for f, _, _ in compare_metadata(a, CoreMetadata(a.name, a.version, a.requires_dist, ">=3.10"), NO_EXTRAS, env)] == [
        "Requires-Python"
    ]
    assert [
        f
        for f, _, _ in compare_metadata(
            a, CoreMetadata(a.name, a.version, ("torch==2.9.0", "pillow"), a.requires_python), NO_EXTRAS, env
        )
    ] == ["Requires-Dist"]
    # a platform-marked line decides the install where its marker holds, and nowhere else
    marked = CoreMetadata(a.name, a.version, (*a.requires_dist, "pyzes==0.1.2; platform_system == 'Linux'"), a.requires_python)
    assert [f for f, _, _ in compare_metadata(a, marked, NO_EXTRAS, env)] == ["Requires-Dist"]
    assert compare_metadata(a, marked, NO_EXTRAS, marker_environment("win-64", "3.12")) == []
    old = CoreMetadata(a.name, a.version, (*a.requires_dist, "importlib-metadata; python_version < '3.10'"), a.requires_python)
    assert compare_metadata(a, old, NO_EXTRAS, env) == []


def test_requested_extras_are_read_from_every_locked_requirement():
    assert requested_extras(["triton-xpu[build]>=3", "Triton_XPU[Tests]; python_version>'3'", "numpy"]) == {
        "triton-xpu": frozenset({"build", "tests"})
    }


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("pair", sorted(p.name for p in LOCKS.iterdir() if p.is_dir()))
def test_the_shipped_locks_pass_the_check_with_the_real_wheels_field_by_field(pair, platform):
    """The check as the env build runs it, on every shipped lock: each XPU-index wheel's METADATA is the record's
    own with PyPI's wheel of the same release in every field PyPI's wheel can speak for (torchvision: all of them but
    the local label; Triton: the extras the records now carry). No difference is reported."""
    from aipc_env.lock.requires import wheel_name

    manifest = load_wheel_manifest()
    lock = read_pylock(LOCKS / pair / f"pylock.{platform}.toml")
    by_release = {(_fixture(r["file"]).name, _fixture(r["file"]).version, _platform_of(r["file"])): r["file"] for r in INDEX}
    read: list[str] = []

    def reader(pkg, wheel):
        record = manifest.metadata_for(pkg.name, pkg.version, platform)
        public = pkg.version.split("+")[0]
        if pkg.name == "torchvision":
            real = _fixture(by_release[("torchvision", public, platform)])
            read.append(wheel_name(wheel))
            return CoreMetadata(pkg.name, pkg.version, real.requires_dist, real.requires_python)
        return record.core()

    report = check_xpu_metadata(lock, platform, "3.12", manifest, reader)
    assert report.problems == []
    assert read, "no torchvision wheel was checked"


# -- the live PyPI --------------------------------------------------------------------------------------------------


def _cache() -> Path | None:
    folder = os.environ.get("AIPC_ENV_TEST_CACHE")
    return Path(folder) / "pypi-metadata" if folder else None


@pytest.mark.pypi
@pytest.mark.parametrize("row", INDEX, ids=lambda r: r["file"])
def test_pypi_serves_the_recorded_metadata(row):
    """Each fixture is PyPI's PEP 658 METADATA of the wheel it names (its sha256 checked against the simple page's)."""
    from aipc_env.lock.simple_index import IndexFile, MetadataCache, fetch_metadata

    cache = MetadataCache(_cache())
    meta, raw = fetch_metadata(IndexFile(row["file"], row["url"], row["sha256"], None), expect_sha256=row["sha256"], cache=cache)
    assert hashlib.sha256(raw).hexdigest() == row["metadata_sha256"]
    assert meta == _fixture(row["file"])


@given(
    st.lists(
        st.sampled_from(['a; extra == "x"', "b>=1", "c; python_version < '3.10'", 'd; extra == "y" and os_name == "nt"']),
        max_size=6,
    ),
    st.frozensets(st.sampled_from(["x", "y", "z"])),
)
def test_deciding_requirements_keeps_exactly_the_asked_extras(lines, extras):
    kept = set(deciding_requirements(lines, extras, marker_environment("win-64", "3.12")))
    for line in lines:
        name = line[0]
        wanted = {"a": "x" in extras, "b": True, "c": False, "d": "y" in extras}[name]
        assert any(k.startswith(name) for k in kept) == wanted
