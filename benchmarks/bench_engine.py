"""Built-in engine speed (issue 6), one run on a tiny random pipeline built offline:
- fit-phase seconds per optimizer step of the engine vs a minimal hand-written NF4+LoRA loop on the same model
  and the same cached batches (target ratio <= 1.2);
- cache-phase throughput (samples/s) and peak RSS of each phase (each phase in its own process).
Run: python benchmarks/bench_engine.py
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
STEPS = 40


def _run(argv: list[str]) -> tuple[float, float, str]:
    """(wall seconds, peak RSS MiB, stdout) of a child process."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    out = proc.stdout.read()  # type: ignore[union-attr]
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"{argv} failed")
    return time.perf_counter() - start, usage.ru_maxrss / 1024, out


HAND_LOOP = r"""
import json, sys, time, torch, bitsandbytes as bnb
from peft import LoraConfig
from diffusers import QwenImageTransformer2DModel
from aipc_env.train.tiny import quantize_linear_layers_nf4
cfg = json.loads(sys.argv[1])
torch.manual_seed(0)
model = QwenImageTransformer2DModel.from_pretrained(cfg["model"], subfolder="transformer")
quantize_linear_layers_nf4(model, "cpu", torch.float32)
model.requires_grad_(False)
model.add_adapter(LoraConfig(r=4, lora_alpha=8, target_modules=["to_q", "to_k", "to_v", "to_out.0"], init_lora_weights="gaussian"))
model.enable_gradient_checkpointing()
params = [p for p in model.parameters() if p.requires_grad]
opt = bnb.optim.Adam8bit(params, lr=1e-2)
entries = [torch.load(p, weights_only=True) for p in cfg["entries"]]
times = []
g = torch.Generator().manual_seed(0)
for step in range(cfg["steps"]):
    t = time.perf_counter()
    e = [entries[(2 * step + i) % len(entries)] for i in range(2)]
    x0 = torch.stack([x["target"].float() for x in e]); ctl = torch.stack([x["controls"][0].float() for x in e])
    L = max(x["prompt_embeds"].shape[0] for x in e)
    pe = torch.zeros(2, L, e[0]["prompt_embeds"].shape[-1]); m = torch.zeros(2, L, dtype=torch.bool)
    for i, x in enumerate(e):
        pe[i, :x["prompt_embeds"].shape[0]] = x["prompt_embeds"].float(); m[i, :x["prompt_embeds"].shape[0]] = True
    noise = torch.randn(x0.shape, generator=g); s = torch.rand(2, generator=g)
    noisy = (1 - s.view(-1, 1, 1)) * x0 + s.view(-1, 1, 1) * noise
    pred = model(hidden_states=torch.cat([noisy, ctl], 1), encoder_hidden_states=pe, encoder_hidden_states_mask=m,
                 timestep=s, img_shapes=[list(map(tuple, x["shapes"])) for x in e], return_dict=False)[0][:, :x0.shape[1]]
    loss = ((pred - (noise - x0)) ** 2).mean()
    loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
    times.append(time.perf_counter() - t)
print(json.dumps({"seconds_per_step": sorted(times[2:])[len(times[2:]) // 2]}))
"""


def main() -> int:
    from aipc_env.train.tinypipe import build_tiny_pipeline

    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        model = build_tiny_pipeline(base / "model")
        data = base / "data"
        for i in range(24):
            rng = np.random.default_rng(i)
            for folder, name in (("training_images", f"s{i}.png"), ("control_images", f"s{i}.png")):
                (data / folder).mkdir(parents=True, exist_ok=True)
                Image.fromarray(rng.integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(data / folder / name)
            (data / "training_images" / f"s{i}.txt").write_text("Add the small red character to the left side")
        cfg = {"model": {"path": str(model)}, "lora": {"rank": 4, "alpha": 8},
               "data": {"datasets": [str(data)], "target_size": [64, 64], "batch_size": 2, "num_workers": 0},
               "train": {"max_train_steps": STEPS, "gradient_accumulation_steps": 1, "learning_rate": 1e-2,
                         "checkpointing_steps": 1000, "max_grad_norm": None},
               "output_dir": str(base / "out"), "device": "cpu"}
        config = base / "config.yaml"
        config.write_text(yaml.safe_dump(cfg))
        engine = [sys.executable, "-m", "aipc_env.train.engine", "--config", str(config), "--phase"]
        cache_s, cache_rss, out = _run(engine + ["cache"])
        line = next(x for x in out.splitlines() if "samples/s" in x)
        throughput = float(line.rsplit(", ", 1)[1].split(" ")[0])
        fit_s, fit_rss, _ = _run(engine + ["fit"])
        rows = [json.loads(x) for x in (base / "out" / "train_log.jsonl").read_text().splitlines()]
        engine_step = statistics.median(r["step_seconds"] for r in rows[2:])
        entries = [str(p) for p in sorted((base / "out" / "cache").glob("*.pt"))]
        _, hand_rss, hand_out = _run([sys.executable, "-c", HAND_LOOP, json.dumps(
            {"model": str(model), "entries": entries, "steps": STEPS})])
        hand_step = json.loads(hand_out.strip().splitlines()[-1])["seconds_per_step"]
    result = {"fit_engine_seconds_per_step": round(engine_step, 4), "fit_hand_loop_seconds_per_step": round(hand_step, 4),
              "ratio_engine_vs_hand": round(engine_step / hand_step, 3), "target_ratio": 1.2,
              "cache_samples_per_second": throughput, "cache_phase_wall_s": round(cache_s, 2),
              "peak_rss_mb": {"cache_phase": round(cache_rss), "fit_phase": round(fit_rss), "hand_loop": round(hand_rss)},
              "fit_phase_wall_s": round(fit_s, 2), "steps": STEPS}
    print(json.dumps(result, indent=2))
    return 0 if result["ratio_engine_vs_hand"] <= 1.2 else 1


if __name__ == "__main__":
    raise SystemExit(main())
