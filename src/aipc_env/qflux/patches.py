"""The runbook's step-5 adaptation of a qwen-image-finetune clone, as data: files to create and anchored
replacements. Every anchor is upstream text that must occur exactly as often as stated (checked before anything is
written); the replacement text carries `aipc-env` in a comment where it adds behaviour. Pure: no I/O here.

Written against upstream 460ba1a; another commit either still matches every anchor (and is adapted the same way)
or is refused with the anchor and file named.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Create", "Replace", "CallRewrite", "PATCHES", "CREATED", "CALL_REWRITES", "HELPERS_MODULE",
           "HELPER_NAMES", "SRC"]

SRC = "src/qflux"
HELPERS_MODULE = f"{SRC}/utils/device_utils.py"
NF4_MODULE = f"{SRC}/utils/nf4.py"


@dataclass(frozen=True)
class Create:
    """A new file (its whole content)."""

    path: str
    content: str
    why: str


@dataclass(frozen=True)
class Replace:
    """Replace `old` by `new` in `path`; `old` must occur exactly `count` times in the pristine file."""

    id: str
    path: str
    old: str
    new: str
    why: str
    count: int = 1


@dataclass(frozen=True)
class CallRewrite:
    """A torch.cuda call rewritten to a device helper in every file of the package (comments included, so no
    `torch.cuda.` is left outside the helpers module); the helper import is added to each file that uses it."""

    pattern: str
    helper: str
    replacement: str


HELPER_NAMES = ("device_empty_cache", "device_synchronize", "device_manual_seed_all", "device_context",
                "device_available", "device_capability")

DEVICE_UTILS = '''\
# aipc-env adapt (runbook step 5.1): device-agnostic helpers. Call these instead of torch.cuda.*:
# XPU first, then CUDA; on the CPU they do nothing (device_context gives a null context).
import contextlib

import torch


def _xpu() -> bool:
    return hasattr(torch, "xpu") and torch.xpu.is_available()


def device_empty_cache() -> None:
    if _xpu():
        torch.xpu.empty_cache()
    elif torch.cuda.is_available():
        torch.cuda.empty_cache()


def device_synchronize() -> None:
    if _xpu():
        torch.xpu.synchronize()
    elif torch.cuda.is_available():
        torch.cuda.synchronize()


def device_manual_seed_all(seed: int) -> None:
    if _xpu():
        torch.xpu.manual_seed_all(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


def device_context(device):
    """Replaces torch.cuda.device(): torch.xpu.device("cpu") raises, so the CPU gets a null context."""
    device_str = str(device) if device is not None else "cpu"
    if device_str.startswith("cpu"):
        return contextlib.nullcontext()
    if _xpu():
        return torch.xpu.device(device)
    return torch.cuda.device(device)


def device_available(kind: str) -> bool:
    if kind == "xpu":
        return _xpu()
    if kind == "cuda":
        return torch.cuda.is_available()
    return True


def device_capability() -> tuple:
    return torch.cuda.get_device_capability() if torch.cuda.is_available() else (0, 0)


def accelerator_device() -> torch.device:
    if _xpu():
        return torch.device("xpu", torch.xpu.current_device())
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")
'''

NF4 = '''\
# aipc-env adapt (runbook step 5.5): NF4 QLoRA loading. quantize_type: nf4 loads the transformer with a
# bitsandbytes 4-bit nf4 quantization and a compute dtype (NF4-A1: torch_dtype=weight_dtype), or a pre-quantized
# transformer_path. diffusers' bitsandbytes loader needs an XPU or a GPU; on the CPU (smoke tests) the Linear
# layers are quantized one by one with the same bitsandbytes settings.
import os

import torch

from qflux.utils.device_utils import accelerator_device


def nf4_config(compute_dtype):
    from diffusers import BitsAndBytesConfig

    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=compute_dtype)


def quantize_linear_nf4(model: torch.nn.Module, compute_dtype) -> torch.nn.Module:
    import bitsandbytes as bnb

    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            if not isinstance(child, torch.nn.Linear):
                continue
            q = bnb.nn.Linear4bit(child.in_features, child.out_features, bias=child.bias is not None,
                                  compute_dtype=compute_dtype, quant_type="nf4", quant_storage=torch.uint8,
                                  device="meta")
            q.weight = bnb.nn.Params4bit(child.weight.data.to("cpu", torch.float32).contiguous(), requires_grad=False,
                                         quant_type="nf4", compress_statistics=False, quant_storage=torch.uint8)
            if child.bias is not None:
                q.bias = torch.nn.Parameter(child.bias.data.to(compute_dtype), requires_grad=False)
            setattr(module, child_name, q.to("cpu"))
    for p in model.parameters():
        if p.dtype.is_floating_point and p.dtype != compute_dtype:
            p.data = p.data.to(compute_dtype)
    model.is_loaded_in_4bit = True  # as diffusers' loader sets it: peft then uses its bitsandbytes LoRA layer
    return model


def load_nf4_transformer(model_cls, pretrained_model_name_or_path, weight_dtype, transformer_path=None):
    device = accelerator_device()
    if device.type == "cpu":
        if transformer_path:
            raise ValueError("a pre-quantized NF4 transformer_path loads on an XPU or a GPU; on the CPU remove "
                             "model.transformer_path (the transformer is then quantized on load)")
        model = model_cls.from_pretrained(pretrained_model_name_or_path, subfolder="transformer",
                                          torch_dtype=torch.float32, use_safetensors=True)
        return quantize_linear_nf4(model, weight_dtype)
    if transformer_path:
        sub = None if os.path.isfile(os.path.join(transformer_path, "config.json")) else "transformer"
        return model_cls.from_pretrained(transformer_path, subfolder=sub, torch_dtype=weight_dtype,
                                         device_map={"": device})
    return model_cls.from_pretrained(pretrained_model_name_or_path, subfolder="transformer",
                                     quantization_config=nf4_config(weight_dtype), torch_dtype=weight_dtype,
                                     device_map={"": device}, use_safetensors=True)
'''

ACCELERATE_XPU = """\
# aipc-env adapt (runbook step 5.3): one XPU, no distributed backend. 'no' is quoted: unquoted YAML makes it
# a boolean and accelerate fails on .upper().
compute_environment: LOCAL_MACHINE
debug: false
distributed_type: 'NO'
mixed_precision: 'no'
num_machines: 1
num_processes: 1
main_training_function: main
dynamo_backend: 'no'
use_cpu: false
"""

CREATED = (
    Create(HELPERS_MODULE, DEVICE_UTILS, "device-agnostic helpers (XPU, CUDA, CPU) replacing torch.cuda.*"),
    Create(NF4_MODULE, NF4, "the NF4 transformer loader (bitsandbytes nf4 with a compute dtype)"),
    Create("accelerate_config_xpu.yaml", ACCELERATE_XPU, "a single-device accelerate config (the shipped one is "
           "MULTI_GPU x2, bf16, inductor)"),
)

CALL_REWRITES = (
    CallRewrite(r"torch\.cuda\.empty_cache\(\)", "device_empty_cache", "device_empty_cache()"),
    CallRewrite(r"torch\.cuda\.synchronize\(\)", "device_synchronize", "device_synchronize()"),
    CallRewrite(r"torch\.cuda\.synchronize\b", "device_synchronize", "device_synchronize"),
    CallRewrite(r"torch\.cuda\.manual_seed_all\(", "device_manual_seed_all", "device_manual_seed_all("),
    CallRewrite(r"torch\.cuda\.device\(", "device_context", "device_context("),
    CallRewrite(r"torch\.cuda\.is_available\(\)", "device_available", 'device_available("cuda")'),
    CallRewrite(r"torch\.cuda\.get_device_capability\(\)", "device_capability", "device_capability()"),
)

_CONFIG = f"{SRC}/data/config.py"
_BASE = f"{SRC}/trainer/base_trainer.py"
_QWEN = f"{SRC}/trainer/qwen_image_edit_trainer.py"
_PLUS = f"{SRC}/trainer/qwen_image_edit_plus_trainer.py"
_LOAD = f"{SRC}/models/load_model.py"
_LOGGER = f"{SRC}/utils/logger.py"
_DATASET = f"{SRC}/data/dataset.py"

def _local_paths(patch_id: str, path: str, hub_id: str, tag: str, why: str) -> Replace:
    """Both trainers' load_model: the VAE and text encoder from the configured model instead of a hub ID."""
    return Replace(
        patch_id, path,
        f'        self.vae = load_vae("{hub_id}", weight_dtype=self.weight_dtype)  # use original one\n'
        '        # same to model constructed from vae self.vae = pipe.vae\n'
        f'        self.text_encoder = load_qwenvl("{hub_id}", weight_dtype=self.weight_dtype)  # use original one\n',
        f'        # {tag}: the configured (local) model, not hub IDs\n'
        '        self.vae = load_vae(self.config.model.pretrained_model_name_or_path, weight_dtype=self.weight_dtype)\n'
        '        # same to model constructed from vae self.vae = pipe.vae\n'
        '        self.text_encoder = load_qwenvl(\n'
        '            self.config.model.text_encoder_path or self.config.model.pretrained_model_name_or_path,\n'
        '            weight_dtype=self.weight_dtype,\n'
        '        )\n',
        why)


def _nf4_load(patch_id: str, path: str, why: str) -> Replace:
    """Both trainers' load_model: the transformer in NF4 when the config says so."""
    call = ('        self.dit = load_transformer(\n'
            '            self.config.model.pretrained_model_name_or_path,  # could use quantized version\n'
            '            weight_dtype=self.weight_dtype,\n')
    return Replace(patch_id, path, call + '        )\n',
                   call + '            quantize_type=self.config.model.quantize_type,  # aipc-env: NF4\n'
                   '            transformer_path=self.config.model.transformer_path,\n'
                   '        )\n', why)


PATCHES: tuple[Replace, ...] = (
    # --- 5.2 residual patterns ---------------------------------------------------------------------------------
    Replace("device-type-xpu", _CONFIG,
            '    if d.type == "cuda":\n'
            '        if not torch.cuda.is_available():\n'
            '            raise ValueError(f"CUDA not available but got device={d}.")\n',
            '    # aipc-env: CUDA and XPU devices are checked through torch.accelerator (no torch.cuda call here: this\n'
            '    # module cannot import qflux.utils.device_utils, whose package imports this module)\n'
            '    if d.type in ("cuda", "xpu"):\n'
            '        current = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None\n'
            '        if current is None or current.type != d.type:\n'
            '            raise ValueError(f"{d.type.upper()} not available but got device={d}.")\n',
            "device checks get an xpu branch"),
    Replace("sdpa-text-encoder", _LOAD,
            '    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(\n'
            '        "Qwen/Qwen2.5-VL-7B-Instruct",\n'
            '        torch_dtype=weight_dtype,  # CPU 用 fp32\n'
            '        use_safetensors=True,\n'
            '        attn_implementation="flash_attention_2",\n'
            '    )',
            '    # aipc-env: the local model (or a pre-quantized text encoder dir), PyTorch SDPA (flash-attn is CUDA-only)\n'
            '    import os\n'
            '\n'
            '    sub = None if os.path.isfile(os.path.join(pretrained_model_name_or_path, "config.json")) else "text_encoder"\n'
            '    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(\n'
            '        pretrained_model_name_or_path,\n'
            '        subfolder=sub,\n'
            '        torch_dtype=weight_dtype,  # CPU 用 fp32\n'
            '        use_safetensors=True,\n'
            '        attn_implementation="sdpa",\n'
            '    )',
            "the text encoder comes from the configured model, with SDPA instead of flash_attention_2"),
    Replace("sdpa-transformer", _LOAD,
            'def load_transformer(pretrained_model_name_or_path, weight_dtype, device_map="cuda:1"):\n'
            '    import logging\n'
            '\n'
            '    logging.info(f"load model {pretrained_model_name_or_path}")\n'
            '    flux_transformer = QwenImageTransformer2DModel.from_pretrained(\n'
            '        pretrained_model_name_or_path,\n'
            '        subfolder="transformer",\n'
            '        torch_dtype=weight_dtype,\n'
            '        use_safetensors=True,  # 使用 safetensors 格式，加载更快,\n'
            '        attn_implementation="flash_attention_2",\n'
            '        device_map="cpu",  # load to cpu instead of gpu\n'
            '    )\n',
            'def load_transformer(pretrained_model_name_or_path, weight_dtype, device_map="cuda:1", quantize_type=None,\n'
            '                     transformer_path=None):\n'
            '    import logging\n'
            '\n'
            '    logging.info(f"load model {pretrained_model_name_or_path}")\n'
            '    if quantize_type == "nf4":  # aipc-env: NF4 QLoRA (runbook 5.5)\n'
            '        from qflux.utils.nf4 import load_nf4_transformer\n'
            '\n'
            '        flux_transformer = load_nf4_transformer(QwenImageTransformer2DModel, pretrained_model_name_or_path,\n'
            '                                                weight_dtype, transformer_path)\n'
            '        logging.info(f"loaded NF4 transformer from {transformer_path or pretrained_model_name_or_path}")\n'
            '        return flux_transformer\n'
            '    flux_transformer = QwenImageTransformer2DModel.from_pretrained(\n'
            '        pretrained_model_name_or_path,\n'
            '        subfolder="transformer",\n'
            '        torch_dtype=weight_dtype,\n'
            '        use_safetensors=True,  # 使用 safetensors 格式，加载更快,\n'
            '        attn_implementation="sdpa",\n'
            '        device_map="cpu",  # load to cpu instead of gpu\n'
            '    )\n',
            "the NF4 path and SDPA instead of flash_attention_2"),
    Replace("torchvision-lazy", _LOGGER, "import torchvision\nimport wandb\n", "import wandb\n",
            "torchvision is imported where images are logged (it is optional in the training env)"),
    Replace("torchvision-lazy-calls", _LOGGER, "torchvision.utils.make_grid(", "_make_grid(", "lazy make_grid calls",
            count=3),
    Replace("torchvision-lazy-grid", _LOGGER, "from tensorboardX import SummaryWriter\n",
            "from tensorboardX import SummaryWriter\n\n\n"
            "def _make_grid(*args, **kwargs):  # aipc-env: torchvision only where a grid is logged\n"
            "    import torchvision\n\n"
            "    return torchvision.utils.make_grid(*args, **kwargs)\n",
            "a lazy make_grid"),
    Replace("local-parquet", _DATASET,
            '            if isinstance(dataset_path, dict):\n'
            '                repo_id = dataset_path["repo_id"]\n'
            '                split = dataset_path["split"]\n'
            '                dataset_path = repo_id\n'
            '            if is_huggingface_repo(dataset_path):\n',
            '            local_parquet = False\n'
            '            if isinstance(dataset_path, dict):\n'
            '                repo_id = dataset_path["repo_id"]\n'
            '                split = dataset_path["split"]\n'
            '                dataset_path = repo_id\n'
            '                # aipc-env: {repo_id: <local folder of parquet files>, split} loads through datasets too\n'
            '                local_parquet = os.path.isdir(dataset_path)\n'
            '            if local_parquet or is_huggingface_repo(dataset_path):\n',
            "a local parquet folder in the dict form is read (upstream treated it as an image folder and failed)"),
    # --- 5.4 schema ----------------------------------------------------------------------------------------------
    Replace("schema-nf4", _CONFIG,
            '    quantize: bool = False\n'
            '    use_vlm_prompt_enhancer: bool = False',
            '    quantize: bool = False\n'
            '    # aipc-env: NF4 QLoRA (runbook 5.4): "nf4" loads the transformer in bitsandbytes nf4; transformer_path\n'
            '    # and text_encoder_path name pre-quantized folders (aipc-env quantize)\n'
            '    quantize_type: str | None = None\n'
            '    transformer_path: str | None = None\n'
            '    text_encoder_path: str | None = None\n'
            '    use_vlm_prompt_enhancer: bool = False\n'
            '\n'
            '    @field_validator("quantize_type")\n'
            '    @classmethod\n'
            '    def _check_quantize_type(cls, v: str | None) -> str | None:\n'
            '        if v not in (None, "nf4"):\n'
            '            raise ValueError("quantize_type must be nf4 or null")\n'
            '        return v',
            "NF4 expressible in the config"),
    Replace("schema-nf4-type", _CONFIG,
            '        name = (self.model_name or "").lower()\n',
            '        if getattr(self.model, "quantize_type", None) == "nf4":  # aipc-env\n'
            '            return "nf4"\n'
            '        name = (self.model_name or "").lower()\n',
            "quantization_type reports nf4"),
    Replace("schema-num-workers", _CONFIG,
            '    @field_validator("batch_size", "num_workers")\n'
            '    @classmethod\n'
            '    def _check_pos_int(cls, v: int) -> int:\n'
            '        if v <= 0:\n'
            '            raise ValueError("must be positive integer")\n'
            '        return v\n',
            '    @field_validator("batch_size")\n'
            '    @classmethod\n'
            '    def _check_pos_int(cls, v: int) -> int:\n'
            '        if v <= 0:\n'
            '            raise ValueError("must be positive integer")\n'
            '        return v\n'
            '\n'
            '    @field_validator("num_workers")  # aipc-env: 0 is the Windows spawn escape hatch\n'
            '    @classmethod\n'
            '    def _check_workers(cls, v: int) -> int:\n'
            '        if v < 0:\n'
            '            raise ValueError("must be >= 0")\n'
            '        return v\n',
            "num_workers >= 0"),
    # --- local model paths (5.6, 5.7) -------------------------------------------------------------------------
    _local_paths("local-paths", _QWEN, "Qwen/Qwen-Image-Edit", "aipc-env",
                 "VAE and text encoder from the configured model"),
    _nf4_load("nf4-load", _QWEN, "the transformer loads in NF4 when configured"),
    Replace("nf4-autocast", _QWEN,
            '            model_pred = self.dit(\n'
            '                hidden_states=packed_input,\n'
            '                timestep=timesteps / 1000,\n'
            '                guidance=None,\n'
            '                encoder_hidden_states_mask=prompt_embeds_mask,\n'
            '                encoder_hidden_states=prompt_embeds,\n'
            '                img_shapes=img_shapes,\n'
            '                txt_seq_lens=txt_seq_lens,\n'
            '                return_dict=False,\n'
            '            )[0]\n',
            '            # aipc-env NF4-A2: autocast the trainable forward on the device (the Accelerator runs with\n'
            '            # mixed_precision "no"; its bf16 autocast is CUDA-only)\n'
            '            with torch.autocast(device.type, dtype=self.weight_dtype, enabled=device.type != "cpu"):\n'
            '                model_pred = self.dit(\n'
            '                    hidden_states=packed_input,\n'
            '                    timestep=timesteps / 1000,\n'
            '                    guidance=None,\n'
            '                    encoder_hidden_states_mask=prompt_embeds_mask,\n'
            '                    encoder_hidden_states=prompt_embeds,\n'
            '                    img_shapes=img_shapes,\n'
            '                    txt_seq_lens=txt_seq_lens,\n'
            '                    return_dict=False,\n'
            '                )[0]\n',
            "NF4-A2 autocast around the trainable forward"),
    _local_paths("plus-local-paths", _PLUS, "Qwen/Qwen-Image-Edit-2509", "aipc-env (runbook 5.7)",
                 "Plus trainer: VAE and text encoder from the configured model"),
    _nf4_load("plus-nf4-load", _PLUS, "Plus trainer: NF4 transformer"),
    # --- training loop (5.2) ---------------------------------------------------------------------------------
    Replace("max-steps-guard", _BASE,
            '                self.save_checkpoint(epoch, self.global_step)\n'
            '\n'
            '                # Run validation if needed\n',
            '                self.save_checkpoint(epoch, self.global_step)\n'
            '                # aipc-env: stop exactly at max_train_steps (upstream issue #51)\n'
            '                if self.global_step >= self.config.train.max_train_steps:\n'
            '                    self.save_checkpoint(epoch, self.global_step, is_last=True)\n'
            '                    return\n'
            '\n'
            '                # Run validation if needed\n',
            "the max_train_steps guard in train_epoch"),
    Replace("epoch-loop-break", _BASE,
            '            self.train_epoch(epoch, train_dataloader)\n'
            '            if self.training_interrupted:\n'
            '                break\n',
            '            self.train_epoch(epoch, train_dataloader)\n'
            '            if self.training_interrupted:\n'
            '                break\n'
            '            if self.global_step >= self.config.train.max_train_steps:  # aipc-env: one final checkpoint\n'
            '                break\n',
            "the epoch loop breaks at max_train_steps"),
    Replace("spawn-guard", _BASE,
            '        mp.set_start_method("spawn", force=True)\n',
            '        try:  # aipc-env: guarded (Windows already spawns; a second set fails in some launchers)\n'
            '            mp.set_start_method("spawn", force=True)\n'
            '        except RuntimeError:\n'
            '            pass\n',
            "set_start_method guarded"),
    Replace("checkpoints-total-limit", _BASE,
            '        accelerator_project_config = ProjectConfiguration(\n'
            '            project_dir=self.config.logging.output_dir,\n'
            '            logging_dir=self.config.logging.output_dir,\n'
            '        )\n',
            '        accelerator_project_config = ProjectConfiguration(\n'
            '            project_dir=self.config.logging.output_dir,\n'
            '            logging_dir=self.config.logging.output_dir,\n'
            '            total_limit=self.config.train.checkpoints_total_limit,  # aipc-env\n'
            '        )\n',
            "checkpoints_total_limit wired into the accelerate ProjectConfiguration"),
    Replace("checkpoints-prune", _BASE,
            '        if self.accelerator.is_main_process:\n'
            '            with open(os.path.join(save_path, "state.json"), "w") as f:\n'
            '                json.dump(state_info, f)\n',
            '        if self.accelerator.is_main_process:\n'
            '            with open(os.path.join(save_path, "state.json"), "w") as f:\n'
            '                json.dump(state_info, f)\n'
            '            self._prune_checkpoints()\n',
            "checkpoints beyond checkpoints_total_limit are pruned"),
    Replace("checkpoints-prune-def", _BASE,
            '    def save_lora(self, save_folder, adapter_name=None):\n',
            '    def _prune_checkpoints(self):\n'
            '        """aipc-env: keep at most train.checkpoints_total_limit periodic checkpoints (the last one stays)."""\n'
            '        limit = self.config.train.checkpoints_total_limit\n'
            '        if not limit:\n'
            '            return\n'
            '        root = self.config.logging.output_dir\n'
            '        periodic = []\n'
            '        for name in os.listdir(root):\n'
            '            parts = name.split("-")\n'
            '            if len(parts) == 3 and parts[0] == "checkpoint" and parts[1].isdigit() and parts[2].isdigit():\n'
            '                periodic.append((int(parts[2]), name))\n'
            '        for _, name in sorted(periodic)[:-limit]:\n'
            '            shutil.rmtree(os.path.join(root, name), ignore_errors=True)\n'
            '\n'
            '    def save_lora(self, save_folder, adapter_name=None):\n',
            "the pruning itself"),
    Replace("lora-metadata", _BASE,
            '        self.pipeline_class.save_lora_weights(save_folder, lora_state_dict, safe_serialization=True)\n'
            '        logging.info(f"Saved LoRA weights to {save_folder}")\n',
            '        # aipc-env: save the adapter metadata, or diffusers reloads the LoRA with alpha = r\n'
            '        self.pipeline_class.save_lora_weights(\n'
            '            save_folder,\n'
            '            lora_state_dict,\n'
            '            safe_serialization=True,\n'
            '            transformer_lora_adapter_metadata=unwrapped_transformer.peft_config[adapter_name].to_dict(),\n'
            '        )\n'
            '        logging.info(f"Saved LoRA weights to {save_folder}")\n',
            "the LoRA is saved with its metadata (alpha)"),
)


def helper_import(names: list[str]) -> str:
    return f"from qflux.utils.device_utils import {', '.join(sorted(names))}  # aipc-env\n"


_IMPORT_LINE = re.compile(r"^(import torch\b.*|from torch\b.*import.*)$", re.M)


def import_anchor(text: str) -> int | None:
    """Where the helpers import goes: after the first top-level `import torch...` line (None if there is none)."""
    m = _IMPORT_LINE.search(text)
    return None if m is None else m.end() + 1
