"""Check the memory model (aipc_env.train.memory_model) against a measured step on a CUDA device: the same graph as
benchmarks/memory_model.py (diffusers' QwenImageTransformer2DModel at full width, random weights, NF4 Linear layers
through the project's quantizer, LoRA r16, gradient checkpointing, Adam8bit, bf16, the project's loss), with all 60
blocks, at the recommended sequence lengths. CUDA's allocator counts the memory of that graph as an XPU's does; the
ratio measured / estimated is what this records (benchmarks/results/memory-model-cuda.json).

Needs a CUDA GPU with ~40 GB free and ~60 GB of RAM (the blocks are built in bf16 on the CPU, then quantized onto the
GPU one layer at a time). Not run yet: no device was lent when the model was made.

Run: python benchmarks/memory_model_cuda.py [--blocks 60] [--controls-pixels 1048576 262144]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(HERE))

from _common import machine, write_result  # noqa: E402


def step_peak(blocks: int, target: tuple[int, int], control_pixels: int, text: int) -> dict[str, float]:
    import torch
    from bitsandbytes.optim.adam import Adam8bit
    from diffusers import QwenImageTransformer2DModel
    from peft import LoraConfig

    from aipc_env.workers.train.objective import flow_matching_loss
    from aipc_env.workers.train.tiny import quantize_linear_layers_nf4

    dev, dtype = torch.device("cuda"), torch.bfloat16
    torch.manual_seed(0)
    model = QwenImageTransformer2DModel(num_layers=blocks).to(dtype)
    quantize_linear_layers_nf4(model, dev, dtype)
    model.requires_grad_(False)
    model.add_adapter(
        LoraConfig(r=16, lora_alpha=16, target_modules=["to_q", "to_k", "to_v", "to_out.0"], init_lora_weights="gaussian")
    )
    model.enable_gradient_checkpointing()
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        p.data = p.data.float()
    opt = Adam8bit(params, lr=1e-4)
    th, tw = target[0] // 16, target[1] // 16
    side = int(control_pixels**0.5) // 16
    inputs = {
        "target": torch.randn(1, th * tw, 64, device=dev, dtype=dtype),
        "controls": torch.randn(1, side * side, 64, device=dev, dtype=dtype),
        "prompt_embeds": torch.randn(1, text, 3584, device=dev, dtype=dtype),
        "prompt_mask": None,
        "img_shapes": [[(1, th, tw), (1, side, side)]],
        "token_mask": None,
    }
    gen = torch.Generator().manual_seed(0)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    loss = flow_matching_loss(model, inputs, gen)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    return {
        "peak_allocated": float(torch.cuda.max_memory_allocated()),
        "peak_reserved": float(torch.cuda.max_memory_reserved()),
        "seconds": time.perf_counter() - t0,
        "tokens": th * tw + side * side + text,
    }


def main() -> None:
    from aipc_env.train.memory_model import estimate, text_tokens

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--blocks", type=int, default=60)
    ap.add_argument("--controls-pixels", type=int, nargs="+", default=[1024 * 1024, 512 * 512])
    args = ap.parse_args()
    rows = []
    for pixels in args.controls_pixels:
        measured = step_peak(args.blocks, (384, 672), pixels, text_tokens(1))
        est = estimate([384, 672], control_pixels=pixels)
        rows.append(
            {
                "control_pixels": pixels,
                **measured,
                "estimate": est.total_bytes,
                "ratio_measured_to_estimate": round(measured["peak_allocated"] / est.total_bytes, 3),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    write_result(
        "memory-model-cuda",
        {"benchmark": "memory-model-cuda", "blocks": args.blocks, "rows": rows, "machine": machine(pinned=False)},
    )


if __name__ == "__main__":
    main()
