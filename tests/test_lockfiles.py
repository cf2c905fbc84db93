"""The shipped locks (issue 19): every one passes `lock check`, its torch/torchvision/Triton entries are the
manifest's (never a superseded hash), its PyPI pins and hashes are what PyPI serves, uv accepts it, tampering is
refused naming the row, `lock verify` never passes without fetching, and env, container and bundle use them."""

from __future__ import annotations

import hashlib
import http.server
import json
import random
import re
import shutil
import subprocess
import threading
import tomllib
import urllib.request
from pathlib import Path

import pytest

from aipc_env.errors import ExitCode
from aipc_env.lock.check import check_pair_lock
from aipc_env.lock.lockfile import provenance_of, pylock_path, read_meta, read_pylock
from aipc_env.lock.wheels import WheelEntry, WheelManifest, load_wheel_manifest
from tests.conftest import ROOT, find_tool, require_tool, run_cli
from tests.support.wheels import make_wheel

SHIPPED = ("xpu-2.7", "xpu-2.9", "xpu-2.10", "xpu-2.12")
LOCKS = ROOT / "lockfiles"
PLATFORMS = ("win-64", "linux-64")


def _copy_lock(tmp_path: Path, pair: str) -> Path:
    root = tmp_path / "lockfiles"
    shutil.copytree(LOCKS / pair, root / pair)
    return root


def test_the_four_complete_pairs_are_shipped_and_pass_lock_check(matrix):
    assert sorted(p.name for p in LOCKS.iterdir() if p.is_dir()) == sorted(SHIPPED)
    result = run_cli("lock", "check", "--json")
    assert result.returncode == ExitCode.OK, result.stdout[-3000:]
    report = json.loads(result.stdout)
    assert {p["pair"] for p in report["pairs"]} == set(SHIPPED)
    for status in report["pairs"]:
        assert status["problems"] == []
        # said, not invented: the interpreter the public records give, and the Pythons it leaves to the fallback
        assert any(
            n.startswith("conda layer: Python 3.12.5 (assembled from public lock records") and "3.11, 3.13: no conda layer" in n
            for n in status["notes"]
        )


@pytest.mark.parametrize("pair", SHIPPED)
def test_public_artifacts_are_the_manifests_current_entries(pair, matrix):
    manifest = load_wheel_manifest()
    current = manifest.by_file()
    superseded = {w.sha256 for w in manifest.wheels if w.status == "superseded"}
    meta = read_meta(LOCKS / pair)
    row = matrix.get(pair)
    assert meta.xpu_source == "manifest" and meta.torch in row.torch and meta.conda_layer["status"] == "locked"
    for platform in PLATFORMS:
        lock = read_pylock(pylock_path(LOCKS / pair, platform))
        public = {p.key: p for p in lock.packages if provenance_of(p)["provenance"] == "public-lockfile"}
        expected = {"torch", "torchvision"} | ({row.triton.key} if row.triton.applies_to(platform) else set())
        assert set(public) == expected
        assert public["torch"].version == f"{meta.torch}+xpu"
        assert public["torchvision"].version == f"{row.torchvision_for(meta.torch)}+xpu"
        for pkg in public.values():
            names = set()
            for wheel in pkg.wheels:
                entry = current[wheel.model_extra["name"]]
                assert (wheel.url, wheel.hashes["sha256"]) == (entry.url, entry.sha256)
                assert wheel.hashes["sha256"] not in superseded
                names |= set(entry.python_minors)
            assert names >= set(meta.pythons), (pkg.name, names)
            sources = provenance_of(pkg)["sources"]
            assert all(sources[w.model_extra["name"]]["repositories"] for w in pkg.wheels)
        others = [p for p in lock.packages if provenance_of(p)["provenance"] != "public-lockfile"]
        for p in others:  # resolved by uv against PyPI, with the core metadata PyPI serves for them recorded
            tool = provenance_of(p)
            assert (tool["provenance"], tool["index"]) == ("index", meta.pypi_url)
            assert isinstance(tool["requires-dist"], list) and set(tool) <= {
                "provenance",
                "index",
                "requires-dist",
                "requires-python",
            }


def test_superseded_hashes_exist_in_the_manifest_and_in_no_lock():
    manifest = load_wheel_manifest()
    superseded = [w for w in manifest.wheels if w.status == "superseded"]
    assert len(superseded) == 8 and all(w.package == "triton-xpu" and w.version == "3.7.1" for w in superseded)
    text = "".join(p.read_text(encoding="utf-8") for p in LOCKS.rglob("pylock.*.toml"))
    assert not [w.file for w in superseded if w.sha256 in text]


def _pypi_sample(count: int) -> list[tuple[str, str, str, str]]:
    rng = random.Random(19)
    rows = []
    for pair in SHIPPED:
        for platform in PLATFORMS:
            for pkg in read_pylock(pylock_path(LOCKS / pair, platform)).packages:
                if provenance_of(pkg)["provenance"] == "index":
                    for wheel in pkg.wheels:
                        rows.append((pkg.name, pkg.version, wheel.url.rsplit("/", 1)[-1], wheel.hashes["sha256"]))
    rows = sorted(set(rows))
    return rng.sample(rows, count)


def _pypi_json(name: str) -> dict | None:
    try:
        with urllib.request.urlopen(f"https://pypi.org/pypi/{name}/json", timeout=60) as response:
            return json.load(response)
    except OSError:
        return None


@pytest.mark.pypi
def test_pypi_artifacts_are_what_pypi_serves():
    """A sample of the locked PyPI wheels, asked of PyPI's JSON API: the version exists and the file's sha256 is
    the one PyPI publishes."""
    sample = _pypi_sample(12)
    answers = {n: _pypi_json(n) for n, _, _, _ in sample}
    require_tool(None if all(answers.values()) else "PyPI's JSON API cannot be reached")
    for name, version, filename, sha in sample:
        files = {f["filename"]: f["digests"]["sha256"] for f in answers[name]["releases"][version]}
        assert files.get(filename) == sha, (name, version, filename)


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("pair", SHIPPED)
def test_uv_accepts_each_pylock(pair, platform, tmp_path):
    """uv reads the pylock (tool tables, the manifest's wheels, per-Python markers) and plans an install for this
    machine's Python on the lock's platform; nothing is downloaded."""
    uv = find_tool("uv")
    require_tool(None if uv else "uv is not installed")
    import sys

    venv = tmp_path / "venv"
    subprocess.run([uv, "venv", "-q", "-p", sys.executable, str(venv)], check=True)
    target = {"win-64": "x86_64-pc-windows-msvc", "linux-64": "x86_64-unknown-linux-gnu"}[platform]
    result = subprocess.run(
        [
            uv,
            "pip",
            "sync",
            "--preview-features",
            "pylock",
            "--dry-run",
            "--python",
            str(venv / "bin" / "python"),
            "--python-platform",
            target,
            str(pylock_path(LOCKS / pair, platform)),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    meta = read_meta(LOCKS / pair)
    assert f"+ torch=={meta.torch}+xpu" in result.stderr


def test_an_edited_manifest_hash_is_refused_naming_the_file_and_both_hashes(tmp_path, matrix):
    root = _copy_lock(tmp_path, "xpu-2.12")
    path = pylock_path(root / "xpu-2.12", "win-64")
    lock = tomllib.loads(path.read_text(encoding="utf-8"))
    torch = next(p for p in lock["packages"] if p["name"] == "torch")
    old = torch["wheels"][0]["hashes"]["sha256"]
    new = hashlib.sha256(b"another file").hexdigest()
    path.write_text(path.read_text(encoding="utf-8").replace(old, new), encoding="utf-8")
    result = run_cli("lock", "check", "--lock-root", str(root))
    assert result.returncode == ExitCode.PROBLEMS
    assert torch["wheels"][0]["name"] in result.stdout and old in result.stdout and new in result.stdout
    assert "environments/xpu-wheels.yaml" in result.stdout


def test_a_changed_matrix_row_is_refused_naming_the_row(tmp_path):
    import yaml

    root = _copy_lock(tmp_path, "xpu-2.9")
    data = yaml.safe_load((ROOT / "environments" / "matrix.yaml").read_text(encoding="utf-8"))
    row = next(p for p in data["pairs"] if p["id"] == "xpu-2.9")
    row["bitsandbytes_min"] = "0.49.0"
    changed = tmp_path / "matrix.yaml"
    changed.write_text(yaml.safe_dump(data), encoding="utf-8")
    result = run_cli("lock", "check", "--lock-root", str(root), "--matrix", str(changed))
    assert result.returncode == ExitCode.PROBLEMS and "older matrix row of xpu-2.9" in result.stdout
    assert run_cli("lock", "check", "--lock-root", str(root)).returncode == ExitCode.OK


def test_a_superseded_or_unknown_wheel_is_refused(tmp_path, matrix):
    root = _copy_lock(tmp_path, "xpu-2.12")
    manifest = load_wheel_manifest()
    stale = next(w for w in manifest.wheels if w.status == "superseded" and "cp312" in w.file and "win" in w.file)
    good = manifest.by_file()[stale.file]
    path = pylock_path(root / "xpu-2.12", "win-64")
    path.write_text(path.read_text(encoding="utf-8").replace(good.sha256, stale.sha256), encoding="utf-8")
    problems = check_pair_lock(root / "xpu-2.12", matrix, manifest)
    assert any(stale.file in p and stale.sha256 in p and good.sha256 in p for p in problems)


def test_lock_verify_here_lists_every_unverified_artifact():
    result = run_cli("lock", "verify", "--pair", "xpu-2.12", timeout=300)
    assert result.returncode == ExitCode.PROBLEMS
    assert "0 verified, 0 changed, 18 unverified" in result.stdout  # torch, torchvision, Triton x 3 Pythons x 2
    assert result.stdout.count("unverified torch-2.12.0+xpu-cp3") == 6
    assert "download.pytorch.org" in result.stdout


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def _stand_in_mirror(tmp_path: Path, pair: str, requires=None) -> tuple[Path, Path]:
    """A copy of the shipped lock and a folder serving, under each public-lockfile artifact's name, a real wheel
    whose METADATA is what environments/xpu-wheels.yaml records (`requires(name, recorded)` may change it); the copy's
    hashes are those of the stand-ins."""
    manifest = load_wheel_manifest()
    root = _copy_lock(tmp_path, pair)
    served = tmp_path / "mirror"
    build = tmp_path / "build"
    for platform in PLATFORMS:
        path = pylock_path(root / pair, platform)
        text = path.read_text(encoding="utf-8")
        for pkg in read_pylock(path).packages:
            if provenance_of(pkg)["provenance"] != "public-lockfile":
                continue
            record = manifest.metadata_for(pkg.name, pkg.version, platform)
            recorded = record.requires_dist
            for wheel in pkg.wheels:
                name = wheel.model_extra["name"]
                tag = name.removesuffix(".whl").split("-", 2)[2]
                lines = requires(name, recorded) if requires else recorded
                made = make_wheel(build, pkg.name, pkg.version, requires=lines, tag=tag, requires_python=record.requires_python)
                served.mkdir(exist_ok=True)
                shutil.move(made, served / name)
                text = text.replace(wheel.hashes["sha256"], hashlib.sha256((served / name).read_bytes()).hexdigest())
        path.write_text(text, encoding="utf-8")
    return root, served


def _verify_from(served: Path, root: Path, pair: str):
    handler = lambda *a, **k: _Quiet(*a, directory=str(served), **k)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        return run_cli(
            "lock",
            "verify",
            "--pair",
            pair,
            "--lock-root",
            str(root),
            "--mirror",
            f"http://127.0.0.1:{server.server_address[1]}",
            timeout=300,
        )
    finally:
        server.shutdown()


def test_lock_verify_of_wheels_as_recorded_passes(tmp_path):
    root, served = _stand_in_mirror(tmp_path, "xpu-2.12")
    result = _verify_from(served, root, "xpu-2.12")
    assert result.returncode == ExitCode.OK, result.stdout
    assert "18 verified, 0 changed, 0 unverified" in result.stdout


def test_lock_verify_names_a_reuploaded_file_and_both_hashes(tmp_path):
    """A mirror serves the locked files: the one whose bytes differ (a re-upload) is an error with both hashes;
    the others verify."""
    root, served = _stand_in_mirror(tmp_path, "xpu-2.12")
    changed = next(served.glob("torchvision-*cp311*win_amd64.whl"))
    changed.write_bytes(b"re-uploaded")
    result = _verify_from(served, root, "xpu-2.12")
    assert result.returncode == ExitCode.PROBLEMS
    line = next(ln for ln in result.stdout.splitlines() if "CHANGED" in ln)
    assert changed.name in line and hashlib.sha256(b"re-uploaded").hexdigest() in line
    assert "17 verified, 1 changed, 0 unverified" in result.stdout


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (
            lambda recorded: [*recorded, "numpy>=2"],
            "Requires-Dist: the wheel also requires numpy>=2, which environments/xpu-wheels.yaml does not record",
        ),
        (
            lambda recorded: recorded[1:],
            "Requires-Dist: environments/xpu-wheels.yaml records pyelftools, which the wheel does not require",
        ),
    ],
)
def test_lock_verify_names_the_triton_metadata_field_that_differs(tmp_path, change, field):
    target = "triton_xpu-3.7.1-cp312-cp312-win_amd64.whl"
    root, served = _stand_in_mirror(
        tmp_path, "xpu-2.12", requires=lambda name, recorded: change(recorded) if name == target else recorded
    )
    result = _verify_from(served, root, "xpu-2.12")
    assert result.returncode == ExitCode.PROBLEMS
    assert "18 verified, 0 changed, 0 unverified" in result.stdout
    assert [ln.strip() for ln in result.stdout.splitlines() if "Requires-" in ln] == [f"Requires-Dist: {target}: {field}"]


def test_requires_dist_is_compared_with_the_row(matrix):
    from aipc_env.lock.verify import requires_dist_problems

    pair = matrix.get("xpu-2.12")
    requires = [
        "intel-cmplr-lib-rt==2025.3.2",
        "intel-cmplr-lib-ur==2025.3.2",
        "intel-cmplr-lic-rt==2025.3.2",
        "intel-sycl-rt==2025.3.2",
        "onemkl-license==2025.3.1",
        "onemkl-sycl-blas==2025.3.1",
        "onemkl-sycl-dft==2025.3.1",
        "onemkl-sycl-lapack==2025.3.1",
        "onemkl-sycl-rng==2025.3.1",
        "onemkl-sycl-sparse==2025.3.1",
        "dpcpp-cpp-rt==2025.3.2",
        "intel-opencl-rt==2025.3.2",
        "intel-openmp==2025.3.2",
        "mkl==2025.3.1",
        "tbb==2022.3.1",
        "tcmlib==1.4.1",
        "umf==1.0.3",
        "intel-pti==0.16.0",
        "oneccl==2021.17.2; platform_system == 'Linux' and platform_machine == 'x86_64'",
        "oneccl-devel==2021.17.2; platform_system == 'Linux' and platform_machine == 'x86_64'",
        "impi-rt==2021.17.2; platform_system == 'Linux' and platform_machine == 'x86_64'",
        "triton-xpu==3.7.1",
        "filelock",
        "typing-extensions>=4.10.0",
        "setuptools<82",
        "sympy>=1.13.3",
        "networkx>=2.5.1",
        "jinja2",
        "fsspec>=0.8.5",
        "opt-einsum>=3.3; extra == 'opt-einsum'",
    ]
    assert requires_dist_problems(requires, pair, "linux-64", "3.12") == []
    assert requires_dist_problems(requires, pair, "win-64", "3.12") == []
    drifted = [r.replace("umf==1.0.3", "umf==1.0.4") for r in requires] + ["numpy==2.0", "pyyaml"]
    assert requires_dist_problems(drifted, pair, "linux-64", "3.12") == [
        "umf: torch requires ==1.0.4, the matrix row pins 1.0.3",
        "torch pins numpy==2.0 which the matrix row does not list (runtime_pins)",
    ]
    assert any(
        "tcmlib" in p for p in requires_dist_problems([r for r in requires if "tcmlib" not in r], pair, "linux-64", "3.12")
    )


def test_partial_pairs_are_refused_with_what_is_missing(tmp_path):
    result = run_cli(
        "lock", "--pair", "xpu-2.13", "--from-manifest", "--pip-only", "--lock-root", str(tmp_path / "locks"), timeout=300
    )
    assert result.returncode == ExitCode.PROBLEMS
    assert "xpu-2.13 cannot be locked from public hashes" in result.stderr and "win-64" in result.stderr
    assert not (tmp_path / "locks" / "xpu-2.13").exists()


@pytest.mark.slow
def test_an_offline_lock_is_made_for_real_and_checks_clean(tmp_path, matrix):
    root = tmp_path / "locks"
    result = run_cli("lock", "--pair", "xpu-2.10", "--from-manifest", "--lock-root", str(root), timeout=600)
    assert result.returncode == ExitCode.OK, result.stderr[-3000:]
    assert check_pair_lock(root / "xpu-2.10", matrix) == []
    meta = read_meta(root / "xpu-2.10")
    assert meta.provenance["public-lockfile"] == 6 and meta.pythons == ["3.11", "3.12", "3.13"]
    assert oct((root / "xpu-2.10").stat().st_mode)[-3:] != "700"


def test_manifest_model_refuses_inconsistent_entries():
    base = load_wheel_manifest().wheels[0].model_dump()
    with pytest.raises(ValueError, match="not torch"):
        WheelEntry.model_validate({**base, "package": "torch"})
    with pytest.raises(ValueError, match="needs its sha256"):
        WheelEntry.model_validate({**base, "sha256": None})
    with pytest.raises(ValueError, match="two current entries"):
        WheelManifest.model_validate({"schema_version": 1, "index": "x", "wheels": [base, base]})


def test_env_dry_run_prints_the_plan():
    result = run_cli("env", "--pair", "xpu-2.12", "--dry-run")
    assert result.returncode == ExitCode.OK, result.stderr
    assert "download.pytorch.org (public-lockfile)" in result.stdout and "files.pythonhosted.org (index)" in result.stdout
    assert "size ?" in result.stdout and "GB known" in result.stdout and "nothing was changed" in result.stdout


def test_container_render_uses_the_shipped_lock(tmp_path):
    result = run_cli("container", "render", "--pair", "xpu-2.12", "--gpu-runtime", "none", "--out", str(tmp_path / "ctx"))
    assert result.returncode == ExitCode.OK, result.stderr
    torch_layer = (tmp_path / "ctx" / "requirements.torch.txt").read_text(encoding="utf-8")
    # the default base is Debian 13: its Python 3.13 picks the cp313 wheel
    cp313 = load_wheel_manifest().by_file()["torch-2.12.0+xpu-cp313-cp313-linux_x86_64.whl"]
    assert f"torch==2.12.0+xpu --hash=sha256:{cp313.sha256}" in torch_layer


def _pinned(requirements: str) -> dict[str, str]:
    return dict(line.split(" ", 1)[0].split("==") for line in requirements.splitlines() if "==" in line)


def test_torch_and_what_its_release_pins_are_an_image_layer_of_their_own(tmp_path, matrix):
    """The pair's torch, Triton and Intel runtime pins (the matrix's row, read by the test) are installed in a layer
    before the lock is COPYed; every other locked package after it, each package in exactly one of the two; a changed
    pin outside torch's stack leaves that layer's instructions and requirements byte for byte as they were (what the
    engine's layer cache keys on; tests/test_container.py checks the real build reuses it)."""
    lock = LOCKS / "xpu-2.12" / "pylock.linux-64.toml"
    ctx = tmp_path / "ctx"
    assert run_cli("container", "render", "--lock", str(lock), "--gpu-runtime", "none", "--out", str(ctx)).returncode == 0
    torch_layer = _pinned((ctx / "requirements.torch.txt").read_text(encoding="utf-8"))
    rest = _pinned((ctx / "requirements.lock.txt").read_text(encoding="utf-8"))
    pair = matrix.get("xpu-2.12")
    expected = {"torch", pair.triton.name, *(pin.name for pin in pair.pins_for("linux-64"))}
    assert set(torch_layer) == expected and not set(torch_layer) & set(rest)
    assert {"diffusers", "peft", "bitsandbytes", "pyyaml"} <= set(rest)
    assert len(torch_layer) + len(rest) == len(json.loads((ctx / "aipc-image.json").read_text(encoding="utf-8"))["wheels"])
    containerfile = (ctx / "Containerfile").read_text(encoding="utf-8")
    head = containerfile[: containerfile.index("COPY pylock.linux-64.toml")]
    assert "-r /opt/aipc-env-lock/requirements.torch.txt" in head and "requirements.lock.txt" not in head
    # a pin outside torch's stack changed: the same torch layer
    text = lock.read_text(encoding="utf-8")
    version = re.search(r'name = "pyyaml"\nversion = "([^"]+)"', text)
    assert version
    changed = tmp_path / "changed" / "pylock.linux-64.toml"
    changed.parent.mkdir()
    changed.write_text(text.replace(version.group(0), version.group(0).replace(version.group(1), "6.0.1")), encoding="utf-8")
    other = tmp_path / "ctx-changed"
    assert run_cli("container", "render", "--lock", str(changed), "--gpu-runtime", "none", "--out", str(other)).returncode == 0
    assert (other / "requirements.torch.txt").read_bytes() == (ctx / "requirements.torch.txt").read_bytes()
    assert _pinned((other / "requirements.lock.txt").read_text(encoding="utf-8"))["pyyaml"] == "6.0.1"
    other_file = (other / "Containerfile").read_text(encoding="utf-8")
    assert other_file[: other_file.index("COPY pylock.linux-64.toml")] == head


def test_bundle_names_the_unreachable_artifact_and_leaves_nothing(tmp_path):
    out = tmp_path / "bundle"
    result = run_cli("fleet", "bundle", "--pair", "xpu-2.12", "--platform", "linux-64", "--out", str(out), timeout=600)
    assert result.returncode == ExitCode.PROBLEMS, result.stderr[-2000:]
    assert "torch-2.12.0+xpu-cp312-cp312-linux_x86_64.whl" in result.stderr
    assert "https://download.pytorch.org/whl/xpu/torch-2.12.0%2Bxpu-cp312-cp312-linux_x86_64.whl" in result.stderr
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".bundle")]


def test_the_doctor_judges_an_env_against_its_pairs_lock(matrix):
    from aipc_env.doctor import run_checks
    from aipc_env.doctor.checks.base import Status
    from aipc_env.facts.model import Facts
    from aipc_env.trainenv.drift import locked_packages
    from tests.conftest import MACHINES

    facts = Facts.model_validate_json((MACHINES / "linux_arc_a770.json").read_text(encoding="utf-8"))
    lock = read_pylock(pylock_path(LOCKS / "xpu-2.12", "linux-64"))
    env = facts.training_env
    env.python_version = "3.12.7"
    env.distributions = {name: version for name, (version, _) in locked_packages(lock, "linux-64", "3.12").items()}
    env.distributions["jupyter"] = "1.1.1"

    def lock_for(pair, platform):
        return read_pylock(pylock_path(LOCKS / pair, platform)) if (LOCKS / pair).is_dir() else None

    (good,) = run_checks(facts, matrix, ["env-lock"], lock_for=lock_for).findings
    assert good.status == Status.OK and "1 extra" in good.seen
    env.distributions["transformers"] = "4.0.0"
    del env.distributions["umf"]
    (bad,) = run_checks(facts, matrix, ["env-lock"], lock_for=lock_for).findings
    assert bad.status == Status.FAIL and "2 package(s) differ from the xpu-2.12 lock" in bad.seen
    assert "--prefix" in bad.fix and any("transformers" in d for d in bad.details)
