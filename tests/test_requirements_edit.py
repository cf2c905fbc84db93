"""Requirements edits on the upstream file's shape, CRLF, comments, extras and markers, twice in a row."""

from __future__ import annotations

import shutil

from aipc_env.trainenv.requirements import apply_edits, edit_requirements
from tests.conftest import FIXTURES, run_cli

UPSTREAM = FIXTURES / "qflux" / "requirements.txt"
LOCKED = {"transformers": "5.24.0", "pydantic": "2.14.4", "matplotlib": "3.11.2", "diffusers": "0.42.1"}


def test_upstream_file(tmp_path):
    path = tmp_path / "requirements.txt"
    shutil.copy(UPSTREAM, path)
    result, diff = apply_edits(path, bnb_min="0.50.0", locked=LOCKED, dry_run=False)
    lines = path.read_text().splitlines()
    assert "# transformer_engine[pytorch]" in lines
    assert lines[lines.index("# transformer_engine[pytorch]") - 1].startswith("# aipc-env: transformer_engine is CUDA-only")
    assert "bitsandbytes>=0.50.0" in lines and "bitsandbytes" not in lines
    # everything else kept, in order
    original = UPSTREAM.read_text().splitlines()
    kept = [ln for ln in lines if not ln.startswith("# aipc-env:") and ln not in ("# transformer_engine[pytorch]",
                                                                                   "bitsandbytes>=0.50.0")]
    assert kept == [ln for ln in original if ln not in ("transformer_engine[pytorch]", "bitsandbytes")]
    report = "\n".join(result.report)
    assert "transformers==4.52.4 contradicts the lock (transformers 5.24.0)" in report
    assert "pydantic==2.11.7 contradicts the lock" in report and "matplotlib==3.10.1" in report
    assert "setuptools is listed again (first on line 16)" in report
    assert (tmp_path / "requirements.txt.aipc-backup").read_bytes() == UPSTREAM.read_bytes()
    # a second run is a no-op: nothing written, the backup still holds the original
    mtime = path.stat().st_mtime_ns
    again, diff2 = apply_edits(path, bnb_min="0.50.0", locked=LOCKED, dry_run=False)
    assert not again.changed and diff2 == "" and path.stat().st_mtime_ns == mtime
    assert (tmp_path / "requirements.txt.aipc-backup").read_bytes() == UPSTREAM.read_bytes()


def test_crlf_comments_extras_markers():
    text = ("# top comment\r\n"
            "bitsandbytes[triton]<0.49 ; platform_system == 'Windows'  # keep this note\r\n"
            "  transformer-engine[pytorch]==1.9 ; sys_platform == 'linux'\r\n"
            "-r other.txt\r\n"
            "--extra-index-url https://example.invalid/simple\r\n"
            "bitsandbytes==0.50.2\r\n")
    result = edit_requirements(text, bnb_min="0.48.2")
    out = result.text.split("\r\n")
    assert "\n" not in result.text.replace("\r\n", "")  # CRLF kept
    assert out[1] == "bitsandbytes[triton]>=0.48.2; platform_system == \"Windows\" # keep this note"
    assert out[2].startswith("  # aipc-env: transformer_engine is CUDA-only")
    assert out[3] == "  # transformer-engine[pytorch]==1.9 ; sys_platform == 'linux'"
    assert out[4:7] == ["-r other.txt", "--extra-index-url https://example.invalid/simple", "bitsandbytes==0.50.2"]
    assert edit_requirements(result.text, bnb_min="0.48.2").changed is False


def test_dry_run_prints_a_diff_and_changes_nothing(tmp_path):
    path = tmp_path / "req s ü.txt"
    shutil.copy(UPSTREAM, path)
    result = run_cli("patch-requirements", str(path), "--dry-run", "--pair", "xpu-2.12")
    assert result.returncode == 0, result.stderr
    assert "-bitsandbytes\n-transformer_engine[pytorch]\n+bitsandbytes>=0.48.2\n" in result.stdout
    assert "+# transformer_engine[pytorch]" in result.stdout
    assert path.read_bytes() == UPSTREAM.read_bytes() and not (tmp_path / "req s ü.txt.aipc-backup").exists()
    result = run_cli("patch-requirements", str(tmp_path / "missing.txt"))
    assert result.returncode == 2 and "requirements file not found" in result.stderr
