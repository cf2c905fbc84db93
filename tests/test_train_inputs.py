"""`aipc-env train` with bad, hostile or unusual input: every case a named error (exit 1 or 2) or the right
behaviour, never a traceback, never a silent fallback, never a file in the wrong place."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from aipc_env.train.run import default_config
from tests.conftest import ROOT, run_cli, use_tiny_base


def _write(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    return path


def _plan(out: Path) -> dict:
    return json.loads((out / "launch.json").read_text())


def test_relative_paths_are_resolved_against_the_config_folder(tmp_path):
    folder = tmp_path / "project"
    (folder / "data").mkdir(parents=True)
    cfg = default_config(Path("unused"))
    cfg["output_dir"] = "rel-out"
    cfg["cache_dir"] = "cache here"
    path = _write(folder / "c.yaml", cfg)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = run_cli("train", str(path), "--dry-run", cwd=elsewhere)
    assert result.returncode == 0, result.stderr
    plan = _plan(folder / "rel-out")
    assert plan["run_dir"] == str(folder / "rel-out") and plan["log_file"] == str(folder / "rel-out" / "train.log")
    assert not (elsewhere / "rel-out").exists() and not (folder / "rel-out" / "rel-out").exists()
    assert str(folder / "rel-out" / "launch.sh") in result.stdout  # printed paths are the real ones
    from aipc_env.train.config import load_config

    loaded = load_config(path)
    assert loaded.output_dir == str(folder / "rel-out") and loaded.cache_dir == str(folder / "cache here")


def test_a_relative_dataset_is_found_from_the_config_folder(tmp_path):
    from tests.test_dataset import local

    folder = tmp_path / "project"
    local(folder / "ds", n=2)  # too few samples: the verdict must name the real, resolved folder
    cfg = {"model": {"path": str(tmp_path)}, "data": {"datasets": ["ds"], "target_size": [64, 64]}, "output_dir": "out"}
    (tmp_path / "model_index.json").write_text("{}")
    result = run_cli("train", str(_write(folder / "c.yaml", cfg)), "--dry-run", cwd=tmp_path)
    assert result.returncode == 2 and f"dataset {folder / 'ds'} is invalid" in result.stderr


@pytest.mark.parametrize("value,needle", [("", "output_dir is empty"), ("   ", "output_dir is empty")])
def test_empty_output_dir_is_an_error(tmp_path, value, needle):
    cfg = default_config(tmp_path / "x")
    cfg["output_dir"] = value
    result = run_cli("train", str(_write(tmp_path / "c.yaml", cfg)), "--dry-run", cwd=tmp_path)
    assert result.returncode == 2 and needle in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "launch.sh").exists()


def test_output_dir_that_is_a_file(tmp_path):
    (tmp_path / "afile").write_text("x")
    cfg = default_config(tmp_path / "afile")
    result = run_cli("train", str(_write(tmp_path / "c.yaml", cfg)), "--dry-run")
    assert result.returncode == 2 and "output_dir" in result.stderr and "is a file" in result.stderr


@pytest.mark.parametrize("encoding,bom", [("utf-16", b""), ("utf-8", b"\xef\xbb\xbf"), ("utf-8", b"")])
def test_config_encodings(tmp_path, encoding, bom):
    """PowerShell 5.1's `aipc-env recommend > config.yaml` writes UTF-16 with a BOM; editors add UTF-8 BOMs."""
    text = yaml.safe_dump(default_config(tmp_path / "out ü"), allow_unicode=True)
    path = tmp_path / "c.yaml"
    path.write_bytes(bom + text.encode(encoding))
    result = run_cli("train", str(path), "--dry-run")
    assert result.returncode == 0, result.stderr


def test_a_cp1252_config_is_named_with_a_hint(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_bytes(yaml.safe_dump(default_config(tmp_path / "out ü"), allow_unicode=True).encode("cp1252"))
    result = run_cli("train", str(path), "--dry-run")
    assert result.returncode == 2 and "not UTF-8" in result.stderr and "cp1252" in result.stderr


def test_bad_env_key_and_oversized_values(tmp_path):
    cfg = default_config(tmp_path / "out")
    cfg["env"] = {"BAD NAME": "x"}
    result = run_cli("train", str(_write(tmp_path / "c.yaml", cfg)), "--dry-run")
    assert result.returncode == 2 and "env: 'BAD NAME' is not an environment variable name" in result.stderr
    cfg["env"] = {"BIG": "x" * 100_000}
    result = run_cli("train", str(_write(tmp_path / "c.yaml", cfg)), "--dry-run")
    assert result.returncode == 2 and "the value of BIG is 100000 bytes; at most 8192" in result.stderr


def test_a_huge_config_is_refused_at_once(tmp_path):
    path = tmp_path / "huge.yaml"
    path.write_text("output_dir: x\n# " + "a" * (50 * 2**20) + "\n")
    start = time.monotonic()
    result = run_cli("train", str(path), "--dry-run")
    assert result.returncode == 2 and "MiB" in result.stderr and time.monotonic() - start < 20


def test_a_missing_resume_path_is_caught_before_anything_runs(tmp_path):
    cfg = default_config(tmp_path / "out")
    cfg["train"]["resume"] = str(tmp_path / "no such checkpoint")
    result = run_cli("train", str(_write(tmp_path / "c.yaml", cfg)))
    assert result.returncode == 2 and "train.resume" in result.stderr and "does not exist" in result.stderr
    assert not (tmp_path / "out" / "train.log").exists()


def test_resume_with_another_lora_shape_is_refused_before_the_cache_phase(tmp_path):
    from aipc_env.core.formats import write_model
    from aipc_env.train.config import load_config
    from aipc_env.train.resume import CheckpointState, training_fingerprint

    cfg = default_config(tmp_path / "out")
    path = _write(tmp_path / "c.yaml", cfg)
    state = CheckpointState(
        step=20,
        smoothed_loss=1.0,
        lora_rank=4,
        lora_alpha=8,
        target_modules=cfg["lora"].get("target_modules", ["to_q", "to_k", "to_v", "to_out.0"]),
        model="builtin:tiny",
        fingerprint=training_fingerprint(load_config(path)),
    )
    write_model(tmp_path / "out" / "checkpoints" / "step-0000020" / "state.json", state)
    cfg["train"]["resume"] = "auto"
    result = run_cli("train", str(_write(tmp_path / "c.yaml", cfg)))
    assert result.returncode == 2 and "cannot resume" in result.stderr and "4/8" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "out" / "train.log").exists()


def test_a_second_run_into_the_same_output_dir_is_refused(tmp_path):
    from aipc_env.launch.runlock import LOCK_NAME

    out = tmp_path / "out"
    cfg = _write(tmp_path / "c.yaml", default_config(out))
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        out.mkdir()
        (out / LOCK_NAME).write_text(
            json.dumps({"pid": holder.pid, "host": os.uname().nodename, "started": "now", "command": "train"})
        )
        result = run_cli("train", str(cfg), "--dry-run")
        assert result.returncode == 2 and "another run is writing into this folder" in result.stderr
        assert f"pid {holder.pid}" in result.stderr and not (out / "launch.sh").exists()
    finally:
        holder.kill()
        holder.wait()
    # the holder died without cleaning up (a crash): its lock is stale and taken over
    result = run_cli("train", str(cfg), "--dry-run")
    assert result.returncode == 0, result.stderr
    assert not (out / LOCK_NAME).exists()


@pytest.mark.parametrize(
    "content", ['{"pid": "x", "host": "h"}', '{"pid": 1}', "[1, 2]", "not json", '{"pid": 99999999999999999999, "host": 1}']
)
def test_a_run_lock_that_does_not_parse_is_stale_not_a_crash(tmp_path, content):
    """The lock is a file from an earlier run, read as hostile input: what does not parse is taken over."""
    from aipc_env.launch.runlock import LOCK_NAME, run_lock

    (tmp_path / LOCK_NAME).write_text(content, encoding="utf-8")
    with run_lock(tmp_path, "train") as held:
        assert json.loads(held.read_text(encoding="utf-8"))["pid"] == os.getpid()
    assert not (tmp_path / LOCK_NAME).exists()


@pytest.mark.slow
def test_a_device_that_is_not_there_fails_before_training(tmp_path):
    cfg = default_config(tmp_path / "out")
    cfg["device"] = "xpu:0"
    result = run_cli("train", str(_write(tmp_path / "c.yaml", cfg)), timeout=300)
    assert result.returncode == 1
    assert "device xpu:0 is not available" in result.stdout + result.stderr
    assert "aipc-env doctor --probe-device" in result.stdout + result.stderr
    assert "phase cache failed" in result.stderr and str(tmp_path / "out" / "train.log") in result.stderr
    assert not (tmp_path / "out" / "lora").exists() and not (tmp_path / "out" / "train_log.jsonl").exists()
    assert "Traceback" not in result.stdout + result.stderr


@pytest.mark.slow
def test_ctrl_c_exits_130_with_one_line(tmp_path, tiny_base):
    use_tiny_base(tiny_base)  # the Ctrl-C lands in the fit's steps; the built-in base need not be trained again
    cfg = default_config(tmp_path / "out")
    cfg["train"]["max_train_steps"] = 100_000
    path = _write(tmp_path / "c.yaml", cfg)
    proc = subprocess.Popen(
        [sys.executable, "-m", "aipc_env", "train", str(path)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    log = tmp_path / "out" / "train_log.jsonl"
    deadline = time.monotonic() + 180
    while not (log.is_file() and log.read_text().count("\n") > 3) and time.monotonic() < deadline:
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: SIGINT to the foreground group
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert "Traceback" not in out + err and "KeyboardInterrupt" not in out + err
    stops = [line for line in (out + err).splitlines() if "stopped" in line]
    assert len(stops) == 1 and "Ctrl-C" in stops[0] and "train.log" in stops[0]


def test_a_silent_start_gets_a_heartbeat_until_the_phase_speaks():
    import time

    from aipc_env.core.heartbeat import Heartbeat

    said: list[str] = []
    beat = Heartbeat(said.append, "fit: still importing the training stack", every=0.05).start()
    time.sleep(0.18)
    beat.stop()
    count = len(said)
    time.sleep(0.12)
    assert count >= 2 and len(said) == count  # lines while silent, none after stop
    assert said[0].startswith("fit: still importing the training stack (") and said[0].endswith(" s)")


def _heldout_case(tmp_path: Path, **data) -> tuple[dict, Path]:
    """A config on a (fake) model folder and a training dataset, with data.heldout and what `data` sets."""
    from tests.test_dataset import local

    model = tmp_path / "model"
    model.mkdir()
    (model / "model_index.json").write_text("{}")
    train = local(tmp_path / "train set", n=5)
    held = local(tmp_path / "held out", n=3)
    raw = {
        "engine": "builtin",
        "model": {"path": str(model)},
        "output_dir": str(tmp_path / "out"),
        "data": {"datasets": [str(train)], "target_size": [64, 64], "heldout": str(held), **data},
    }
    return raw, held


def _check(raw: dict, tmp_path: Path):
    from aipc_env.train.config import TrainConfig
    from aipc_env.train.inputs import check_run_inputs

    check_run_inputs(TrainConfig.model_validate(raw), tmp_path / "c.yaml")


def test_a_heldout_set_is_checked_before_anything_runs(tmp_path):
    from aipc_env.errors import InputError

    raw, held = _heldout_case(tmp_path)
    _check(raw, tmp_path)  # complete samples, a folder of their own: accepted
    # the training set itself is not held out
    same = {**raw, "data": {**raw["data"], "heldout": raw["data"]["datasets"][0]}}
    with pytest.raises(InputError, match=r"the held-out set is data.datasets\[0\]") as err:
        _check(same, tmp_path)
    assert err.value.key == "data.heldout"
    # a sample the judge would use without its prompt
    (held / "training_images" / "s1.txt").unlink()
    with pytest.raises(InputError, match="without a control, a prompt or a target: s1"):
        _check(raw, tmp_path)
    # ...unless heldout_max_samples leaves it out (the judge uses the first samples only)
    _check({**raw, "data": {**raw["data"], "heldout_max_samples": 1}}, tmp_path)
    missing = {**raw, "data": {**raw["data"], "heldout": str(tmp_path / "nowhere")}}
    with pytest.raises(InputError, match=r"held-out set .* does not exist"):
        _check(missing, tmp_path)


def test_the_builtin_model_takes_no_heldout_set(tmp_path):
    from aipc_env.errors import InputError

    raw = default_config(tmp_path / "run")
    raw["data"]["heldout"] = str(tmp_path)
    with pytest.raises(InputError, match="judges itself") as err:
        _check(raw, tmp_path)
    assert err.value.key == "data.heldout"


def test_a_heldout_set_adds_the_judge_phase(tmp_path):
    raw, _held = _heldout_case(tmp_path, heldout_steps=3)
    path = _write(tmp_path / "c.yaml", raw)
    result = run_cli("train", str(path), "--dry-run")
    assert result.returncode == 0, result.stderr
    phases = _plan(tmp_path / "out")["phases"]
    assert [p["name"] for p in phases] == ["cache", "fit", "judge"]
    assert phases[2]["argv"][1:] == ["-m", "aipc_env.workers.heldout_phase", "--config", str(path)]
    del raw["data"]["heldout"]
    _write(tmp_path / "c.yaml", raw)
    assert [p["name"] for p in _plan_of(tmp_path, path)] == ["cache", "fit"]


def _plan_of(tmp_path: Path, path: Path) -> list[dict]:
    import shutil

    shutil.rmtree(tmp_path / "out")
    assert run_cli("train", str(path), "--dry-run").returncode == 0
    return _plan(tmp_path / "out")["phases"]
