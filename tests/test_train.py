"""`aipc-env train`: config validation before anything heavy, the built-in default end to end under bash and
dash, a LoRA that loads back through diffusers."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest
import yaml

from aipc_env.train.run import default_config
from tests.conftest import ROOT, run_cli, use_tiny_base


def _write(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    return path


def test_todo_placeholder_is_refused_naming_the_key(tmp_path):
    cfg = default_config(tmp_path / "out")
    cfg["model"]["path"] = "TODO: path to Qwen-Image-Edit-2511"
    result = run_cli("train", str(_write(tmp_path / "c.yaml", cfg)), "--dry-run")
    assert result.returncode == 2 and "model.path" in result.stderr and "TODO" in result.stderr
    assert "Traceback" not in result.stderr


def test_unknown_key_wrong_type_and_missing_path(tmp_path):
    cfg = default_config(tmp_path / "out")
    cfg["train"]["max_train_stpes"] = 5
    result = run_cli("train", str(_write(tmp_path / "c.yaml", cfg)), "--dry-run")
    assert result.returncode == 2 and "train.max_train_stpes: unknown key" in result.stderr
    cfg = default_config(tmp_path / "out")
    cfg["lora"]["rank"] = "sixteen"
    result = run_cli("train", str(_write(tmp_path / "c.yaml", cfg)), "--dry-run")
    assert result.returncode == 2 and "lora.rank" in result.stderr
    cfg = default_config(tmp_path / "out")
    cfg["data"]["datasets"] = [str(tmp_path / "no such dataset")]
    result = run_cli("train", str(_write(tmp_path / "c.yaml", cfg)), "--dry-run")
    assert result.returncode == 2 and "data.datasets[0]" in result.stderr and "does not exist" in result.stderr
    result = run_cli("train", str(tmp_path / "missing.yaml"))
    assert result.returncode == 2 and "not found" in result.stderr


def test_dry_run_writes_launcher_and_accelerate_config(tmp_path):
    out = tmp_path / "runs & (x86) ü"
    cfg = _write(tmp_path / "c.yaml", default_config(out))
    result = run_cli("train", str(cfg), "--dry-run")
    assert result.returncode == 0, result.stderr
    assert (out / "launch.sh").is_file() and (out / "launch.json").is_file()
    acc = yaml.safe_load((out / "accelerate_config.yaml").read_text())
    assert acc["distributed_type"] == "NO" and acc["num_processes"] == 1
    plan = json.loads((out / "launch.json").read_text())
    assert [p["name"] for p in plan["phases"]] == ["cache", "fit"]
    assert "accelerate.commands.launch" in plan["phases"][1]["argv"]
    assert not (out / "lora").exists()


def _load_back(lora_dir: Path) -> float:
    import torch
    from diffusers import QwenImageEditPipeline

    from aipc_env.workers.train.fit import tiny_base_cache
    from aipc_env.workers.train.tinyedit import load_tiny_base

    state, meta = QwenImageEditPipeline.lora_state_dict(str(lora_dir), return_lora_metadata=True)
    model = load_tiny_base(tiny_base_cache())
    QwenImageEditPipeline.load_lora_into_transformer(state, transformer=model, metadata=meta)
    (config,) = model.peft_config.values()
    assert any("lora_B" in k and v.abs().sum() > 0 for k, v in state.items()), "LoRA B was never trained"
    assert torch.isfinite(next(iter(state.values()))).all()
    return config.lora_alpha


@pytest.mark.slow
def test_builtin_default_end_to_end_under_dash(tmp_path, tiny_base):
    """The built-in default through its generated launch.sh under dash (Debian's /bin/sh, the stricter shell); the
    launcher's environment, phases, exit codes and signals under bash and dash are tests/test_launch_posix.py's."""
    shell = "dash"
    use_tiny_base(tiny_base)
    out = tmp_path / "default run ü & co"
    cfg = _write(tmp_path / "c.yaml", default_config(out))
    assert run_cli("train", str(cfg), "--dry-run").returncode == 0
    result = subprocess.run([shell, str(out / "launch.sh")], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, 201))  # exactly max_train_steps
    assert (out / "loss.png").stat().st_size > 1000
    assert _load_back(out / "lora") == 8
    log = (out / "train.log").read_text()
    assert "phase cache exited with 0" in log and "phase fit exited with 0" in log
    # a second cache phase does no work: the phase as the launcher runs it (its argv from launch.json, the environment
    # the runner gives its phases), without training the run again
    from aipc_env.launch.runner import _child_env

    plan = json.loads((out / "launch.json").read_text(encoding="utf-8"))
    (cache,) = [phase for phase in plan["phases"] if phase["name"] == "cache"]
    again = subprocess.run(cache["argv"], env=_child_env(plan), capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "0 written, 16 already cached" in again.stdout, again.stdout[-2000:] + again.stderr[-2000:]


@pytest.mark.slow
def test_train_without_config_runs_the_default(tmp_path, tiny_base):
    use_tiny_base(tiny_base)
    result = run_cli("train", env={"AIPC_ENV_DATA_DIR": str(tmp_path)}, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "built-in default" in result.stdout
    lora = tmp_path / "runs" / "builtin-default" / "lora" / "pytorch_lora_weights.safetensors"
    assert lora.is_file()
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    assert lines[-1] == f"aipc-env: LoRA {lora}"
    # the LoRA learned the edit: said in words, and in fit_summary.json with every baseline's distance of every
    # held-out sample
    assert lines[-2].startswith("aipc-env: held-out distance to the targets (16 samples, latent RMS): LoRA ")
    assert "baselines: base " in lines[-2] and "control copied " in lines[-2] and "mean target " in lines[-2]
    assert ": the LoRA learned the edit" in lines[-2]
    held = json.loads((lora.parent.parent / "fit_summary.json").read_text())["heldout"]
    assert held["learned"] is True and held["outcome"] == "learned" and len(held["samples"]) == 16
    assert held["not_beaten"] == []
    for s in held["samples"]:
        assert {"base", "lora", "copy_control", "mean_target"} <= set(s), s
    assert held["lora_mean"] < min(held["base_mean"], held["copy_mean"], held["mean_target_mean"]), held
    # the LoRA is shared like any file the user's umask makes (safetensors alone writes 0600)
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(lora.stat().st_mode) == 0o666 & ~umask
    assert stat.S_IMODE(lora.parent.stat().st_mode) == 0o777 & ~umask
    # every slow stage said what it was doing
    for line in ("fit: loading the transformer", "fit: transformer ready", "fit: step 1 starting"):
        assert line in result.stdout, line


@pytest.mark.slow
def test_recommend_smoke_trains_on_any_machine(tmp_path, tiny_base):
    """The path from `recommend` to a run on a machine below the 32 GB tier: --smoke writes this machine's settings
    for the tiny model, and `train` runs it."""
    from aipc_env.errors import ExitCode

    facts = json.loads((ROOT / "tests" / "fixtures" / "machines" / "win11_16gb.json").read_text(encoding="utf-8"))
    facts_file = tmp_path / "facts 16gb.json"
    facts_file.write_text(json.dumps(facts), encoding="utf-8")
    refused = run_cli("recommend", "--facts", str(facts_file))
    assert refused.returncode == ExitCode.PROBLEMS and "recommend --smoke" in refused.stderr  # a finding
    smoke = tmp_path / "smoke.yaml"
    made = run_cli(
        "recommend", "--facts", str(facts_file), "--smoke", "--out", str(smoke), "--output-dir", str(tmp_path / "smoke run")
    )
    assert made.returncode == ExitCode.OK, made.stderr
    cfg = yaml.safe_load(smoke.read_text(encoding="utf-8"))
    assert cfg["optimizer"]["type"] == "adam8bit" and cfg["train"]["gradient_checkpointing"] is True
    assert cfg["model"]["path"] == "builtin:tiny"
    use_tiny_base(tiny_base)
    ran = run_cli("train", str(smoke), timeout=300)
    assert ran.returncode == ExitCode.OK, ran.stdout[-2000:] + ran.stderr[-2000:]
    assert (tmp_path / "smoke run" / "lora" / "pytorch_lora_weights.safetensors").is_file()
    assert json.loads((tmp_path / "smoke run" / "fit_summary.json").read_text())["heldout"]["learned"] is True
