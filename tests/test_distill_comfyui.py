"""The ComfyUI export against ComfyUI's own key map (tests/fixtures/comfyui: recorded from ComfyUI's code at a
pinned commit), and what travels with an export: the licence text, the change notice, "Built with Qwen", and a
repository name that is not "Qwen...".
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aipc_env.errors import AipcError, InputError

KEYMAP = json.loads((Path(__file__).parent / "fixtures" / "comfyui" / "qwen21-keymap.json").read_text())
SUFFIXES = (".lora_down.weight", ".lora_up.weight", ".alpha")


def _diffusers_linears() -> dict[str, tuple[int, int]]:
    """Every Linear of diffusers' QwenImage21Transformer2DModel at the recorded sizes: (out, in)."""
    import torch
    from diffusers import QwenImage21Transformer2DModel

    cfg = KEYMAP["model"]["config"]
    model = QwenImage21Transformer2DModel(
        patch_size=1,
        in_channels=cfg["in_channels"],
        out_channels=cfg["out_channels"],
        num_layers=cfg["num_layers"],
        attention_head_dim=cfg["attention_head_dim"],
        num_attention_heads=cfg["num_attention_heads"],
        context_in_dim=cfg["context_in_dim"],
        mlp_ratio=cfg["mlp_ratio"],
        axes_dims_rope=tuple(cfg["axes_dims_rope"]),
    )
    return {name: tuple(m.weight.shape) for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)}


def _lora_for(modules: dict[str, tuple[int, int]], rank: int = 2) -> dict:
    import torch

    g = torch.Generator().manual_seed(0)
    out = {}
    for name, (rows, cols) in modules.items():
        out[f"transformer.{name}.lora_A.weight"] = torch.randn(rank, cols, generator=g)
        out[f"transformer.{name}.lora_B.weight"] = torch.randn(rows, rank, generator=g)
    return out


def _prov(tmp_path: Path, **kw):
    from aipc_env.workers.distill.export import Provenance

    model = tmp_path / "model"
    model.mkdir(parents=True, exist_ok=True)
    if not (model / "LICENSE").exists():
        (model / "LICENSE").write_text("Qwen RESEARCH LICENSE AGREEMENT (test copy)\n", encoding="utf-8")
    return Provenance(
        **{
            "model_dir": model,
            "base_model": "Qwen-Image-2.1-Turbo",
            "config_sha256": "c" * 64,
            "student_steps": 4,
            "teacher_steps": 8,
            **kw,
        }
    )


def _publish(folder: Path, tensors: dict, rank: int = 2, alpha: float = 4.0) -> Path:
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    save_file(
        tensors,
        str(folder / "pytorch_lora_weights.safetensors"),
        metadata={"format": "pt", "lora_adapter_metadata": json.dumps({"transformer.r": rank, "transformer.lora_alpha": alpha})},
    )
    return folder


def test_every_module_the_export_accepts_loads_in_comfyuis_key_map_onto_the_right_weight(tmp_path):
    """Each Linear of the 2.1 transformer is exported and found by ComfyUI's key map with the right target shape
    (the fused MLP halves onto their slice of gate_up), or refused; refused are exactly the modules the recorded
    map does not prove."""
    from safetensors.torch import load_file

    from aipc_env.workers.distill.export import comfyui_key, export_lora

    linears = _diffusers_linears()
    key_map, shapes = KEYMAP["key_map"], KEYMAP["state_dict"]
    accepted = {}
    for name, shape in linears.items():
        try:
            accepted[name] = (comfyui_key(name), shape)
        except ValueError:
            assert name.startswith(tuple(KEYMAP["unproven_prefixes"])), name
    assert len(accepted) == len(linears) - 2  # only the timestep embedder's two layers are refused
    assert {n.split(".", 2)[-1] for n in accepted if n.startswith("transformer_blocks.")} == {
        "attn.to_q",
        "attn.to_k",
        "attn.to_v",
        "attn.to_out.0",
        "img_mlp.proj",
        "img_mlp.gate_layer",
        "img_mlp.out",
    }
    dest = tmp_path / "export" / "student.safetensors"
    export_lora(
        _publish(tmp_path / "lora", _lora_for({n: s for n, (_, s) in accepted.items()})), dest, provenance=_prov(tmp_path)
    )
    written = load_file(str(dest))
    bases = {k.removesuffix(s) for k in written for s in SUFFIXES if k.endswith(s)}
    assert len(written) == 3 * len(bases) == 3 * len(accepted)
    for name, (base, (rows, cols)) in accepted.items():
        assert base in bases and base in key_map, f"ComfyUI would not load {base}"
        target, offset = key_map[base]
        target_rows, target_cols = shapes[target]
        if offset is None:
            assert (target_rows, target_cols) == (rows, cols), name
        else:  # the half of the fused [gate; up] the module is: gate_layer first
            dim, start, length = offset
            assert (dim, length, target_cols) == (0, rows, cols)
            assert start == (0 if name.endswith(".gate_layer") else rows), name
            assert target.endswith(".img_mlp.gate_up.weight")
        assert tuple(written[f"{base}.lora_down.weight"].shape) == (2, cols)
        assert tuple(written[f"{base}.lora_up.weight"].shape) == (rows, 2)


def test_the_prefixed_form_of_a_fused_half_is_what_comfyui_drops():
    """Why the halves are written bare: ComfyUI's map has no diffusion_model. key for them (the guard's reason)."""
    from aipc_env.workers.distill.export import comfyui_key

    for half in ("img_mlp.proj", "img_mlp.gate_layer"):
        assert f"diffusion_model.transformer_blocks.0.{half}" not in KEYMAP["key_map"]
        assert comfyui_key(f"transformer_blocks.0.{half}") == f"transformer_blocks.0.{half}"
        assert f"transformer_blocks.0.{half}" in KEYMAP["key_map"]
    assert comfyui_key("transformer_blocks.1.attn.to_q") == "diffusion_model.transformer_blocks.1.attn.to_q"


@pytest.mark.parametrize(
    "module, reason",
    [
        ("time_text_embed.timestep_embedder.linear_1", "timestep embedder"),
        ("transformer_blocks.0.img_mlp.gate_up", "no such module"),
        ("transformer_blocks.0.txt_mlp.proj", "no such module"),
        ("transformer_blocks.x.attn.to_q", "no such module"),
        ("transformer_blocks.0.attn.to_q.extra", "no such module"),
        ("img_mlp.proj", "no such module"),
    ],
)
def test_a_module_comfyui_cannot_map_is_refused_by_name(tmp_path, module, reason):
    import torch

    from aipc_env.workers.distill.export import comfyui_key, export_lora

    with pytest.raises(ValueError, match=reason):
        comfyui_key(module)
    ok = {"transformer_blocks.0.attn.to_q": (32, 32)}
    folder = _publish(
        tmp_path / "lora",
        {
            **_lora_for(ok),
            f"transformer.{module}.lora_A.weight": torch.zeros(2, 8),
            f"transformer.{module}.lora_B.weight": torch.zeros(8, 2),
        },
    )
    dest = tmp_path / "out" / "x.safetensors"
    with pytest.raises(InputError) as err:
        export_lora(folder, dest, provenance=_prov(tmp_path))
    assert err.value.message.startswith(f"ComfyUI would not load {module}: ")
    assert "student.target_modules" in err.value.fix
    assert not dest.parent.exists()  # nothing written: not the weights, not the licence


def test_many_refused_modules_are_named_a_few_at_a_time(tmp_path):
    import torch

    from aipc_env.workers.distill.export import export_lora

    tensors = {}
    for i in range(5):
        tensors[f"transformer.transformer_blocks.{i}.txt_mlp.proj.lora_A.weight"] = torch.zeros(2, 8)
        tensors[f"transformer.transformer_blocks.{i}.txt_mlp.proj.lora_B.weight"] = torch.zeros(8, 2)
    with pytest.raises(InputError) as err:
        export_lora(_publish(tmp_path / "lora", tensors), tmp_path / "o.safetensors", provenance=_prov(tmp_path))
    assert err.value.message.startswith(
        "ComfyUI would not load transformer_blocks.0.txt_mlp.proj, "
        "transformer_blocks.1.txt_mlp.proj, transformer_blocks.2.txt_mlp.proj "
        "(and 2 more): "
    )


# --- what travels with an export -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "repo",
    [
        "turbo-4step",
        "my-org/turbo-4step",
        "me/my-qwen-lora",
        "qwen/turbo-4step",
        "me/Turbo-for-Qwen-Image",
        "a" * 96,
        f"{'o' * 96}/{'n' * 96}",
        "me/q",
    ],
)
def test_repository_names_that_are_allowed(repo):
    from aipc_env.distill.licence import check_repo_name

    assert check_repo_name(repo) == repo


@pytest.mark.parametrize(
    "repo, message",
    [
        ("Qwen-Image-Turbo-4step", 'starts with "Qwen"'),
        ("me/qwen-turbo", 'starts with "Qwen"'),
        ("me/QWEN2", 'starts with "Qwen"'),
        ("me/Qwen", 'starts with "Qwen"'),
        ("a" * 97, "not a repository id"),
        ("", "not a repository id"),
        ("a/b/c", "not a repository id"),
        ("me/../x", "not a repository id"),
        ("me/x\n--extra", "not a repository id"),
        ("-x", "not a repository id"),
        ("me/x.git", "not a repository id"),
        ("me/ x", "not a repository id"),
    ],
)
def test_repository_names_that_are_refused(repo, message):
    from aipc_env.distill.licence import check_repo_name

    with pytest.raises(InputError, match=message) as err:
        check_repo_name(repo)
    assert err.value.key == "--repo" and "\n" not in err.value.message


def test_a_qwen_repository_name_writes_nothing(tmp_path):
    from aipc_env.workers.distill.export import export_lora

    folder = _publish(tmp_path / "lora", _lora_for({"transformer_blocks.0.attn.to_q": (32, 32)}))
    dest = tmp_path / "out" / "x.safetensors"
    with pytest.raises(InputError, match="Qwen Research Licence"):
        export_lora(folder, dest, provenance=_prov(tmp_path, repo="me/Qwen-Image-Turbo-LoRA"))
    assert not dest.parent.exists()


def test_the_licence_must_be_in_the_model_folder_and_is_copied_verbatim(tmp_path):
    from aipc_env.workers.distill.export import export_lora

    folder = _publish(tmp_path / "lora", _lora_for({"transformer_blocks.0.attn.to_q": (32, 32)}))
    prov = _prov(tmp_path)
    (prov.model_dir / "LICENSE").unlink()
    dest = tmp_path / "out" / "x.safetensors"
    with pytest.raises(InputError) as err:
        export_lora(folder, dest, provenance=prov)
    assert err.value.path == str(prov.model_dir / "LICENSE") and "licence" in err.value.message
    assert not dest.parent.exists()
    (prov.model_dir / "LICENSE.md").write_text("", encoding="utf-8")
    with pytest.raises(InputError, match="licence file is empty"):
        export_lora(folder, dest, provenance=prov)
    text = "Qwen RESEARCH LICENSE AGREEMENT\r\nnon-ASCII: ü 通义\n"
    (prov.model_dir / "LICENSE.md").write_text(text, encoding="utf-8", newline="")
    export_lora(folder, dest, provenance=prov)
    assert (dest.parent / "LICENSE").read_bytes() == text.encode("utf-8")


def test_the_notice_says_what_changed_and_built_with_qwen_with_hostile_names_neutralised(tmp_path):
    from aipc_env.workers.distill.export import export_lora

    folder = _publish(
        tmp_path / "lora", _lora_for({"transformer_blocks.0.attn.to_q": (32, 32), "transformer_blocks.1.img_mlp.proj": (64, 32)})
    )
    dest = tmp_path / "out" / "x.safetensors"
    export_lora(folder, dest, provenance=_prov(tmp_path, base_model="evil`\n# Injected heading\n<script>"))
    notice = (dest.parent / "NOTICE.md").read_text(encoding="utf-8")
    assert notice.splitlines()[1:4] == ["# x", "", "Built with Qwen"]
    assert "\n# Injected heading" not in notice and "`evil??# Injected heading?<script>`" in notice
    assert "Modules: attn.to_q, img_mlp.proj (2)." in notice
    assert "4 sampling steps approximate the base model's own\n  8-step output" in notice


def test_an_export_replaces_only_what_an_earlier_export_wrote(tmp_path):
    from aipc_env.workers.distill.export import export_lora

    folder = _publish(tmp_path / "lora", _lora_for({"transformer_blocks.0.attn.to_q": (32, 32)}))
    out = tmp_path / "out"
    dest = out / "x.safetensors"
    export_lora(folder, dest, provenance=_prov(tmp_path))
    export_lora(folder, dest, provenance=_prov(tmp_path, config_sha256="d" * 64))  # again: its own files
    assert "`" + "d" * 64 + "`" in (out / "NOTICE.md").read_text(encoding="utf-8")
    (out / "NOTICE.md").write_text("my own notes\n", encoding="utf-8")
    with pytest.raises(InputError, match="another file of that name") as err:
        export_lora(folder, dest, provenance=_prov(tmp_path))
    assert err.value.path == str(out / "NOTICE.md")
    assert (out / "NOTICE.md").read_text(encoding="utf-8") == "my own notes\n"
    (out / "NOTICE.md").unlink()
    (out / "LICENSE").write_text("MIT\n", encoding="utf-8")
    with pytest.raises(InputError, match="another file of that name") as err:
        export_lora(folder, dest, provenance=_prov(tmp_path))
    assert err.value.path == str(out / "LICENSE") and (out / "LICENSE").read_text() == "MIT\n"
    outside = tmp_path / "outside.txt"
    outside.write_text("keep\n", encoding="utf-8")
    (out / "LICENSE").unlink()
    (out / "LICENSE").symlink_to(outside)
    with pytest.raises(InputError, match="is a link") as err:
        export_lora(folder, dest, provenance=_prov(tmp_path))
    assert outside.read_text() == "keep\n"


# --- publish: G1 push preflight and the push, against a local stand-in of the hub API ---------------------------


@pytest.fixture
def hub():
    from tests.support.hub import Hub

    with Hub() as h:
        yield h


def _exported(tmp_path: Path) -> Path:
    from aipc_env.workers.distill.export import export_lora

    dest = tmp_path / "export" / "student.safetensors"
    export_lora(
        _publish(tmp_path / "lora", _lora_for({"transformer_blocks.0.attn.to_q": (32, 32)})), dest, provenance=_prov(tmp_path)
    )
    return dest.parent


def test_publish_runs_g1_then_pushes_the_weights_with_licence_and_notice(tmp_path, hub):
    """The real huggingface_hub client: create, a 1 KiB file uploaded, downloaded by its commit and compared, then
    deleted; the export pushed and every file downloaded back by the push's commit."""
    import hashlib

    from aipc_env.distill.publish import PREFLIGHT_FILE, publish

    folder = _exported(tmp_path)
    said = []
    result = publish(folder, "me/turbo-4step", endpoint=hub.url, log=said.append)
    files = hub.files("me/turbo-4step")
    assert sorted(files) == ["LICENSE", "NOTICE.md", "student.safetensors"]  # the preflight file is gone
    for name, data in files.items():
        assert data == (folder / name).read_bytes()
    assert result["files"] == [
        {"path": n, "sha256": hashlib.sha256((folder / n).read_bytes()).hexdigest()}
        for n in ("student.safetensors", "LICENSE", "NOTICE.md")
    ]
    assert result["commit"] == hub.repos["me/turbo-4step"]["commits"][-1][0] and result["private"] is True
    probe_commit = hub.repos["me/turbo-4step"]["commits"][1]
    assert list(probe_commit[1]) == [PREFLIGHT_FILE] and len(probe_commit[1][PREFLIGHT_FILE]) == 1024
    assert ("GET", f"/me/turbo-4step/resolve/{probe_commit[0]}/{PREFLIGHT_FILE}") in hub.requests
    assert said[0].startswith("publish: G1 push preflight on me/turbo-4step")
    again = publish(folder, "me/turbo-4step", endpoint=hub.url, log=said.append)  # exist_ok: a second push works
    assert again["files"] == result["files"]


@pytest.mark.parametrize("fault, step", [("create", "create"), ("corrupt", "compare")])
def test_g1_fails_by_step_when_the_hub_refuses_or_returns_other_bytes(tmp_path, hub, fault, step):
    from aipc_env.distill.publish import publish

    hub.fail.add(fault)
    with pytest.raises(AipcError) as err:
        publish(_exported(tmp_path), "me/turbo-4step", endpoint=hub.url, log=lambda m: None)
    assert err.value.message.startswith(f"G1 push preflight failed at '{step}'")
    assert err.value.exit_code == 1
    if fault == "create":
        assert "HTTP 403" in err.value.message and "HF_TOKEN" in err.value.fix
        assert hub.repos == {}
    else:  # the preflight failed: the export was not pushed
        assert "student.safetensors" not in hub.files("me/turbo-4step")


def test_an_unreachable_hub_is_a_named_step_not_a_traceback(tmp_path):
    import socket

    from aipc_env.distill.publish import publish

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    with pytest.raises(AipcError) as err:
        publish(_exported(tmp_path), "me/x", endpoint=f"http://127.0.0.1:{port}", log=lambda m: None)
    assert err.value.message.startswith(f"G1 push preflight failed at 'create' against http://127.0.0.1:{port}")


@pytest.mark.parametrize("repo, message", [("me/Qwen-Image-Turbo-4step", 'starts with "Qwen"'), ("turbo-4step", "has no owner")])
def test_publish_refuses_a_name_before_reaching_the_hub(tmp_path, hub, repo, message):
    from aipc_env.distill.publish import publish

    with pytest.raises(InputError, match=message):
        publish(_exported(tmp_path), repo, endpoint=hub.url, log=lambda m: None)
    assert hub.requests == []


def test_nothing_is_published_without_the_licence_and_the_notice(tmp_path, hub):
    from safetensors.torch import load_file, save_file

    from aipc_env.distill.publish import publish

    folder = _exported(tmp_path)
    (folder / "LICENSE").rename(tmp_path / "LICENSE.away")
    with pytest.raises(InputError, match="nothing is published without the licence") as err:
        publish(folder, "me/x", endpoint=hub.url, log=lambda m: None)
    assert err.value.path == str(folder / "LICENSE")
    (tmp_path / "LICENSE.away").rename(folder / "LICENSE")
    notice = (folder / "NOTICE.md").read_text(encoding="utf-8")
    (folder / "NOTICE.md").write_text("# my notes\n", encoding="utf-8")
    with pytest.raises(InputError, match="not the notice an export writes"):
        publish(folder, "me/x", endpoint=hub.url, log=lambda m: None)
    (folder / "NOTICE.md").write_text(notice, encoding="utf-8")
    (folder / "LICENSE").write_text("another licence\n", encoding="utf-8")  # the weights name the old one
    with pytest.raises(InputError, match="does not carry this folder's LICENSE"):
        publish(folder, "me/x", endpoint=hub.url, log=lambda m: None)
    weights = folder / "student.safetensors"
    save_file(load_file(str(weights)), str(weights), metadata={"format": "pt"})  # no notice in its metadata
    with pytest.raises(InputError, match="does not carry this folder's LICENSE"):
        publish(folder, "me/x", endpoint=hub.url, log=lambda m: None)
    weights.unlink()
    with pytest.raises(InputError, match=r"no exported \.safetensors file there"):
        publish(folder, "me/x", endpoint=hub.url, log=lambda m: None)
    assert hub.requests == []


def test_publish_in_offline_mode_says_so_and_reaches_nothing(tmp_path, hub, monkeypatch):
    from huggingface_hub import constants

    from aipc_env.distill.publish import publish

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(AipcError, match=r"offline mode is on \(HF_HUB_OFFLINE\)") as err:
        publish(_exported(tmp_path), "me/x", endpoint=hub.url, log=lambda m: None)
    assert err.value.fix == "run it with HF_HUB_OFFLINE unset (or 0)" and hub.requests == []
