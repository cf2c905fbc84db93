"""`aipc-env adapt` on the real upstream source (460ba1a): the checker fails on the pristine clone, apply makes it
pass, a second apply writes nothing, revert restores every file's hash; another upstream commit is adapted the
same way or refused with the anchor named and the tree untouched."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path

import pytest

from aipc_env.qflux.adapt import STATE_DIR, AnchorMismatch, apply_adaptation, plan_adaptation, revert_adaptation
from aipc_env.qflux.checker import check_clone
from tests.conftest import run_cli


def tree_hashes(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and STATE_DIR not in p.parts
    }


@pytest.fixture
def clone(upstream_pristine, tmp_path) -> Path:
    dest = tmp_path / "qwen image finetune (x86) & ü"
    shutil.copytree(upstream_pristine, dest)
    return dest


def test_check_fails_on_the_pristine_clone_with_located_findings(clone):
    result = run_cli("adapt", str(clone), "--check", "--json")
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    rules = {(f["level"], f["rule"]) for f in report["findings"]}
    for expected in [
        ("ERROR", "cuda-call"),
        ("ERROR", "flash-attention-2"),
        ("ERROR", "no-device-helpers"),
        ("ERROR", "device-type-cuda-only"),
        ("ERROR", "no-nf4-schema"),
        ("ERROR", "no-nf4-loader"),
        ("ERROR", "no-max-steps-guard"),
        ("ERROR", "hub-id"),
        ("ERROR", "num-workers-positive"),
        ("WARN", "no-epoch-break"),
        ("WARN", "checkpoints-total-limit-unused"),
        ("WARN", "no-xpu-seed"),
        ("WARN", "lora-without-metadata"),
        ("WARN", "cuda-sdp-switch"),
        ("WARN", "no-xpu-accelerate-config"),
    ]:
        assert expected in rules, expected
    sdp = [f for f in report["findings"] if f["rule"] == "cuda-sdp-switch"]
    assert len(sdp) == 3 and all("enable_" in f["message"] for f in sdp)  # the FSDP path's three switches
    cuda = [f for f in report["findings"] if f["rule"] == "cuda-call"]
    assert len(cuda) >= 30 and all(f["line"] > 0 and f["fix"] for f in cuda)
    sync = next(f for f in cuda if "synchronize" in f["message"] and f["file"].endswith("qwen_image_edit_trainer.py"))
    line = (clone / sync["file"]).read_text(encoding="utf-8").splitlines()[sync["line"] - 1]
    assert "torch.cuda.synchronize()" in line
    human = run_cli("adapt", str(clone), "--check")
    assert human.returncode == 1 and "ERROR" in human.stdout and "fix:" in human.stdout


def test_apply_check_reapply_revert(clone):
    pristine = tree_hashes(clone)
    result = run_cli("adapt", str(clone))
    assert result.returncode == 0, result.stdout + result.stderr
    assert run_cli("adapt", str(clone), "--check").returncode == 0
    adapted = tree_hashes(clone)
    again = run_cli("adapt", str(clone))
    assert again.returncode == 0 and "already adapted" in again.stdout
    assert tree_hashes(clone) == adapted  # byte-identical
    offenders = [
        f"{p}:{n}"
        for p in (clone / "src").rglob("*.py")
        if p.name != "device_utils.py"
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if "torch.cuda." in line
    ]
    assert offenders == []
    assert 'attn_implementation="sdpa"' in (clone / "src/qflux/models/load_model.py").read_text()
    assert (clone / "src/qflux/utils/device_utils.py").is_file()
    reverted = run_cli("adapt", str(clone), "--revert")
    assert reverted.returncode == 0, reverted.stderr
    assert tree_hashes(clone) == pristine and not (clone / STATE_DIR).exists()


def test_line_endings_and_modes_are_kept(clone):
    target = clone / "src/qflux/utils/seed.py"
    target.write_bytes(target.read_bytes().replace(b"\n", b"\r\n"))
    target.chmod(0o755)
    pristine = tree_hashes(clone)
    apply_adaptation(clone, log=lambda m: None)
    data = target.read_bytes()
    assert b"device_manual_seed_all(seed)\r\n" in data and b"\n" not in data.replace(b"\r\n", b"")
    assert target.stat().st_mode & 0o777 == 0o755
    revert_adaptation(clone, log=lambda m: None)
    assert tree_hashes(clone) == pristine and target.stat().st_mode & 0o777 == 0o755


def test_another_commit_with_a_changed_anchor_is_refused_untouched(clone):
    base = clone / "src/qflux/trainer/base_trainer.py"
    base.write_text(
        base.read_text(encoding="utf-8").replace(
            "                # Run validation if needed\n", "                # run validation when due\n"
        ),
        encoding="utf-8",
    )
    before = tree_hashes(clone)
    result = run_cli("adapt", str(clone))
    assert result.returncode == 1
    assert "max-steps-guard" in result.stderr and "base_trainer.py" in result.stderr
    assert "Traceback" not in result.stderr
    assert tree_hashes(clone) == before and not (clone / STATE_DIR).exists()


def test_another_commit_with_an_unknown_cuda_call_is_refused(clone):
    extra = clone / "src/qflux/utils/tools.py"
    extra.write_text(
        extra.read_text(encoding="utf-8") + "\n\ndef peak():\n    return torch.cuda.max_memory_allocated()\n", encoding="utf-8"
    )
    before = tree_hashes(clone)
    with pytest.raises(AnchorMismatch, match=r"tools\.py:\d+: return torch\.cuda\.max_memory_allocated"):
        apply_adaptation(clone, log=lambda m: None)
    assert tree_hashes(clone) == before


def test_another_commit_that_keeps_the_anchors_is_adapted_the_same_way(clone):
    """An upstream commit that changed other code (a new helper, an edited docstring) adapts cleanly."""
    tools = clone / "src/qflux/utils/tools.py"
    tools.write_text(tools.read_text(encoding="utf-8") + "\n\ndef added_upstream():\n    return 1\n", encoding="utf-8")
    trainer = clone / "src/qflux/trainer/qwen_image_edit_trainer.py"
    trainer.write_text(
        trainer.read_text(encoding="utf-8").replace("Load and separate components", "Load, then separate components"),
        encoding="utf-8",
    )
    apply_adaptation(clone, log=lambda m: None)
    assert check_clone(clone).findings == []
    assert "def added_upstream" in tools.read_text(encoding="utf-8")


def test_a_failed_write_rolls_back_every_file(clone, monkeypatch):
    import aipc_env.qflux.adapt as adapt

    before = tree_hashes(clone)
    real = adapt.atomic_write_bytes
    calls = {"n": 0}

    def flaky(path, data, **kw):
        if STATE_DIR not in Path(path).parts:
            calls["n"] += 1
            if calls["n"] == 6:
                raise OSError(28, "No space left on device")
        return real(path, data, **kw)

    monkeypatch.setattr(adapt, "atomic_write_bytes", flaky)
    with pytest.raises(OSError):
        apply_adaptation(clone, log=lambda m: None)
    monkeypatch.setattr(adapt, "atomic_write_bytes", real)
    assert tree_hashes(clone) == before and not (clone / STATE_DIR).exists()


def test_edits_after_adapting_are_never_lost(clone):
    apply_adaptation(clone, log=lambda m: None)
    seed = clone / "src/qflux/utils/seed.py"
    seed.write_text(seed.read_text(encoding="utf-8") + "# my change\n", encoding="utf-8")
    result = run_cli("adapt", str(clone), "--revert")
    assert result.returncode == 1 and "seed.py" in result.stderr and "--force" in result.stderr
    assert seed.read_text(encoding="utf-8").endswith("# my change\n")
    again = run_cli("adapt", str(clone))
    assert again.returncode == 1 and "edited after the adaptation" in again.stderr
    assert run_cli("adapt", str(clone), "--revert", "--force").returncode == 0
    assert "# my change" not in seed.read_text(encoding="utf-8")


def test_dry_run_lists_edits_and_changes_nothing(clone):
    before = tree_hashes(clone)
    result = run_cli("adapt", str(clone), "--dry-run")
    assert result.returncode == 0 and "max-steps-guard" in result.stdout and "device_utils.py" in result.stdout
    assert tree_hashes(clone) == before


def test_not_a_clone_is_a_usage_error(tmp_path):
    result = run_cli("adapt", str(tmp_path), "--check")
    assert result.returncode == 2 and "src/qflux" in result.stderr


def test_every_edit_names_an_anchor_that_occurs_in_the_pristine_clone(upstream_pristine):
    plan = plan_adaptation(upstream_pristine)
    named = {e for item in plan.files for e in item.edits}
    from aipc_env.qflux.patches import PATCHES

    assert {p.id for p in PATCHES} <= named
    assert not (upstream_pristine / STATE_DIR).exists()


def test_checker_runs_on_the_helpers_names_not_the_manifest(clone):
    """Deleting the manifest does not make a pristine clone look adapted, nor an adapted one look pristine."""
    apply_adaptation(clone, log=lambda m: None)
    shutil.rmtree(clone / STATE_DIR)
    report = check_clone(clone)
    assert report.findings == [] and not report.adapted
    os.remove(clone / "src/qflux/utils/device_utils.py")
    assert any(f.rule == "no-device-helpers" for f in check_clone(clone).findings)
    assert re.search(r"device_manual_seed_all", (clone / "src/qflux/utils/seed.py").read_text())


@pytest.fixture(scope="module")
def adapted_reference(upstream_pristine, tmp_path_factory) -> dict[str, str]:
    dest = tmp_path_factory.mktemp("reference") / "clone"
    shutil.copytree(upstream_pristine, dest)
    apply_adaptation(dest, log=lambda m: None)
    return tree_hashes(dest)


@pytest.mark.parametrize("signal_kind", ["INT", "KILL"])
@pytest.mark.parametrize("instant", ["adapt:after-backup", "adapt:after-journal", "adapt:after-replace", "adapt:before-applied"])
def test_an_interrupt_at_any_instant_is_recovered(clone, adapted_reference, instant, signal_kind):
    """A real SIGINT (Ctrl-C) or SIGKILL (power cut) at each critical instant of apply: the next `adapt` finishes
    to exactly the adapted tree, and `--revert` from there restores every pristine byte."""
    pristine = tree_hashes(clone)
    stopped = run_cli("adapt", str(clone), env={"AIPC_ENV_INTERRUPT_AT": instant, "AIPC_ENV_INTERRUPT_SIGNAL": signal_kind})
    assert stopped.returncode in (130, -9), stopped.stderr
    if signal_kind == "INT":
        assert tree_hashes(clone) == pristine  # rolled back on the spot
    again = run_cli("adapt", str(clone))
    assert again.returncode == 0, again.stdout + again.stderr
    assert tree_hashes(clone) == adapted_reference
    reverted = run_cli("adapt", str(clone), "--revert")
    assert reverted.returncode == 0, reverted.stderr
    assert tree_hashes(clone) == pristine and not (clone / STATE_DIR).exists()


def test_revert_works_from_an_interrupted_apply(clone):
    pristine = tree_hashes(clone)
    stopped = run_cli(
        "adapt", str(clone), env={"AIPC_ENV_INTERRUPT_AT": "adapt:after-replace", "AIPC_ENV_INTERRUPT_SIGNAL": "KILL"}
    )
    assert stopped.returncode == -9 and (clone / STATE_DIR / "manifest.json").is_file()
    assert tree_hashes(clone) != pristine  # one file was replaced when the power went
    reverted = run_cli("adapt", str(clone), "--revert")
    assert reverted.returncode == 0, reverted.stderr
    assert tree_hashes(clone) == pristine


def test_a_file_that_leads_outside_the_clone_is_refused(clone, tmp_path):
    outside = tmp_path / "outside logger.py"
    target = clone / "src" / "qflux" / "utils" / "logger.py"
    shutil.copy(target, outside)
    before = outside.read_bytes()
    target.unlink()
    target.symlink_to(outside)
    result = run_cli("adapt", str(clone))
    assert result.returncode == 2 and "leads outside the clone" in result.stderr
    assert outside.read_bytes() == before and not (clone / STATE_DIR).exists()


def test_revert_checks_every_backup_before_changing_anything(clone):
    assert run_cli("adapt", str(clone)).returncode == 0
    adapted = tree_hashes(clone)
    backups = sorted((clone / STATE_DIR / "backup").rglob("*.py"))
    backups[-1].write_bytes(backups[-1].read_bytes() + b"# damaged\n")
    result = run_cli("adapt", str(clone), "--revert")
    assert result.returncode == 2 and "missing or damaged; nothing was reverted" in result.stderr
    assert tree_hashes(clone) == adapted  # not one file restored


@pytest.mark.parametrize("damage", ["changed", "missing"])
def test_readapting_from_a_damaged_backup_is_refused(clone, damage):
    """Re-adapting plans from the pristine backups (an adapted file is never taken for a pristine one); a backup
    whose bytes no longer match its recorded hash stops it before any file changes."""
    assert run_cli("adapt", str(clone)).returncode == 0
    adapted = tree_hashes(clone)
    backup = min((clone / STATE_DIR / "backup").rglob("*.py"))
    if damage == "changed":
        backup.write_bytes(backup.read_bytes() + b"# damaged\n")
    else:
        backup.unlink()
    for argv in (["--dry-run"], []):
        result = run_cli("adapt", str(clone), *argv)
        assert result.returncode == 2 and "missing or damaged" in result.stderr, (argv, result.stderr[-1500:])
    assert tree_hashes(clone) == adapted


@pytest.mark.parametrize(
    "text, ok",
    [
        ("distributed_type: 'NO'\nmixed_precision: 'no'\n", True),
        ("distributed_type: NO\nmixed_precision: 'no'\n", False),
        ("distributed_type: 'NO'\nmixed_precision: no\n", False),
        ("distributed_type: 'NO'\nmixed_precision: fp4\n", False),
        ("distributed_type: 'XPU_ONLY'\n", False),
    ],
)
def test_the_created_accelerate_config_is_judged_by_accelerates_own_types(clone, text, ok):
    """An unquoted NO is the YAML boolean false: accelerate's file loader takes it and `accelerate launch` fails
    later; the checker says so, and checks every value against accelerate's own enums."""
    (clone / "accelerate_config_xpu.yaml").write_text("compute_environment: LOCAL_MACHINE\nnum_processes: 1\n" + text)
    report = json.loads(run_cli("adapt", str(clone), "--check", "--json").stdout)
    bad = [f for f in report["findings"] if f["rule"] == "accelerate-config"]
    assert (bad == []) == ok, bad
    assert all(f["file"] == "accelerate_config_xpu.yaml" and f["line"] > 0 for f in bad)
