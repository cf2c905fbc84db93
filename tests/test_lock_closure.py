"""The closure check of a lock (issue 32): `pip check` on the lock, per Python and platform. The rules at their
bounds in process; the shipped locks through `lock check`, with a dependency removed; core metadata as read from a
local stand-in index (PEP 658 files checked against their hash, a wheel read by HTTP range requests) and from the
real PyPI."""

from __future__ import annotations

import hashlib
import http.server
import json
import shutil
import threading
import tomllib
from pathlib import Path

import pytest

from aipc_env.errors import ExitCode
from aipc_env.lock.closure import LockedDist, closure_problems, wheel_installs
from aipc_env.lock.coremeta import MAX_METADATA_BYTES, MetadataError, parse_core_metadata
from aipc_env.lock.requires import IndexReader, record_metadata
from aipc_env.lock.simple_index import IndexReadError, MetadataCache, fetch_metadata, project_files
from tests.conftest import ROOT, run_cli
from tests.support.wheels import make_wheel, sha256_of

LOCKS = ROOT / "lockfiles"


def _dist(name, version="1.0", requires=(), *, marker=None, python=None, wheels=("x-1.0-py3-none-any.whl",), sdist=False):
    return LockedDist(name, version, marker, tuple(requires), python, tuple(wheels), sdist)


# -- the rules, in process --------------------------------------------------------------------------------------


def test_a_closed_lock_has_no_problem():
    dists = [_dist("a", requires=["b>=1", "c; python_version < '3.11'"]), _dist("b", "1.0")]
    assert closure_problems(dists, "linux-64", "3.12") == []


def test_a_missing_requirement_names_platform_python_package_and_requirement():
    dists = [_dist("a", requires=["b>=1"])]
    assert closure_problems(dists, "win-64", "3.12") == [
        "win-64 Python 3.12: a 1.0 requires b>=1, which the lock does not have for it"
    ]


@pytest.mark.parametrize(
    ("python", "problems"),
    [
        ("3.10", ["linux-64 Python 3.10: a 1.0 requires c, which the lock does not have for it"]),
        ("3.11", []),  # at the marker's bound: python_version < '3.11' is false
        ("3.12", []),
    ],
)
def test_a_marker_limits_a_requirement_to_some_pythons(python, problems):
    dists = [_dist("a", requires=["c; python_version < '3.11'"])]
    assert closure_problems(dists, "linux-64", python) == problems


@pytest.mark.parametrize(
    ("platform", "problems"),
    [
        ("win-64", ["win-64 Python 3.12: a 1.0 requires pywin32, which the lock does not have for it"]),
        ("linux-64", []),
    ],
)
def test_a_marker_limits_a_requirement_to_a_platform(platform, problems):
    dists = [_dist("a", requires=["pywin32; platform_system == 'Windows'"])]
    assert closure_problems(dists, platform, "3.12") == problems


@pytest.mark.parametrize(
    ("locked", "problems"),
    [
        ("1.9", ["linux-64 Python 3.12: a 1.0 requires b>=2,<3, but the lock has b 1.9"]),  # below
        ("2.0", []),  # at the lower bound
        ("2.1rc1", []),  # a pre-release inside the range satisfies it, as pip check says
        ("3.0", ["linux-64 Python 3.12: a 1.0 requires b<3,>=2, but the lock has b 3.0"]),  # at the excluded upper bound
    ],
)
def test_a_locked_version_outside_the_specifier_is_a_conflict(locked, problems):
    dists = [_dist("a", requires=["b>=2,<3"]), _dist("b", locked)]
    got = closure_problems(dists, "linux-64", "3.12")
    assert [p.replace("b>=2,<3", "b<3,>=2") for p in got] == [p.replace("b>=2,<3", "b<3,>=2") for p in problems]


def test_extras_asked_for_bring_their_requirements():
    dists = [
        _dist("a", requires=["b[fast]>=1"]),
        _dist("b", requires=["c; extra == 'fast'", "d; extra == 'slow'", "e"]),
        _dist("e"),
    ]
    assert closure_problems(dists, "linux-64", "3.12") == [
        "linux-64 Python 3.12: b 1.0[fast] requires c, which the lock does not have for it"
    ]


def test_an_extras_requirement_with_a_marker_counts_only_where_the_marker_holds():
    dists = [_dist("a", requires=["b[win]"]), _dist("b", requires=["c; extra == 'win' and sys_platform == 'win32'"])]
    assert closure_problems(dists, "linux-64", "3.12") == []
    assert closure_problems(dists, "win-64", "3.12") == [
        "win-64 Python 3.12: b 1.0[win] requires c, which the lock does not have for it"
    ]


@pytest.mark.parametrize(
    ("requires_python", "problems"),
    [
        (">=3.13", ["linux-64 Python 3.12: a 1.0 requires Python >=3.13"]),
        (">=3.12", []),  # at the bound
        ("<3.12", ["linux-64 Python 3.12: a 1.0 requires Python <3.12"]),
    ],
)
def test_requires_python_of_a_selected_package(requires_python, problems):
    assert closure_problems([_dist("a", python=requires_python)], "linux-64", "3.12") == problems


def test_a_package_without_a_wheel_for_the_python_and_no_sdist():
    numpy = _dist("numpy", "2.0", wheels=("numpy-2.0-cp311-cp311-win_amd64.whl",))
    assert closure_problems([numpy], "win-64", "3.11") == []
    assert closure_problems([numpy], "win-64", "3.12") == ["win-64 Python 3.12: numpy 2.0 has no wheel for it (and no sdist)"]
    assert closure_problems([numpy], "linux-64", "3.11") == ["linux-64 Python 3.11: numpy 2.0 has no wheel for it (and no sdist)"]
    assert closure_problems([_dist("numpy", wheels=(), sdist=True)], "win-64", "3.12") == []


def test_a_package_locked_twice_for_one_python_is_named():
    dists = [_dist("a", "1.0", marker="python_version >= '3.11'"), _dist("a", "2.0", marker="python_version >= '3.12'")]
    assert closure_problems(dists, "linux-64", "3.11") == []
    assert closure_problems(dists, "linux-64", "3.12") == [
        "linux-64 Python 3.12: a is locked twice for it (1.0 and 2.0); their markers overlap"
    ]


def test_packages_whose_marker_excludes_the_target_do_not_count():
    dists = [_dist("a", requires=["b"]), _dist("b", marker="python_version < '3.12'")]
    assert closure_problems(dists, "linux-64", "3.11") == []
    assert closure_problems(dists, "linux-64", "3.12") == [
        "linux-64 Python 3.12: a 1.0 requires b, which the lock does not have for it"
    ]


@pytest.mark.parametrize(
    ("name", "platform", "python", "installs"),
    [
        ("x-1-py3-none-any.whl", "win-64", "3.12", True),
        ("x-1-cp312-cp312-win_amd64.whl", "win-64", "3.12", True),
        ("x-1-cp312-cp312-win_amd64.whl", "win-64", "3.13", False),
        ("x-1-cp312-cp312-manylinux_2_28_x86_64.whl", "linux-64", "3.12", True),
        ("x-1-cp312-cp312-linux_x86_64.whl", "linux-64", "3.12", True),
        ("x-1-cp312-cp312-manylinux_2_28_aarch64.whl", "linux-64", "3.12", False),
        ("x-1-cp312-cp312-musllinux_1_2_x86_64.whl", "linux-64", "3.12", False),
        ("x-1-cp39-abi3-win_amd64.whl", "win-64", "3.12", True),  # abi3: this Python and later
        ("x-1-cp313-abi3-win_amd64.whl", "win-64", "3.12", False),
        ("x-1-cp313-cp313t-win_amd64.whl", "win-64", "3.13", False),  # free-threaded only
        ("not a wheel", "win-64", "3.12", False),
    ],
)
def test_wheel_tags(name, platform, python, installs):
    assert wheel_installs(name, platform, python) is installs


# -- the shipped locks ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pair", "package", "needed_by"),
    [
        ("xpu-2.12", "pyelftools", "triton-xpu 3.7.1 requires pyelftools"),
        ("xpu-2.10", "pyelftools", "triton-xpu 3.6.0 requires pyelftools"),
        ("xpu-2.7", "setuptools", "pytorch-triton-xpu 3.3.1 requires setuptools>=40.8.0"),
        ("xpu-2.9", "setuptools", "pytorch-triton-xpu 3.5.0 requires setuptools>=70.2.0"),
        ("xpu-2.12", "tqdm", "huggingface-hub"),  # a PyPI package's own dependency, from its recorded metadata
    ],
)
def test_lock_check_names_a_removed_dependency_with_its_python_and_platform(tmp_path, pair, package, needed_by):
    root = tmp_path / "lockfiles"
    shutil.copytree(LOCKS / pair, root / pair)
    path = root / pair / "pylock.win-64.toml"
    text = path.read_text(encoding="utf-8")
    start = text.index(f'[[packages]]\nname = "{package}"')
    end = text.index("[[packages]]", start + 1)
    path.write_text(text[:start] + text[end:], encoding="utf-8")
    result = run_cli("lock", "check", "--lock-root", str(root), "--json")
    assert result.returncode == ExitCode.PROBLEMS
    problems = json.loads(result.stdout)["pairs"][0]["problems"]
    pythons = json.loads((root / pair / "lock-meta.json").read_text())["pythons"]
    named = [p for p in problems if needed_by in p]
    assert named and all(f"{path}: win-64 Python " in p and ", which the lock does not have for it" in p for p in named)
    assert {p.split("Python ")[1].split(":")[0] for p in named} == set(pythons)
    assert all("linux-64" not in p for p in problems)


def test_every_shipped_lock_records_the_metadata_of_every_pypi_package():
    for path in LOCKS.glob("*/pylock.*.toml"):
        for pkg in tomllib.loads(path.read_text(encoding="utf-8"))["packages"]:
            tool = pkg["tool"]["aipc-env"]
            if tool["provenance"] == "index":
                assert isinstance(tool.get("requires-dist"), list), (path, pkg["name"])


# -- core metadata ----------------------------------------------------------------------------------------------


def test_core_metadata_fields():
    meta = parse_core_metadata(
        b"Metadata-Version: 2.1\nName: Foo_Bar\nVersion: 1.0\nRequires-Dist: b>=1\n"
        b"Requires-Dist: c; extra == 'x'\nRequires-Python: >=3.11\n\nlong description\n"
    )
    assert (meta.key, meta.version, meta.requires_dist, meta.requires_python) == (
        "foo-bar",
        "1.0",
        ("b>=1", "c; extra == 'x'"),
        ">=3.11",
    )


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"Name: a\n", "metadata without Name or Version"),
        (b"Name: a\nVersion: not.a.version!\n", "Version 'not.a.version!' is not a PEP 440 version"),
        (b"Name: a\nVersion: 1\nRequires-Dist: b >>> 1\n", "Requires-Dist 'b >>> 1' is not a PEP 508 requirement"),
        (b"Name: a\nVersion: 1\nRequires-Python: three\n", "Requires-Python 'three' is not a version specifier"),
        (b"Name: a\nVersion: 1\nSummary: \xff\n", "metadata is not UTF-8"),
    ],
)
def test_bad_core_metadata_is_refused_with_the_reason(raw, message):
    with pytest.raises(MetadataError, match=message.replace("(", r"\(").replace(")", r"\)").replace("!", "!")):
        parse_core_metadata(raw)


def test_core_metadata_size_bound():
    head = b"Name: a\nVersion: 1\n\n"
    parse_core_metadata(head + b"x" * (MAX_METADATA_BYTES - len(head)))  # at the bound
    with pytest.raises(MetadataError, match="larger than 4 MiB"):
        parse_core_metadata(head + b"x" * (MAX_METADATA_BYTES - len(head) + 1))


# -- a local stand-in index -------------------------------------------------------------------------------------


class _RangeHandler(http.server.SimpleHTTPRequestHandler):
    """Serves a folder, honouring single byte ranges (as files.pythonhosted.org does); counts what it sends."""

    sent: dict[str, int] = {}

    def log_message(self, *args):
        pass

    def send_head(self):
        range_header = self.headers.get("Range")
        path = Path(self.translate_path(self.path))
        if range_header is None or not path.is_file():
            return super().send_head()
        first, last = (int(x) for x in range_header.removeprefix("bytes=").split("-"))
        data = path.read_bytes()[first : last + 1]
        self.send_response(206)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        type(self).sent[path.name] = type(self).sent.get(path.name, 0) + len(data)
        import io

        return io.BytesIO(data)


@pytest.fixture
def stand_in_index(tmp_path):
    """project page /simple/demo/ with two wheels: one whose PEP 658 metadata file is served and named with its
    hash, one without (read from the wheel by range requests); a big payload shows the wheel is not downloaded."""
    files = tmp_path / "srv" / "files"
    files.mkdir(parents=True)
    with_meta = make_wheel(files, "demo", "1.0", requires=["b>=1"])
    without = make_wheel(files, "demo", "2.0", requires=["c; python_version < '3.12'"], payload="x" * 2_000_000)
    meta_bytes = b"Metadata-Version: 2.1\nName: demo\nVersion: 1.0\nRequires-Dist: b>=1\n"
    (files / (with_meta.name + ".metadata")).write_bytes(meta_bytes)
    page = tmp_path / "srv" / "simple" / "demo"
    page.mkdir(parents=True)
    page.joinpath("index.html").write_text(
        f'<a href="../../files/{with_meta.name}#sha256={sha256_of(with_meta)}" data-core-metadata="sha256='
        f'{hashlib.sha256(meta_bytes).hexdigest()}">{with_meta.name}</a>\n'
        f'<a href="../../files/{without.name}#sha256={sha256_of(without)}">{without.name}</a>\n'
    )
    handler = lambda *a, **k: _RangeHandler(*a, directory=str(tmp_path / "srv"), **k)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _RangeHandler.sent = {}
    yield f"http://127.0.0.1:{server.server_address[1]}/simple", with_meta, without, tmp_path
    server.shutdown()


def test_metadata_from_a_pep_658_file_and_from_a_wheel_by_ranges(stand_in_index):
    index, with_meta, without, tmp = stand_in_index
    page = project_files(index, "Demo")
    assert (
        page[with_meta.name].metadata
        == hashlib.sha256(b"Metadata-Version: 2.1\nName: demo\nVersion: 1.0\nRequires-Dist: b>=1\n").hexdigest()
    )
    assert page[without.name].metadata is None
    cache = MetadataCache(tmp / "cache")
    meta, _ = fetch_metadata(page[with_meta.name], expect_sha256=sha256_of(with_meta), cache=cache)
    assert meta.requires_dist == ("b>=1",)
    meta, _ = fetch_metadata(page[without.name], expect_sha256=sha256_of(without), cache=cache)
    assert meta.requires_dist == ("c; python_version < '3.12'",)
    assert _RangeHandler.sent[without.name] < 300_000  # a few 64 KiB blocks (directory, METADATA), not the 2 MB payload
    assert (tmp / "cache" / f"{sha256_of(without)}.METADATA").is_file()  # cached by the wheel's sha256


def test_a_metadata_file_that_does_not_match_its_hash_is_refused(stand_in_index):
    index, with_meta, _, tmp = stand_in_index
    (tmp / "srv" / "files" / (with_meta.name + ".metadata")).write_bytes(
        b"Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n"
    )  # a dependency dropped
    with pytest.raises(IndexReadError, match=r"\.metadata: sha256 [0-9a-f]{64}, the index page gives"):
        fetch_metadata(project_files(index, "demo")[with_meta.name])


def test_a_lock_hash_the_index_does_not_give_is_refused(stand_in_index):
    index, with_meta, _, _ = stand_in_index
    with pytest.raises(
        IndexReadError, match=f"{with_meta.name}: the index gives sha256 {sha256_of(with_meta)}, the lock {'ab' * 32}"
    ):
        fetch_metadata(project_files(index, "demo")[with_meta.name], expect_sha256="ab" * 32)


def test_recording_refuses_a_package_whose_wheels_disagree(stand_in_index):
    index, with_meta, without, _ = stand_in_index
    reader = IndexReader(index)
    wheel = lambda w: {"name": w.name, "url": f"{index}/../files/{w.name}", "hashes": {"sha256": sha256_of(w)}}
    agree = {
        "packages": [
            {
                "name": "demo",
                "version": "1.0",
                "wheels": [wheel(with_meta)],
                "tool": {"aipc-env": {"provenance": "index", "index": index}},
            }
        ]
    }
    assert record_metadata(agree, {index: reader}) == []
    assert agree["packages"][0]["tool"]["aipc-env"]["requires-dist"] == ["b>=1"]
    disagree = {
        "packages": [
            {
                "name": "demo",
                "version": "1.0",
                "wheels": [wheel(with_meta), wheel(without)],
                "tool": {"aipc-env": {"provenance": "index", "index": index}},
            }
        ]
    }
    assert record_metadata(disagree, {index: reader}) == [
        "demo 1.0: its wheels declare different Requires-Dist; one record per package cannot say which"
    ]
    sdist_only = {
        "packages": [
            {"name": "s", "version": "1", "sdist": {"url": "u"}, "tool": {"aipc-env": {"provenance": "index", "index": index}}}
        ]
    }
    assert record_metadata(sdist_only, {index: reader}) == [
        "s 1: only an sdist is locked; its metadata cannot be read without building it (lock a release with wheels)"
    ]


# -- the real PyPI ----------------------------------------------------------------------------------------------


@pytest.mark.pypi
def test_recorded_metadata_is_what_pypi_serves(tmp_path):
    """A sample of the shipped locks' recorded metadata, read again from PyPI's simple API and PEP 658 files; one
    wheel's METADATA also read from the wheel itself by range requests (files.pythonhosted.org honours them)."""
    import random

    from aipc_env.lock.coremeta import normal_requirement
    from aipc_env.lock.lockfile import provenance_of, read_pylock
    from aipc_env.lock.requires import wheel_name
    from aipc_env.lock.simple_index import _metadata_from_wheel

    packages = [
        pkg
        for path in sorted(LOCKS.glob("*/pylock.*.toml"))
        for pkg in read_pylock(path).packages
        if provenance_of(pkg)["provenance"] == "index"
    ]
    sample = random.Random(32).sample(packages, 12)
    reader = IndexReader("https://pypi.org/simple", MetadataCache(tmp_path / "cache"))
    for pkg in sample:
        served = reader.metadata(pkg.name, wheel_name(pkg.wheels[0]), pkg.wheels[0].hashes["sha256"])
        recorded = provenance_of(pkg)
        assert {normal_requirement(r) for r in served.requires_dist} == {
            normal_requirement(r) for r in recorded["requires-dist"]
        }, pkg.name
        assert served.requires_python == recorded.get("requires-python"), pkg.name
    small = next(p for p in sample if p.wheels)
    file = reader.page(small.name)[wheel_name(small.wheels[0])]
    by_ranges = parse_core_metadata(_metadata_from_wheel(file))
    assert by_ranges.same_requirements(reader.metadata(small.name, file.filename, small.wheels[0].hashes["sha256"]))


# -- lock values that would reach generated files (issue 34) -----------------------------------------------------


def test_a_package_name_with_a_newline_is_refused_before_anything_is_written(tmp_path):
    root = tmp_path / "lockfiles"
    shutil.copytree(LOCKS / "xpu-2.12", root / "xpu-2.12")
    path = root / "xpu-2.12" / "pylock.linux-64.toml"
    text = path.read_text(encoding="utf-8")
    path.write_text(
        text.replace('name = "pyelftools"', 'name = "pyelftools\\n--extra-index-url https://evil.example/simple"', 1),
        encoding="utf-8",
    )
    check = run_cli("lock", "check", "--lock-root", str(root))
    assert check.returncode == ExitCode.USAGE and str(path) in check.stderr and "is not a package name" in check.stderr
    render = run_cli("container", "render", "--lock", str(path), "--gpu-runtime", "none", "--out", str(tmp_path / "c"))
    assert render.returncode == ExitCode.USAGE and not (tmp_path / "c").exists()


@pytest.mark.parametrize(
    ("sha", "refused"),
    [
        ("ab" * 32, False),  # a digest
        ("ab" * 32 + "\n--extra-index-url https://evil.example/simple", True),
        ("AB" * 32, True),  # not lowercase
        ("ab" * 31, True),  # 62 digits
    ],
)
def test_a_sha256_that_is_not_a_digest_never_reaches_the_requirements(tmp_path, sha, refused):
    from aipc_env.errors import InputError
    from aipc_env.lock.artifacts import hashed_requirements, select_artifacts
    from aipc_env.lock.lockfile import Pylock

    lock = Pylock.model_validate(
        {
            "lock_version": "1.0",
            "packages": [
                {
                    "name": "demo",
                    "version": "1.0",
                    "wheels": [{"url": "https://x.org/demo-1.0-py3-none-any.whl", "hashes": {"sha256": sha}}],
                }
            ],
        }
    )
    if refused:
        with pytest.raises(InputError, match="is not a sha256 digest"):
            select_artifacts(lock, "3.12", tmp_path / "pylock.toml")
    else:
        assert hashed_requirements(select_artifacts(lock, "3.12", tmp_path / "pylock.toml")).endswith(
            f"demo==1.0 --hash=sha256:{sha}\n"
        )


def test_xpu_wheels_relabelled_as_index_while_lock_meta_says_manifest_are_named(tmp_path):
    root = tmp_path / "lockfiles"
    shutil.copytree(LOCKS / "xpu-2.12", root / "xpu-2.12")
    path = root / "xpu-2.12" / "pylock.win-64.toml"
    text = path.read_text(encoding="utf-8")
    start = text.index('[[packages]]\nname = "torch"\n')
    end = text.index("[[packages]]", start + 1)
    block = text[start:end]
    tool = block.index("[packages.tool.aipc-env]")
    relabelled = block[:tool] + '[packages.tool.aipc-env]\nprovenance = "index"\nindex = "https://evil.example/simple"\n\n'
    path.write_text(text[:start] + relabelled + text[end:], encoding="utf-8")
    result = run_cli("lock", "check", "--lock-root", str(root), "--json")
    problems = json.loads(result.stdout)["pairs"][0]["problems"]
    assert result.returncode == ExitCode.PROBLEMS
    assert (
        f"{path}: torch 2.12.0+xpu says provenance `index`, but lock-meta.json says the XPU wheels came from "
        "environments/xpu-wheels.yaml" in problems
    )


def test_a_lock_without_recorded_metadata_reads_its_index_and_names_what_it_cannot(tmp_path, matrix):
    """A lock made before metadata was recorded is closed over its index's metadata; where the index cannot be
    reached the closure is a problem, never a pass."""
    import tomli_w

    from aipc_env.lock.check import check_pair_lock

    root = tmp_path / "lockfiles"
    shutil.copytree(LOCKS / "xpu-2.12", root / "xpu-2.12")
    for path in (root / "xpu-2.12").glob("pylock.*.toml"):
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        for pkg in data["packages"]:
            for key in ("requires-dist", "requires-python"):
                pkg["tool"]["aipc-env"].pop(key, None)
        path.write_text(tomli_w.dumps(data), encoding="utf-8")

    class Unreachable(dict):
        def __missing__(self, url):
            return IndexReader("https://127.0.0.1:9/simple")

    problems = check_pair_lock(root / "xpu-2.12", matrix, readers=Unreachable())
    assert problems and all("closure not checked" in p for p in problems)
    assert "https://127.0.0.1:9/simple/" in problems[0] and "metadata could not be read" in problems[0]
    offline = check_pair_lock(root / "xpu-2.12", matrix)  # no reader at all: said, not passed
    assert offline and "record no metadata and no index was asked for it" in offline[0]


@pytest.mark.parametrize("name", ["../../escaped.whl", "sub/dir.whl", "..", "C:evil.whl", "a\nb.whl"])
def test_lock_verify_never_writes_a_file_the_lock_names_outside_its_folder(tmp_path, name):
    """`lock verify` downloads each public-lockfile wheel under the name the lock gives: a name that is not a plain
    file name is reported unverified and nothing is fetched or written (it used to be joined to the temp folder
    as it was)."""
    import tomli_w

    root = tmp_path / "locks" / "lockfiles"
    shutil.copytree(LOCKS / "xpu-2.12", root / "xpu-2.12")
    path = root / "xpu-2.12" / "pylock.win-64.toml"
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    torch = next(p for p in data["packages"] if p["name"] == "torch")
    torch["wheels"][0]["name"] = name
    path.write_text(tomli_w.dumps(data), encoding="utf-8")
    (root / "xpu-2.12" / "pylock.linux-64.toml").unlink()
    result = run_cli(
        "lock",
        "verify",
        "--pair",
        "xpu-2.12",
        "--lock-root",
        str(root),
        "--json",
        "--mirror",
        "https://127.0.0.1:9/whl",
        timeout=120,
    )
    report = json.loads(result.stdout)["reports"][0]
    bad = [c for c in report["checked"] if c["file"] == name[:200]]
    assert result.returncode == ExitCode.PROBLEMS and len(bad) == 1
    assert bad[0]["status"] == "unverified" and bad[0]["reason"].startswith("not fetched: wheel file name")
    assert not (tmp_path / "escaped.whl").exists() and not (tmp_path / "locks" / "escaped.whl").exists()


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p.write_text("a = " + "[" * 2000 + "]" * 2000 + "\n"), "nested deeper than 64 levels"),
        (lambda p: p.write_bytes(b"lock-version = '1.0'\n# \xff\n"), "is not UTF-8"),
    ],
)
def test_a_hostile_lock_file_is_a_named_input_error_never_a_crash(tmp_path, make, message):
    root = tmp_path / "lockfiles"
    shutil.copytree(LOCKS / "xpu-2.12", root / "xpu-2.12")
    path = root / "xpu-2.12" / "pylock.linux-64.toml"
    path.unlink()
    make(path)
    result = run_cli("lock", "check", "--lock-root", str(root), timeout=120)
    assert result.returncode == ExitCode.USAGE, result.stderr[-2000:]
    assert message in result.stderr and str(path) in result.stderr and "Traceback" not in result.stderr


def test_lock_check_pair_and_lock_root_stay_what_they_name(tmp_path):
    outside = tmp_path / "x"
    shutil.copytree(LOCKS / "xpu-2.12", outside)
    (tmp_path / "lockfiles").mkdir()
    escaped = run_cli("lock", "check", "--lock-root", str(tmp_path / "lockfiles"), "--pair", "../x")
    assert escaped.returncode == ExitCode.USAGE and "pair id '../x' is not a plain file name" in escaped.stderr
    shutil.copytree(LOCKS / "xpu-2.12", tmp_path / "lockfiles" / "xpu-2.12")
    relative = run_cli("lock", "check", "--lock-root", "lockfiles", "--pair", "xpu-2.12", cwd=tmp_path)
    assert relative.returncode == ExitCode.OK, relative.stderr
    assert (
        str(tmp_path / "lockfiles") in run_cli("lock", "check", "--lock-root", "lockfiles", "--json", cwd=tmp_path).stdout
    )  # reported absolute


@pytest.mark.parametrize("command", [["doctor", "--facts"], ["resolve", "--pip-list"], ["fleet", "winget", "--check"]])
def test_an_endless_input_is_cut_at_its_bound_not_read_to_the_end(command):
    """/dev/zero has no size to check beforehand: the reader stops at its bound and names the file."""
    result = run_cli(*command, "/dev/zero", timeout=120)
    assert result.returncode == ExitCode.USAGE, result.stderr[-2000:]
    assert "/dev/zero" in result.stderr and "larger than" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("delta", [0, -1, 1])
def test_lock_meta_counts_must_equal_the_locks(tmp_path, delta):
    """lock-meta.json's provenance counts are what the locks hold: one count off (either way) is named."""
    root = tmp_path / "lockfiles"
    shutil.copytree(LOCKS / "xpu-2.12", root / "xpu-2.12")
    meta_file = root / "xpu-2.12" / "lock-meta.json"
    meta = json.loads(meta_file.read_text(encoding="utf-8"))
    said = dict(meta["provenance"])
    meta["provenance"]["index"] += delta
    meta_file.write_text(json.dumps(meta, indent=2), encoding="utf-8")
    result = run_cli("lock", "check", "--lock-root", str(root), "--json", timeout=300)
    problems = json.loads(result.stdout)["pairs"][0]["problems"]
    counted = [p for p in problems if "says the locks hold" in p]
    if delta == 0:
        assert result.returncode == 0 and problems == [], problems
    else:
        assert result.returncode == ExitCode.PROBLEMS and counted == [
            f"{meta_file}: says the locks hold {said['index'] + delta} index, {said['public-lockfile']} "
            f"public-lockfile, but they hold {said['index']} index, {said['public-lockfile']} public-lockfile: a "
            "lock was edited after it was made; re-lock: nox -s lock -- --pair xpu-2.12"
        ]
