"""`aipc-env verify` for real on this CPU, and failing for the right reasons."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.conftest import ROOT, run_cli, use_tiny_base
from tests.support.json_outputs import check_json_output

pytestmark = pytest.mark.slow


def _verify(*args: str, env: dict | None = None) -> tuple[int, dict]:
    result = run_cli("verify", "--json", *args, env=env, timeout=300)
    return result.returncode, check_json_output("verify", result.stdout)


def _steps(report: dict) -> dict[str, dict]:
    return {s["id"]: s for s in report["steps"]}


def test_passes_on_this_cpu_and_is_recorded_for_the_doctor(tiny_base):
    use_tiny_base(tiny_base)
    rc, report = _verify()
    assert rc == 0, [s["summary"] for s in report["steps"] if not s["passed"]]
    steps = _steps(report)
    assert list(steps) == ["device", "bitsandbytes", "nf4-roundtrip", "linear4bit", "adam8bit", "lora-roundtrip", "tiny-qlora"]
    assert steps["adam8bit"]["metrics"]["state_dtypes"]["state1"] == "uint8"
    held = steps["tiny-qlora"]["metrics"]["heldout"]
    assert held["learned"] is True and held["lora_mean"] <= 0.8 * held["base_mean"], held
    assert steps["lora-roundtrip"]["metrics"]["without_metadata"]["alpha"] == 4
    doctor = run_cli("doctor", "--json", "--check", "last-verify")
    (finding,) = json.loads(doctor.stdout)["findings"]
    assert finding["status"] == "ok" and "7/7" in finding["seen"]


def test_fails_for_each_fault_for_its_own_reason(tmp_path, tiny_base):
    """Three faults in one run (each touches its own steps, and the passing run above shows every step passes
    without them): bitsandbytes older than the pair's floor, LoRA metadata dropped on save, an optimizer that
    leaves the parameters unchanged. Each failing step names its own reason; the other steps still pass."""
    raw = yaml.safe_load((ROOT / "environments" / "matrix.yaml").read_text())
    for row in raw["pairs"]:
        if row["id"] == "xpu-2.13":
            row["bitsandbytes_min"] = "0.51.0"
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(yaml.safe_dump(raw))
    use_tiny_base(tiny_base)
    rc, report = _verify(
        "--pair", "xpu-2.13", "--matrix", str(matrix), env={"AIPC_VERIFY_INJECT": "drop-lora-metadata,frozen-optimizer"}
    )
    assert rc == 1
    steps = _steps(report)
    failed = sorted(s for s, step in steps.items() if not step["passed"])
    assert failed == ["adam8bit", "bitsandbytes", "lora-roundtrip", "tiny-qlora"], failed
    assert "older than 0.51.0" in steps["bitsandbytes"]["summary"]
    assert "metadata did not survive" in steps["lora-roundtrip"]["summary"]
    assert "left the parameters unchanged" in steps["adam8bit"]["summary"]
    assert "did not learn the edit" in steps["tiny-qlora"]["summary"]
    # the saved record says faults were injected, and the doctor shows it as such, not as a real failure
    doctor = run_cli("doctor", "--json", "--check", "last-verify")
    finding = json.loads(doctor.stdout)["findings"][0]
    assert finding["status"] == "warn" and "injected faults (" in finding["seen"]
    assert "drop-lora-metadata" in finding["seen"] and "frozen-optimizer" in finding["seen"]


def test_missing_env_is_a_clear_error(tmp_path):
    result = run_cli("verify", "--env", str(tmp_path / "nope"))
    assert result.returncode == 2 and "no Python interpreter" in result.stderr


def _worker(steps: list[str], inject: list[str], folder) -> dict[str, dict]:
    import os
    import subprocess
    import sys

    folder.mkdir(parents=True, exist_ok=True)
    out = folder / "steps.json"
    only = [arg for step in steps for arg in ("--only", step)]
    result = subprocess.run(
        [sys.executable, "-m", "aipc_env.workers.verify", *only, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "AIPC_VERIFY_INJECT": ",".join(inject)},
    )
    assert result.returncode in (0, 1), result.stderr[-2000:]
    data = json.loads(out.read_text())
    assert sorted(data["inject"]) == sorted(inject)
    found = {entry["id"]: entry for entry in data["steps"]}
    assert sorted(found) == sorted(steps)
    return found


BOUNDS = {
    "nf4-roundtrip": ("nf4-noise", "NF4 round-trip error"),
    "linear4bit": ("linear4bit-skew", "forward rel. error"),
    "adam8bit": ("adam8bit-drift", "diverges from 32-bit Adam"),
}


def test_each_bound_fails_when_its_fault_is_injected(tmp_path):
    """The three numeric steps pass as they are and fail, each for its own bound's reason, with its fault injected
    (one worker run each way: every fault touches its own step only, which the first run's passes show)."""
    clean = _worker(list(BOUNDS), [], tmp_path / "clean")
    assert all(clean[step]["passed"] for step in BOUNDS), {k: v["summary"] for k, v in clean.items()}
    faulty = _worker(list(BOUNDS), [inject for inject, _ in BOUNDS.values()], tmp_path / "faulty")
    for step, (_, needle) in BOUNDS.items():
        assert not faulty[step]["passed"] and needle in faulty[step]["summary"], faulty[step]["summary"]


def test_steps_are_validated():
    for bad in ("0", "1", "-5", "many"):
        result = run_cli("verify", "--steps", bad)
        assert result.returncode == 2 and "--steps" in result.stderr and "Traceback" not in result.stderr


def test_importing_the_worker_starts_no_heartbeat():
    """The import heartbeat runs where the worker runs as a program (`python -m`); a process that imports the module
    (a test, a tool) gets no thread printing "still importing" into its own output for ever (one did, into a later
    test's captured JSON, in a suite run)."""
    from aipc_env.workers import verify as worker

    assert not worker.IMPORTING.running


def test_the_bitsandbytes_step_reads_bitsandbytes_own_triton_flag(monkeypatch):
    """bitsandbytes 0.50 keeps it in bitsandbytes.backends.utils (not bitsandbytes.utils): read from anywhere else it
    is always False, and an XPU without the native library fails the step although Triton would run NF4."""
    import bitsandbytes.backends.utils as backends_utils
    import torch

    from aipc_env.workers import verify as worker

    for flag in (True, False):
        monkeypatch.setattr(backends_utils, "triton_available", flag)
        out = worker.step_bitsandbytes({"device": torch.device("cpu"), "bnb_min": None})
        assert out["metrics"]["triton"] is flag
