"""Recommendations on 16, 32, 64 and 96 GB machines and a parquet dataset; every config validates."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import yaml

from aipc_env.errors import AipcError
from aipc_env.facts import load_facts
from aipc_env.train.config import TrainConfig, find_todos
from aipc_env.train.recommend import Machine, ProbeJson, machine_from_facts, machine_from_probe, qflux_config, recommend
from tests.conftest import MACHINES, run_cli

GiB = 2**30


def machine(gb: float) -> Machine:
    return Machine(ram_bytes=int(gb * GiB))


@pytest.mark.parametrize("gb,size,text_encoder", [(31.6, [384, 672], True), (62.6, [512, 768], False), (95.4, [512, 768], False)])
def test_tiers(gb, size, text_encoder):
    rec = recommend(machine(gb))
    cfg = rec.config
    TrainConfig.model_validate(cfg)
    assert cfg["data"]["target_size"] == size
    assert ("text_encoder_path" in cfg["model"]) is text_encoder
    assert cfg["optimizer"]["type"] == "adam8bit" and cfg["train"]["gradient_checkpointing"] is True
    assert cfg["train"]["mixed_precision"] == "no" and cfg["data"]["batch_size"] == 1
    assert cfg["data"]["num_workers"] == 1 and cfg["train"]["gradient_accumulation_steps"] == 2
    patterns = [p for p, _ in rec.selected]
    assert ("7.2 pre-quantize the text encoder (NF4)" in patterns) is text_encoder
    assert "model.path" in find_todos(cfg) and "output_dir" in find_todos(cfg)


def test_16gb_is_refused_unless_forced():
    with pytest.raises(AipcError, match="16 GB machines are not supported"):
        recommend(machine(15.6))
    rec = recommend(machine(15.6), force=True)
    assert any("below the supported minimum" in n for n in rec.notes)


def test_parquet_dataset_gets_the_dict_form_for_qflux(tmp_path):
    (tmp_path / "pq" / "data").mkdir(parents=True)
    (tmp_path / "pq" / "data" / "train-00000-of-00001.parquet").write_bytes(b"")
    rec = recommend(machine(31.6), dataset_path=str(tmp_path / "pq"))
    assert rec.config["data"]["datasets"] == [str(tmp_path / "pq")]
    q = qflux_config(rec, dataset_path=str(tmp_path / "pq"))
    assert q["data"]["init_args"]["dataset_path"] == [{"repo_id": str(tmp_path / "pq"), "split": "train"}]
    assert q["cache"]["prompt_empty_drop_keys"] == ["empty_prompt_embeds", "empty_prompt_embeds_mask"]
    assert "dataset format: parquet" in rec.notes


def test_qflux_layout_is_upstreams_nested_one():
    """The shape only; tests/test_qflux.py loads every emitted config with the clone's own loader."""
    rec = recommend(machine(31.6), output_dir="/runs/one")
    q = qflux_config(rec, dataset_path=None)
    processor = q["data"]["init_args"]["processor"]
    assert processor["class_path"] == "qflux.data.preprocess.ImageProcessor"
    assert processor["init_args"]["target_size"] == [384, 672]
    assert q["model"]["quantize_type"] == "nf4" and q["model"]["quantize"] is False
    assert q["cache"]["cache_dir"] == q["data"]["init_args"]["cache_dir"] == str(Path("/runs/one") / "cache")
    assert q["cache"]["devices"] == {"vae": "xpu:0", "text_encoder": "xpu:0"}
    assert qflux_config(recommend(machine(31.6)), dataset_path=None)["cache"]["cache_dir"].startswith("TODO")
    assert qflux_config(rec, dataset_path=None, cache_dir="/fast/cache")["cache"]["cache_dir"] == "/fast/cache"


def test_probe_json_and_facts_inputs(tmp_path):
    probe = ProbeJson.model_validate(
        {"xpu_available": False, "ram_gb": 31.5, "gpu_name": "Intel(R) Arc(TM) Graphics", "future_field": 1}
    )
    rec = recommend(machine_from_probe(probe))
    assert any("no XPU device" in n for n in rec.notes)
    facts = machine_from_facts(load_facts(MACHINES / "linux_arc_a770.json"))
    assert recommend(facts).tier_gb == 64


def test_cli_writes_a_config_the_launcher_refuses_until_filled(tmp_path):
    out = tmp_path / "config.yaml"
    result = run_cli("recommend", "--facts", str(MACHINES / "win11_core_ultra_32gb.json"), "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert "selected 7.2 pre-quantize the text encoder" in result.stderr
    train = run_cli("train", str(out), "--dry-run")
    assert train.returncode == 2 and "model.path" in train.stderr and "TODO" in train.stderr
    as_json = run_cli("recommend", "--facts", str(MACHINES / "win11_core_ultra_32gb.json"), "--json")
    assert json.loads(as_json.stdout)["tier_gb"] == 32
    qflux = run_cli("recommend", "--facts", str(MACHINES / "linux_arc_a770.json"), "--engine", "qflux")
    cfg = yaml.safe_load(io.StringIO(qflux.stdout))
    assert cfg["trainer"] == "QwenImageEditPlus" and cfg["train"]["mixed_precision"] == "no"
    refused = run_cli("recommend", "--facts", str(MACHINES / "win11_16gb.json"))
    # a machine below the smallest tier is a finding (exit 1): nothing on stdout, the --smoke way on stderr
    assert (refused.returncode, refused.stdout) == (1, "") and "--force" in refused.stderr
    assert "aipc-env recommend --smoke --out smoke.yaml" in refused.stderr
    empty = tmp_path / "c.yaml"
    empty.write_text("")  # what `aipc-env recommend > c.yaml` leaves
    train_empty = run_cli("train", str(empty))
    assert train_empty.returncode == 2 and "the config is empty" in train_empty.stderr
    assert "recommend --smoke --out smoke.yaml" in train_empty.stderr
