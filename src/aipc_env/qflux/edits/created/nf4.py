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
