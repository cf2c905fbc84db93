"""`aipc-env patch-requirements` on the real upstream requirements.txt (460ba1a): the edits, twice in a row, user
files never damaged (mode, owner, symlink, read-only, mixed line endings, NUL bytes), and a real resolution with
uv for Windows and Linux that keeps the pair's torch and pulls no nvidia-* package."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from aipc_env.matrix import load_matrix
from aipc_env.trainenv.requirements import apply_edits, edit_requirements, split_lines
from tests.conftest import run_cli

XPU = "https://download.pytorch.org/whl/xpu"
LOCKED = {"transformers": "5.24.0", "pydantic": "2.14.4", "matplotlib": "3.11.2", "diffusers": "0.42.1"}
PIP_LAYER = ["transformers>=4.56", "diffusers>=0.36", "pydantic>=2.7"]


@pytest.fixture(scope="module")
def pair():
    return load_matrix().get("xpu-2.13")


def _edit(path: Path, pair, **kw):
    return apply_edits(
        path,
        pair=pair,
        xpu_index=XPU,
        pip_layer=kw.pop("pip_layer", PIP_LAYER),
        locked=kw.pop("locked", LOCKED),
        dry_run=kw.pop("dry_run", False),
    )


def test_upstream_file(upstream_clone, pair):
    path = upstream_clone / "requirements.txt"
    original = path.read_bytes()
    result, _, backup = _edit(path, pair)
    lines = path.read_text().splitlines()
    assert "# transformer_engine[pytorch]" in lines
    assert lines[lines.index("# transformer_engine[pytorch]") - 1].startswith("# aipc-env: transformer_engine")
    assert any(ln.startswith("bitsandbytes>=0.50.2") for ln in lines) and "bitsandbytes" not in lines
    # setuptools==69.5.1 cannot install beside torch 2.13 (setuptools>=77.0.3): relaxed, the old pin noted
    assert any(ln.startswith("setuptools>=77.0.3") and "was setuptools==69.5.1" in ln for ln in lines)
    # the pair's torch and torchvision, from the XPU index named in the file
    assert lines[-3:] == [f"--extra-index-url {XPU}", "torch==2.13.0+xpu", "torchvision==0.28.0+xpu"]
    report = "\n".join(result.report)
    assert "transformers==4.52.4 conflicts with aipc-env's pip layer (transformers>=4.56)" in report
    assert "transformers==4.52.4 contradicts the lock (transformers 5.24.0)" in report
    assert "setuptools is listed again (first on line 18)" in report
    assert backup.read_bytes() == original
    # a second run is a no-op: nothing written, the backup still holds the original
    mtime = path.stat().st_mtime_ns
    again, diff2, _ = _edit(path, pair)
    assert not again.changed and diff2 == "" and path.stat().st_mtime_ns == mtime
    assert backup.read_bytes() == original


def test_conflicts_are_reported_without_a_lock(upstream_clone, pair):
    result, _, _ = _edit(upstream_clone / "requirements.txt", pair, locked=None, dry_run=True)
    assert any("transformers==4.52.4 conflicts with aipc-env's pip layer" in r for r in result.report)


def test_crlf_comments_extras_markers(pair):
    text = (
        "# top comment\r\n"
        "bitsandbytes[triton]<0.49 ; platform_system == 'Windows'  # keep this note\r\n"
        "  transformer-engine[pytorch]==1.9 ; sys_platform == 'linux'\r\n"
        "-r other.txt\r\n"
        "bitsandbytes==0.50.2\r\n"
    )
    result = edit_requirements(text, pair=pair, xpu_index=XPU)
    assert "\n" not in result.text.replace("\r\n", "")  # CRLF kept, also on the added lines
    out = result.text.split("\r\n")
    assert out[1].startswith('bitsandbytes[triton]>=0.50.2; platform_system == "Windows"')
    assert out[2].startswith("  # aipc-env: transformer_engine is CUDA-only")
    assert out[3] == "  # transformer-engine[pytorch]==1.9 ; sys_platform == 'linux'"
    assert out[4:6] == ["-r other.txt", "bitsandbytes==0.50.2"]
    assert edit_requirements(result.text, pair=pair, xpu_index=XPU).changed is False


def test_mixed_line_endings_every_line_patched_and_keeps_its_ending(pair):
    text = "numpy\r\nflash-attn==2.6\nbitsandbytes\r\ntorch==2.5.1\nwandb"
    result = edit_requirements(text, pair=pair, xpu_index=XPU)
    lines = split_lines(result.text)
    by_content = dict(lines)
    assert by_content["numpy"] == "\r\n"
    assert by_content["# flash-attn==2.6"] == "\n"
    assert any(c.startswith("bitsandbytes>=0.50.2") and e == "\r\n" for c, e in lines)
    assert by_content["# torch==2.5.1"] == "\n"
    assert by_content["wandb"] == "\r\n"  # a last line without an ending gets one before the appended block
    assert "torch==2.13.0+xpu" in by_content


def test_a_nul_byte_does_not_stop_the_lines_after_it(pair):
    text = "numpy\x00garbage\nflash-attn\nbitsandbytes\n"
    result = edit_requirements(text, pair=pair, xpu_index=XPU)
    assert "# flash-attn" in result.text and "bitsandbytes>=0.50.2" in result.text
    assert any("NUL byte" in r for r in result.report)


def test_mode_owner_and_symlink_are_kept(upstream_clone, pair, tmp_path):
    target = upstream_clone / "requirements.txt"
    target.chmod(0o640)
    link = tmp_path / "link-requirements.txt"
    link.symlink_to(target)
    _edit(link, pair)
    assert link.is_symlink() and link.resolve() == target.resolve()
    assert "torch==2.13.0+xpu" in target.read_text()
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert stat.S_IMODE((tmp_path / "link-requirements.txt.aipc-backup").stat().st_mode) == 0o640


def test_a_read_only_file_is_refused_and_untouched(upstream_clone):
    path = upstream_clone / "requirements.txt"
    before = path.read_bytes()
    path.chmod(0o444)
    result = run_cli("patch-requirements", str(path), "--pair", "xpu-2.13")
    assert result.returncode == 2 and "read-only" in result.stderr and "Traceback" not in result.stderr
    assert path.read_bytes() == before and not (upstream_clone / "requirements.txt.aipc-backup").exists()


def test_dry_run_prints_a_diff_and_changes_nothing(upstream_clone):
    path = upstream_clone / "requirements.txt"
    before = path.read_bytes()
    result = run_cli("patch-requirements", str(path), "--dry-run", "--pair", "xpu-2.12")
    assert result.returncode == 0, result.stderr
    assert "-bitsandbytes\n" in result.stdout and "+# transformer_engine[pytorch]" in result.stdout
    assert "+torch==2.12.1+xpu" in result.stdout  # the row's newest torch
    assert path.read_bytes() == before and not (upstream_clone / "requirements.txt.aipc-backup").exists()
    missing = run_cli("patch-requirements", str(upstream_clone / "missing.txt"))
    assert missing.returncode == 2 and "requirements file not found" in missing.stderr


def _stand_in_xpu_index(base: Path, pair) -> Path:
    """The PyTorch XPU index cannot be reached here: a local index serves torch, torchvision and Triton with the
    XPU local versions, each declaring its Requires-Dist as environments/xpu-wheels.yaml records it (torch: the
    runtime pins and Triton); everything else resolves from the real package index."""
    from aipc_env.lock.wheels import load_wheel_manifest
    from tests.support.wheels import make_wheel, write_simple_index

    manifest = load_wheel_manifest()
    torch, vision, triton = (
        f"{pair.newest_torch}+xpu",
        pair.torchvision_version(pair.newest_torch),
        pair.triton_for(pair.newest_torch),
    )
    wheels = [
        make_wheel(base / "w", name, version, requires=manifest.metadata_for(name, version, "linux-64").requires_dist)
        for name, version in (("torch", torch), ("torchvision", vision), (pair.triton.name, triton))
    ]
    return write_simple_index(wheels, base / "xpu-index")


def _uv_compile(req: Path, tmp_path: Path, platform: str, *extra: str) -> subprocess.CompletedProcess:
    from aipc_env.lock.tools import find_uv

    return subprocess.run(
        [find_uv(), "pip", "compile", str(req), "--python-version", "3.12", "--python-platform", platform, "--no-header", *extra],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
        env={**os.environ, "UV_CACHE_DIR": str(tmp_path / "uv-cache")},
    )


@pytest.mark.pypi
@pytest.mark.parametrize("platform", ["x86_64-pc-windows-msvc", "x86_64-unknown-linux-gnu"])
def test_patched_file_resolves_with_the_pairs_torch_and_no_cuda(upstream_clone, pair, tmp_path, platform):
    index = _stand_in_xpu_index(tmp_path, pair)
    path = upstream_clone / "requirements.txt"
    _edit(path, pair)
    (tmp_path / "req.txt").write_text(path.read_text().replace(XPU, index.as_uri()))
    (tmp_path / "override.txt").write_text(f"torch=={pair.newest_torch}+xpu\n")
    out = tmp_path / "resolved.txt"
    result = _uv_compile(tmp_path / "req.txt", tmp_path, platform, "-o", str(out), "--override", str(tmp_path / "override.txt"))
    assert result.returncode == 0, result.stderr[-3000:]
    pins = {
        line.split("==")[0]: line.split("==")[1].split()[0]
        for line in out.read_text().splitlines()
        if "==" in line and not line.startswith((" ", "#"))
    }
    assert pins["torch"] == f"{pair.newest_torch}+xpu" and pins["torchvision"] == f"{pair.newest_torchvision}+xpu"
    assert pins["transformers"] == "4.52.4" and "setuptools" in pins
    # nvidia-ml-py is the pure-Python NVML binding (one py3-none-any wheel) that wandb's GPU monitor imports;
    # it carries no CUDA library. Every other nvidia-* package is a CUDA runtime piece and must not appear.
    nvidia = [n for n in pins if n.startswith("nvidia-") and n != "nvidia-ml-py"]
    assert nvidia == [], nvidia
    assert "transformer-engine" not in pins and "flash-attn" not in pins


@pytest.mark.pypi
def test_the_unpatched_file_does_not_resolve_with_the_pairs_torch(upstream_clone, pair, tmp_path):
    """The evidence for the setuptools edit: upstream's own file, with the pair's torch, has no solution."""
    index = _stand_in_xpu_index(tmp_path, pair)
    req = tmp_path / "req.txt"
    req.write_text(
        (upstream_clone / "requirements.txt").read_text().replace("transformer_engine[pytorch]\n", "")
        + f"--extra-index-url {index.as_uri()}\ntorch=={pair.newest_torch}+xpu\n"
    )
    result = _uv_compile(req, tmp_path, "x86_64-unknown-linux-gnu")
    assert result.returncode != 0 and "setuptools" in result.stderr, result.stderr[-2000:]
