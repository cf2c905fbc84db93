"""Guards tested at, just below and just above their bounds, with literal expected values: each case here was a
realistic one-token bug (a dropped tie-break, `>=` turned into `>`, `or` into `and`, a multiple of 8 accepted)
that the area's other tests let through."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image
from pydantic import ValidationError

from aipc_env.dataset import validate_dataset
from aipc_env.matrix.resolve import resolve_pair
from aipc_env.train.config import DataSection
from aipc_env.trainenv.requirements import edit_requirements

# -- matrix resolution: the fewest contradictions win among pairs with as many matches --------------------------

def test_fewest_contradictions_break_a_tie(matrix):
    # tcmlib 1.4.1 is in xpu-2.10, 2.11 and 2.12 alike; onemkl-license is fingerprinted by 2.10 alone (2025.3.0),
    # so a different version of it contradicts 2.10 only
    res = resolve_pair({"tcmlib": "1.4.1", "onemkl-license": "2099.1.0"}, matrix, "win-64")
    assert res.status == "ambiguous" and res.candidates == ["xpu-2.11", "xpu-2.12"]
    # the same evidence with 2.10's own version: no contradiction, and 2.10 then matches more
    res = resolve_pair({"tcmlib": "1.4.1", "onemkl-license": "2025.3.0"}, matrix, "win-64")
    assert res.pair == "xpu-2.10"
    # and with nothing against any of them, all three stay candidates
    res = resolve_pair({"tcmlib": "1.4.1"}, matrix, "win-64")
    assert res.status == "ambiguous" and res.candidates == ["xpu-2.10", "xpu-2.11", "xpu-2.12"]


# -- patch-requirements: bitsandbytes is raised only when the line admits a version below the pair's minimum ----

@pytest.mark.parametrize("line, edited", [
    ("bitsandbytes>=0.48.1", True),   # below the bound
    ("bitsandbytes>=0.48.2", False),  # at it
    ("bitsandbytes>=0.48.3", False),  # above it
    ("bitsandbytes==0.48.1", True),
    ("bitsandbytes==0.48.2", False),
    ("bitsandbytes>0.48.1", True),    # admits 0.48.1.post1, below the minimum
    ("bitsandbytes>0.48.2", False),
    ("bitsandbytes", True),
    ("bitsandbytes<=0.49", True),
])
def test_bitsandbytes_minimum_at_below_and_above(matrix, line, edited):
    pair = matrix.get("xpu-2.10")
    assert pair.bitsandbytes_min == "0.48.2"
    result = edit_requirements(f"diffusers\n{line}\n", pair=pair, xpu_index="https://download.pytorch.org/whl/xpu")
    touched = any("bitsandbytes" in e for e in result.edits)
    assert touched is edited, (line, result.edits)
    if edited:
        assert "bitsandbytes>=0.48.2" in result.text


# -- dataset: a target smaller than target_size on either side is reported -----------------------------------------

def _one_sample(root: Path, size: tuple[int, int]) -> Path:
    for folder, name in (("training_images", "s0.png"), ("control_images", "s0.png")):
        (root / folder).mkdir(parents=True, exist_ok=True)
        Image.new("RGB", size, (200, 10, 10)).save(root / folder / name)
    (root / "training_images" / "s0.txt").write_text("Add the small red character to the left side of the image")
    return root


@pytest.mark.parametrize("width, height, small", [
    (64, 64, False),  # at the bound
    (63, 64, True),   # only the width below
    (64, 63, True),   # only the height below
    (63, 63, True),
    (65, 65, False),
])
def test_small_target_images_on_either_side(tmp_path, width, height, small):
    verdict = validate_dataset(_one_sample(tmp_path / "ds", (width, height)), (64, 64))  # (height, width)
    warned = any("smaller than target_size" in w for w in verdict.warnings)
    assert warned is small, verdict.warnings


def test_target_size_height_and_width_are_not_swapped(tmp_path):
    # target_size is (height, width): a 100 wide, 50 high image is too small for (64, 32) only in height
    assert any("smaller" in w for w in validate_dataset(_one_sample(tmp_path / "a", (100, 50)), (64, 32)).warnings)
    assert not any("smaller" in w for w in validate_dataset(_one_sample(tmp_path / "b", (50, 100)), (64, 32)).warnings)


# -- train config: image sides are multiples of 16, at least 16 --------------------------------------------------

@pytest.mark.parametrize("side, ok", [(8, False), (15, False), (16, True), (17, False), (24, False), (32, True),
                                      (40, False), (48, True)])
def test_target_size_sides_are_multiples_of_16(side, ok):
    data = {"datasets": ["ds"], "target_size": [side, 64]}
    if ok:
        assert tuple(DataSection.model_validate(data).target_size) == (side, 64)
    else:
        with pytest.raises(ValidationError, match="multiples of 16"):
            DataSection.model_validate(data)


# -- env drift: each kind its own case, from literal lock and manifest data --------------------------------------

def _drift(installed: dict[str, str], manifest_sha: str | None = "a" * 64, modified=None):
    from aipc_env.lock.lockfile import Pylock
    from aipc_env.trainenv.drift import Manifest, compute_drift

    lock = Pylock.model_validate({"lock_version": "1.0", "packages": [
        {"name": "tinydep", "version": "2.0", "wheels": [{"url": "https://example.org/tinydep-2.0-py3-none-any.whl",
                                                         "hashes": {"sha256": "a" * 64}}]}]})
    manifest = None if manifest_sha is None else Manifest.model_validate({
        "pair": "xpu-2.13", "platform": "linux-64", "lockfile": "pylock.linux-64.toml",
        "installed_at": "2026-12-01T00:00:00+00:00",
        "packages": {"tinydep": {"version": "2.0", "sha256": manifest_sha}}})
    return [(d.kind, d.name) for d in compute_drift(lock, installed, manifest, "linux-64", "3.11", modified)]


def test_env_drift_kinds_one_by_one():
    assert _drift({"tinydep": "2.0"}) == []
    assert _drift({}) == [("missing", "tinydep")]
    assert _drift({"tinydep": "1.0"}) == [("version", "tinydep")]
    assert _drift({"tinydep": "2.0"}, manifest_sha="b" * 64) == [("hash", "tinydep")]  # same version, new artifact
    assert _drift({"tinydep": "2.0"}, manifest_sha=None) == []  # no manifest: hashes cannot be compared
    assert _drift({"tinydep": "2.0"}, modified={"tinydep": ["tinydep.py"]}) == [("modified", "tinydep")]
    assert _drift({"tinydep": "2.0", "stray": "1"}) == [("extra", "stray")]
    # a version drift is reported as such even when the hash differs too (the version says more)
    assert _drift({"tinydep": "1.0"}, manifest_sha="b" * 64) == [("version", "tinydep")]


# -- requirements: which specifier pairs conflict, and the in-place edit with its backup ---------------------------

@pytest.mark.parametrize("a, b, conflict", [
    ("", ">=1", False),                 # no constraint on one side
    (">=1.0", "<1.0", True),
    ("<=1.0", ">=1.0", False),          # 1.0 satisfies both: at the bound
    ("==2.0", ">=1.5", False),
    ("<2", ">=2", True),
    ("==69.5.1", ">=77.0.3", True),     # the runbook's setuptools case
    ("~=1.4", ">=1.5", False),
    ("==1.*", ">=2", True),
    ("==1.4.*", "<1.4.1", False),
    ("==1.2.3", ">1.2.3", True),
    (">1.2.3", "<1.2.5", False),        # 1.2.4: the next micro
    (">1.2.9", "<1.4", False),          # 1.3.0: the next minor
    (">1.9.9", "<2.1", False),
    ("==2.0.0rc1", ">=1.0", False),     # a pre-release satisfies both
    (">=2.0.0rc1", "<2.0.0", True),     # PEP 440: <2.0.0 excludes 2.0.0's own pre-releases
    ("===weird", ">=1", False),         # not a version: never called a conflict
])
def test_specifiers_conflict(a, b, conflict):
    from packaging.specifiers import SpecifierSet

    from aipc_env.trainenv.requirements import specifiers_conflict

    assert specifiers_conflict(SpecifierSet(a), SpecifierSet(b)) is conflict
    assert specifiers_conflict(SpecifierSet(b), SpecifierSet(a)) is conflict


ORIGINAL = b"\xef\xbb\xbftorch==2.3.0\r\nbitsandbytes==0.43.0\r\ndiffusers\r\n"


def _apply(path, matrix, dry_run=False):
    from aipc_env.trainenv.requirements import apply_edits

    return apply_edits(path, pair=matrix.get("xpu-2.10"), xpu_index="https://download.pytorch.org/whl/xpu",
                       pip_layer=None, locked=None, dry_run=dry_run)


def test_apply_edits_dry_run_then_real_then_again(tmp_path, matrix):
    import stat

    path = tmp_path / "requirements.txt"
    path.write_bytes(ORIGINAL)
    path.chmod(0o640)
    result, diff, backup = _apply(path, matrix, dry_run=True)
    assert result.changed and backup is None and path.read_bytes() == ORIGINAL
    assert not (tmp_path / "requirements.txt.aipc-backup").exists()
    assert diff.startswith(f"--- {path}\n+++ {path} (aipc-env)\n") and "-torch==2.3.0" in diff
    result, diff, backup = _apply(path, matrix)
    assert backup == tmp_path / "requirements.txt.aipc-backup" and backup.read_bytes() == ORIGINAL
    assert stat.S_IMODE(backup.stat().st_mode) == 0o640 and stat.S_IMODE(path.stat().st_mode) == 0o640
    edited = path.read_bytes()
    assert edited.startswith(b"\xef\xbb\xbf") and b"\r\n" in edited and b"bitsandbytes>=0.48.2" in edited
    assert b"torch==2.10.0+xpu" in edited and edited.count(b"\xef\xbb\xbf") == 1
    again, diff, backup = _apply(path, matrix)
    assert not again.changed and diff == "" and path.read_bytes() == edited
    assert backup is None and (tmp_path / "requirements.txt.aipc-backup").read_bytes() == ORIGINAL


def test_apply_edits_refusals_change_nothing(tmp_path, matrix):
    from aipc_env.errors import InputError

    with pytest.raises(InputError, match="requirements file not found") as missing:
        _apply(tmp_path / "nope.txt", matrix)
    assert "requirements.txt" in missing.value.fix
    with pytest.raises(InputError, match="is a folder, expected a requirements file"):
        _apply(tmp_path, matrix)
    path = tmp_path / "requirements.txt"
    path.write_bytes(ORIGINAL)
    path.chmod(0o444)
    with pytest.raises(InputError, match="read-only; nothing was changed") as ro:
        _apply(path, matrix)
    assert "chmod u+w" in ro.value.fix and "--dry-run" in ro.value.fix
    assert path.read_bytes() == ORIGINAL and not (tmp_path / "requirements.txt.aipc-backup").exists()
    result, _, backup = _apply(path, matrix, dry_run=True)  # a dry run of a read-only file is fine
    assert result.changed and backup is None
