"""The fit phase's memory at real width (issue 50): peak memory and time of one optimizer step of a Qwen-Image
transformer with 1 and 2 full-width blocks, as the fit phase runs it, at the real sequence lengths; the
coefficients `recommend` extrapolates to the real 60 blocks (aipc_env.train.memory_model).

What runs, in a fresh child process per measurement (`nice -n 10`, 2 threads):
- diffusers' own QwenImageTransformer2DModel at its defaults (= the released model: 3072 hidden, 24 heads x 128,
  joint_attention_dim 3584, in_channels 64, axes_dims_rope (16, 56, 56); diffusers 0.42.1 transformer_qwenimage.py)
  with `num_layers` 1 or 2 and random weights, built in bf16; every Linear quantized to NF4 by the project's own
  path (aipc_env.workers.train.tiny.quantize_linear_layers_nf4, the one fit.py uses on the CPU: real bitsandbytes
  Linear4bit), the other parameters in bf16 (what from_pretrained(torch_dtype=bf16) gives an accelerator);
- the tool's LoRA (real peft: rank 16, alpha 16, to_q/to_k/to_v/to_out.0, gaussian init, fp32 LoRA weights as
  fit.py keeps them), gradient checkpointing on, real bitsandbytes Adam8bit;
- one step of the project's own flow-matching loss (aipc_env.workers.train.objective) in bf16: forward, backward,
  optimizer step (the step that creates the optimizer state).

Memory: the child's resident set, with glibc returning every freed allocation of 128 KiB or more to the kernel at
once (MALLOC_MMAP_THRESHOLD_), so that it follows the live tensors. After the model, adapter, optimizer and inputs
are built, freed heap is handed back (malloc_trim) and the kernel's high-water mark is reset
(/proc/self/clear_refs = 5); the step's transient is VmHWM during the step minus VmRSS just before it. The resident
weights are counted from the tensors' own storage (NF4 bytes, absmax, biases, norms, LoRA weights) and the
optimizer state after the step, exactly. Two block counts separate the per-block part from the fixed part; two
sequence lengths give each a per-token slope.

Run: python benchmarks/memory_model.py [--repeats N]   (Linux; writes benchmarks/results/memory-model.json and the
package's coefficients, src/aipc_env/train/memory-coefficients.json); --refit rewrites the coefficients from the
committed JSON only.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(HERE))

from _common import machine, pinned, run_child, write_result  # noqa: E402

THREADS = 2
LORA = {"rank": 16, "alpha": 16, "target_modules": ["to_q", "to_k", "to_v", "to_out.0"]}
"""What `recommend` writes (aipc_env.train.recommend)."""
TARGET = (384, 672)
"""The recommended default target size, pixels (runbook §5)."""
CONTROL_FULL = (1024, 1024)
"""About 1 MP: the pipelines' own control area (1024 x 1024 -> 64 x 64 = 4096 tokens)."""
CONTROL_REDUCED = (512, 512)
"""The reduced option measured (1024 tokens)."""
TEXT_TOKENS = 452
"""Prompt embedding length assumed for one control: the Plus pipeline's 384 x 384 VL image (inferred: 14 x 14 = 196
tokens after Qwen2.5-VL's 28-pixel patch merge) + 256 for the prompt (the runbook accepts up to 200 words)."""
POINTS = [
    # (name, blocks, control pixels (h, w)) at the default target; both block counts at both lengths
    ("reduced-1", 1, CONTROL_REDUCED),
    ("reduced-2", 2, CONTROL_REDUCED),
    ("full-1", 1, CONTROL_FULL),
    ("full-2", 2, CONTROL_FULL),
]


def tokens(h: int, w: int) -> tuple[int, int]:
    """The patch grid of an (h, w) image: VAE /8, then 2 x 2 patches."""
    return h // 16, w // 16


CHILD = r"""
import ctypes, gc, json, sys, time
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(key)
def trim():
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass
import torch, bitsandbytes, peft, diffusers
from diffusers import QwenImageTransformer2DModel
from peft import LoraConfig
from bitsandbytes.optim.adam import Adam8bit
from aipc_env.workers.train.tiny import quantize_linear_layers_nf4
from aipc_env.workers.train.objective import flow_matching_loss
cfg = json.loads(sys.argv[1])
torch.set_num_threads(cfg["threads"])
trim()
base_rss = status("VmRSS")
torch.manual_seed(0)
dtype = torch.bfloat16
torch.set_default_dtype(dtype)  # built in bf16 (as from_pretrained(torch_dtype=bf16) loads it), then NF4
model = QwenImageTransformer2DModel(num_layers=cfg["blocks"])
torch.set_default_dtype(torch.float32)
quantize_linear_layers_nf4(model, "cpu", dtype)
model.requires_grad_(False)
model.add_adapter(LoraConfig(r=cfg["rank"], lora_alpha=cfg["alpha"], target_modules=cfg["targets"], init_lora_weights="gaussian"))
if cfg["checkpointing"]:
    model.enable_gradient_checkpointing()
model.train()
params = [p for p in model.parameters() if p.requires_grad]
for p in params:
    p.data = p.data.float()
opt = Adam8bit(params, lr=1e-4)
def storage(t):
    return t.untyped_storage().nbytes()
weights = 0
absmax = 0
seen = set()
for name, p in list(model.named_parameters()) + list(model.named_buffers()):
    if p.requires_grad or id(p) in seen:
        continue
    seen.add(id(p))
    weights += storage(p)
    qs = getattr(p, "quant_state", None)
    if qs is not None:
        absmax += storage(qs.absmax) + storage(qs.code)
lora = sum(storage(p) for p in params)
th, tw = cfg["target_grid"]
grids = [(1, th, tw)] + [(1, h, w) for h, w in cfg["control_grids"]]
n_t = th * tw
n_c = sum(h * w for h, w in cfg["control_grids"])
inputs = {
    "target": torch.randn(1, n_t, 64, dtype=dtype),
    "controls": torch.randn(1, n_c, 64, dtype=dtype),
    "prompt_embeds": torch.randn(1, cfg["text_tokens"], 3584, dtype=dtype),
    "prompt_mask": None,
    "img_shapes": [grids],
    "token_mask": None,
}
gen = torch.Generator().manual_seed(0)
trim()
setup_rss = status("VmRSS")
with open("/proc/self/clear_refs", "w") as fh:
    fh.write("5")
t0 = time.perf_counter()
loss = flow_matching_loss(model, inputs, gen)
loss.backward()
opt.step()
opt.zero_grad(set_to_none=True)
seconds = time.perf_counter() - t0
peak = status("VmHWM")
state = 0
for st in opt.state.values():
    for v in st.values():
        if torch.is_tensor(v):
            state += storage(v)
print(json.dumps({
    "base_rss": base_rss, "setup_rss": setup_rss, "peak_hwm": peak, "step_seconds": seconds,
    "frozen_weight_bytes": weights, "quant_state_bytes": absmax, "lora_bytes": lora, "optimizer_state_bytes": state,
    "lora_params": sum(p.numel() for p in params), "loss_finite": bool(torch.isfinite(loss).item()),
}))
"""


def measure(blocks: int, control: tuple[int, int], controls: int, text: int, checkpointing: bool) -> dict[str, object]:
    target_grid = tokens(*TARGET)
    control_grid = tokens(*control)
    cfg = {
        "blocks": blocks,
        "threads": THREADS,
        "rank": LORA["rank"],
        "alpha": LORA["alpha"],
        "targets": LORA["target_modules"],
        "checkpointing": checkpointing,
        "target_grid": target_grid,
        "control_grids": [control_grid] * controls,
        "text_tokens": text,
    }
    env = pinned(THREADS)
    env["PYTHONPATH"] = str(ROOT / "src")
    # glibc hands every allocation of 128 KiB or more back to the kernel when it is freed (no dynamic threshold, no
    # trimming delay), so the resident set follows the live tensors, as an accelerator's allocator does; with the
    # default threshold, freed activations stay in the heap and the high-water mark grows with fragmentation
    env["MALLOC_MMAP_THRESHOLD_"] = str(128 * 1024)
    env["MALLOC_TRIM_THRESHOLD_"] = str(128 * 1024)
    child = run_child(["nice", "-n", "10", sys.executable, "-c", CHILD, json.dumps(cfg)], env=env, pin=False)
    row: dict[str, object] = json.loads(child.stdout.strip().splitlines()[-1])
    row["process_peak_rss"] = int(child.peak_rss_mb * 1024 * 1024)
    row["target_tokens"] = target_grid[0] * target_grid[1]
    row["control_tokens"] = controls * control_grid[0] * control_grid[1]
    row["text_tokens"] = text
    row["tokens"] = int(row["target_tokens"]) + int(row["control_tokens"]) + text  # type: ignore[call-overload]
    row["transient_bytes"] = int(row["peak_hwm"]) - int(row["setup_rss"])  # type: ignore[call-overload]
    row["wall_seconds"] = round(child.seconds, 1)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=1, help="children per point (median taken)")
    ap.add_argument("--refit", action="store_true", help="only rewrite the coefficients from the committed JSON")
    args = ap.parse_args()
    if args.refit:
        refit()
        return
    if not Path("/proc/self/clear_refs").exists():
        raise SystemExit("needs Linux (/proc/self/clear_refs resets the high-water mark)")
    t_all = time.perf_counter()
    points: dict[str, dict[str, object]] = {}
    for name, blocks, control in POINTS:
        rows = []
        for _ in range(args.repeats):
            row = measure(blocks, control, 1, TEXT_TOKENS, True)
            print(f"{name}: {json.dumps(row)}", file=sys.stderr, flush=True)
            rows.append(row)
        med = dict(rows[len(rows) // 2])
        med["transient_bytes"] = int(statistics.median(int(r["transient_bytes"]) for r in rows))  # type: ignore[call-overload]
        med["step_seconds"] = round(statistics.median(float(r["step_seconds"]) for r in rows), 2)  # type: ignore[arg-type]
        med["repeats"] = len(rows)
        med["blocks"] = blocks
        med["control_pixels"] = control[0] * control[1]
        points[name] = med
    result = {
        "benchmark": "memory-model",
        "what": (
            "one optimizer step of diffusers' QwenImageTransformer2DModel at full width (num_layers 1 and 2, random "
            "weights), NF4 Linear layers (bitsandbytes Linear4bit via the project's quantizer), LoRA r16 on "
            "to_q/to_k/to_v/to_out.0 (peft), gradient checkpointing, Adam8bit, bf16 compute, the project's "
            "flow-matching loss; CPU, 2 threads, one child per point"
        ),
        "assumptions": {
            "target_size": list(TARGET),
            "text_tokens_per_control": TEXT_TOKENS,
            "attention": "torch's CPU scaled_dot_product_attention (a fused kernel: memory linear in tokens)",
        },
        "lora_rank": LORA["rank"],
        "points": points,
        "machine": machine(pinned(THREADS), pinned=False),
        "total_seconds": round(time.perf_counter() - t_all, 1),
    }
    write_result("memory-model", result)
    refit()


def refit() -> None:
    """The package's coefficients from the committed benchmark JSON (a test keeps them equal)."""
    from aipc_env.core.fileio import read_json
    from aipc_env.core.formats import write_model
    from aipc_env.train.memory_model import BENCHMARK_FILE, COEFFICIENTS, fit_coefficients

    write_model(COEFFICIENTS, fit_coefficients(read_json(ROOT / BENCHMARK_FILE, "memory benchmark"), BENCHMARK_FILE))
    print(f"wrote {COEFFICIENTS}")


if __name__ == "__main__":
    main()
