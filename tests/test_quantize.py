"""NF4 pre-quantization on the tiny pipeline on CPU: the folders load, match quantize-on-load, and train."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.conftest import run_cli
from tests.support.json_outputs import check_json_output
from tests.test_engine import _config, _engine, dataset, tiny_pipe  # noqa: F401 - fixtures

pytestmark = pytest.mark.slow


def test_transformer_nf4_folder_matches_diffusers_quantize_on_load(tiny_pipe, tmp_path):  # noqa: F811
    """The reference is diffusers' own BitsAndBytesConfig loader (what the engine uses on a GPU/XPU), independent
    of aipc-env's quantizer. It refuses to run without a GPU; only this test lifts that check, nothing else."""
    import torch
    from diffusers import BitsAndBytesConfig, QwenImageTransformer2DModel
    from diffusers.quantizers.bitsandbytes import bnb_quantizer

    from aipc_env.workers.train.prequantized import load_nf4_transformer
    from aipc_env.workers.train.tiny import make_batch

    dst = tmp_path / "nf4 transformer ü"
    result = run_cli("quantize", "transformer", "--src", str(tiny_pipe), "--dst", str(dst), "--device", "cpu", "--json")
    assert result.returncode == 0, result.stderr[-2000:]
    check_json_output("quantize", result.stdout)
    config = json.loads((dst / "config.json").read_text())
    assert config["quantization_config"]["bnb_4bit_quant_type"] == "nf4"
    assert not list(tmp_path.glob(".*partial*"))
    cpu = torch.device("cpu")
    loaded = load_nf4_transformer(dst, cpu, torch.float32)
    check = bnb_quantizer.BnB4BitDiffusersQuantizer.validate_environment
    bnb_quantizer.BnB4BitDiffusersQuantizer.validate_environment = lambda self, *a, **k: None  # "No GPU found"
    try:
        reference = QwenImageTransformer2DModel.from_pretrained(
            str(tiny_pipe),
            subfolder="transformer",
            torch_dtype=torch.float32,
            device_map={"": "cpu"},
            quantization_config=BitsAndBytesConfig(
                load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.float32
            ),
        )
    finally:
        bnb_quantizer.BnB4BitDiffusersQuantizer.validate_environment = check
    b = make_batch(batch_size=1)
    loaded.train()  # same bitsandbytes kernel for both (eval mode repacks NF4 weights for a CPU inference kernel)
    reference.train()

    def out(model):
        with torch.no_grad():
            return model(
                hidden_states=torch.cat([b.target, b.control], 1),
                encoder_hidden_states=b.prompt_embeds,
                timestep=torch.tensor([0.5]),
                img_shapes=b.img_shapes,
                return_dict=False,
            )[0]

    sl, sr = loaded.state_dict(), reference.state_dict()
    assert sl.keys() == sr.keys()  # the same layers quantized, the same statistics kept
    assert all(torch.equal(sl[k].cpu(), sr[k].cpu()) for k in sl)  # bit-identical NF4 weights and statistics
    assert torch.allclose(out(loaded), out(reference), atol=1e-5, rtol=0)  # fp32 reduction order may differ


def test_prequantized_dirs_train(tiny_pipe, dataset, tmp_path):  # noqa: F811
    te = tmp_path / "nf4 te"
    dit = tmp_path / "nf4 dit"
    assert run_cli("quantize", "text-encoder", "--src", str(tiny_pipe), "--dst", str(te), "--device", "cpu").returncode == 0
    assert run_cli("quantize", "transformer", "--src", str(tiny_pipe), "--dst", str(dit), "--device", "cpu").returncode == 0
    config = _config(tmp_path, tiny_pipe, dataset, max_train_steps=3)
    cfg = yaml.safe_load(config.read_text())
    cfg["model"].update(transformer_path=str(dit), text_encoder_path=str(te))
    cfg["cache_dir"] = str(tmp_path / "own cache")
    config.write_text(yaml.safe_dump(cfg))
    cache = _engine("cache", config)
    assert cache.returncode == 0, cache.stderr[-2000:]
    fit = _engine("fit", config)
    assert fit.returncode == 0, fit.stderr[-2000:]
    assert (tmp_path / "out run" / "lora" / "pytorch_lora_weights.safetensors").is_file()


def test_bad_inputs(tmp_path):
    (tmp_path / "empty model").mkdir()
    result = run_cli(
        "quantize", "transformer", "--src", str(tmp_path / "empty model"), "--dst", str(tmp_path / "o"), "--device", "cpu"
    )
    assert result.returncode == 2 and "no transformer/config.json" in result.stderr
    assert not (tmp_path / "o").exists()
    missing = run_cli("quantize", "text-encoder", "--src", str(tmp_path / "nope"), "--dst", str(tmp_path / "o"))
    assert missing.returncode == 2 and "model folder not found" in missing.stderr
    (tmp_path / "a file").write_text("x")
    wrong = run_cli("quantize", "transformer", "--src", str(tmp_path / "empty model"), "--dst", str(tmp_path / "a file"))
    assert wrong.returncode == 2 and "is a file; expected a folder" in wrong.stderr
    assert "a file" in wrong.stderr and "Traceback" not in wrong.stderr
