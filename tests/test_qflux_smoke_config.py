"""The qflux smoke's config is recommend's, changed only in the keys it records (the pure part; the run itself is
in test_qflux.py)."""

from pathlib import Path

import pytest

from aipc_env.qflux.smoke import smoke_config
from aipc_env.train.recommend import Machine, qflux_config, recommend

GiB = 2**30


def _recommended(gb: float) -> dict:
    return qflux_config(recommend(Machine(ram_bytes=int(gb * GiB)), force=True), dataset_path=None)


@pytest.mark.parametrize("gb, prequantized", [(31.6, {"text_encoder_path"}), (62.6, set()), (95.4, set())])
@pytest.mark.parametrize("accelerator", [True, False])
def test_only_recorded_keys_change(gb, prequantized, accelerator):
    recommended = _recommended(gb)
    assert {k for k in ("text_encoder_path", "transformer_path") if k in recommended["model"]} == prequantized
    cfg, changed = smoke_config(recommended, Path("/runs/smoke 1"), accelerator=accelerator)
    assert cfg["optimizer"] == {"class_path": "bitsandbytes.optim.Adam8bit", "init_args": {"lr": 1e-4, "betas": [0.9, 0.999]}}
    assert cfg["train"]["gradient_checkpointing"] is True and cfg["train"]["checkpoints_total_limit"] == 3
    assert cfg["model"]["lora"] == recommended["model"]["lora"]
    assert cfg["data"]["init_args"]["caption_dropout_rate"] == 0.05
    assert cfg["train"]["max_train_steps"] == 5 and cfg["train"]["checkpointing_steps"] == 1
    assert cfg["model"]["pretrained_model_name_or_path"] == "/runs/smoke 1/model"
    devices = cfg["cache"]["devices"]
    if accelerator:
        assert devices == {"vae": "xpu:0", "text_encoder": "xpu:0"} and "cache.devices.vae" not in changed
        for key in prequantized:  # kept, pointing at the tiny model's pre-quantized folder
            assert cfg["model"][key].startswith("/runs/smoke 1/") and f"model.{key}" in changed
    else:
        assert devices == {"vae": "cpu", "text_encoder": "cpu"} and "no XPU" in changed["cache.devices.vae"]
        for key in prequantized:
            assert key not in cfg["model"] and "validate_environment" in changed[f"model.{key}"]
    assert all(why for why in changed.values())
    assert "trainer" not in changed and cfg["trainer"] == "QwenImageEditPlus"


def test_the_plain_edit_trainer_is_a_recorded_change():
    cfg, changed = smoke_config(_recommended(31.6), Path("/r"), accelerator=False, plus=False)
    assert cfg["trainer"] == "QwenImageEdit" and "2509" in changed["trainer"]


def test_a_cpu_recommendation_keeps_its_devices_unrecorded():
    rec = qflux_config(recommend(Machine(ram_bytes=int(62.6 * GiB), device="cpu")), dataset_path=None)
    cfg, changed = smoke_config(rec, Path("/r"), accelerator=False)
    assert cfg["cache"]["devices"] == {"vae": "cpu", "text_encoder": "cpu"}
    assert not any(key.startswith("cache.devices") for key in changed)
