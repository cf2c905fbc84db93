"""Runs inside the training env: every verification step, each timed, each isolated.

Usage: python -m aipc_env.workers.verify [--device DEV] [--bnb-min V] [--steps N] [--out FILE]
Prints one line per step as it finishes and writes the whole result (JSON) to --out.
Uses only the standard library and the training stack (no pydantic), so any training env can run it.
Test hooks: AIPC_VERIFY_INJECT=drop-lora-metadata,frozen-optimizer,nf4-noise,linear4bit-skew,adam8bit-drift
injects those faults; the result lists them (`inject`), the saved record keeps them and the doctor shows such a
record as injected, never as a real verdict.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import traceback
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

T_START = time.perf_counter()
print("[....] importing torch and bitsandbytes", flush=True)
from aipc_env.core.heartbeat import HEARTBEAT_SECONDS, Heartbeat  # noqa: E402
from aipc_env.workers.train.compat import quiet_bitsandbytes_notices  # noqa: E402

IMPORTING = Heartbeat(lambda line: print(line, flush=True), "[....] still importing the training stack")
"""A line every 5 s while torch, bitsandbytes, diffusers and peft import (seconds on a busy machine); started only
where this module runs as the worker (`python -m`): a process that imports it (a test) gets no thread printing into
its output for ever."""
if __name__ == "__main__":
    IMPORTING.start()

quiet_bitsandbytes_notices()
import torch  # noqa: E402

from aipc_env.errors import ExitCode  # noqa: E402
from aipc_env.launch.hops import VerifySteps, run_worker  # noqa: E402
from aipc_env.verify import tolerances as tol  # noqa: E402
from aipc_env.workers.train.devices import device_memory_mb, peak_rss_mb, pick_device  # noqa: E402

if TYPE_CHECKING:
    from aipc_env.workers.train.tiny import TinyBatch

INJECT = set(filter(None, os.environ.get("AIPC_VERIFY_INJECT", "").split(",")))
PROGRESS_SECONDS = HEARTBEAT_SECONDS
"""A long step says where it is at least this often."""
TINY_RUN_SAMPLES = 16
"""Training samples of the tiny run's edit (the built-in default's 16)."""


def say(line: str) -> None:
    print(line, flush=True)


DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


class StepContext(TypedDict):
    """What every step reads: the device, the run's arguments, the dtypes to test, when progress was last said."""

    device: torch.device
    requested: str | None
    bnb_min: str | None
    steps: int
    dtypes: NotRequired[list[str]]
    said: NotRequired[float]


class StepResult(TypedDict):
    summary: str
    metrics: dict[str, Any]


class StepFailed(Exception):
    def __init__(self, message: str, metrics: dict[str, Any] | None = None, hint: str | None = None):
        super().__init__(message)
        self.metrics = metrics or {}
        self.hint = hint


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().float().cpu(), b.detach().float().cpu()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def sync(device: torch.device) -> None:
    if device.type == "xpu":
        torch.xpu.synchronize()
    elif device.type == "cuda":
        torch.cuda.synchronize()


# --------------------------------------------------------------------------- steps


def step_device(ctx: StepContext) -> StepResult:
    device: torch.device = ctx["device"]
    metrics = {"torch": torch.__version__, "torch_version_xpu": getattr(torch.version, "xpu", None), "device": str(device)}
    is_xpu_build = "+xpu" in torch.__version__
    if device.type == "xpu":
        if not torch.xpu.is_available():
            raise StepFailed(
                "torch.xpu.is_available() is False",
                metrics,
                "update the GPU driver, check ONEAPI_DEVICE_SELECTOR, enable the iGPU in the BIOS",
            )
        props = torch.xpu.get_device_properties(device)
        metrics.update(name=props.name, total_memory_gb=round(props.total_memory / 1e9, 2))
    elif device.type == "cuda":
        if not torch.cuda.is_available():
            raise StepFailed("CUDA requested but torch.cuda.is_available() is False", metrics)
        cuda_props = torch.cuda.get_device_properties(device)
        metrics.update(name=cuda_props.name, total_memory_gb=round(cuda_props.total_memory / 1e9, 2))
    else:
        import platform

        metrics.update(name=platform.processor() or platform.machine(), threads=torch.get_num_threads())
        if is_xpu_build and not ctx["requested"]:
            raise StepFailed(
                "an +xpu build of torch sees no XPU device; everything would run on the CPU",
                metrics,
                "likely causes: GPU driver missing or too old; ONEAPI_DEVICE_SELECTOR hides "
                "the device; iGPU disabled in the BIOS; on Linux, user not in the 'render' group",
            )
    torch.zeros(4, device=device).add_(1)
    sync(device)
    return {"summary": f"{metrics.get('name')} ({device}), torch {torch.__version__}", "metrics": metrics}


def step_bitsandbytes(ctx: StepContext) -> StepResult:
    import bitsandbytes as bnb
    import bitsandbytes.cextension as cext
    from packaging.version import Version

    from aipc_env.matrix.bnb import TRITON_NEEDS, bnb_backends

    lib = type(getattr(cext, "lib", None)).__name__
    backend = getattr(cext, "BNB_BACKEND", None)
    native = lib != "ErrorHandlerMockBNBNativeLibrary"
    try:
        from bitsandbytes.backends.utils import triton_available as triton
    except ImportError:  # older releases: no Triton kernels at all
        triton = False
    plan = bnb_backends(ctx["device"].type, native=native, triton=bool(triton))
    impl = f"native library ({backend or lib})" if native else "no native library"
    metrics = {
        "version": bnb.__version__,
        "backend": backend,
        "library": lib,
        "implementation": impl,
        "minimum": ctx["bnb_min"],
        "triton": bool(triton),
        "nf4_matmul": plan.nf4_matmul,
        "nf4_quantize": plan.nf4_quantize,
        "adam8bit": plan.adam8bit,
    }
    if ctx["bnb_min"] and Version(bnb.__version__) < Version(ctx["bnb_min"]):
        raise StepFailed(
            f"bitsandbytes {bnb.__version__} is older than {ctx['bnb_min']}, the minimum for this pair",
            metrics,
            f'pip install "bitsandbytes>={ctx["bnb_min"]}" or rebuild: nox -s env',
        )
    platform = "win-64" if sys.platform == "win32" else "linux-64"
    if not plan.complete:
        raise StepFailed(
            f"bitsandbytes {bnb.__version__}: {plan.describe()}",
            metrics,
            f"the Triton path needs {TRITON_NEEDS[platform]}; `aipc-env doctor` names what is missing",
        )
    note = f"; the fallback needs {TRITON_NEEDS[platform]}" if plan.fallback else ""
    return {"summary": f"bitsandbytes {bnb.__version__}: {plan.describe()}{note}", "metrics": metrics}


def _dtypes(ctx: StepContext) -> list[str]:
    return ctx["dtypes"]


def step_nf4_roundtrip(ctx: StepContext) -> StepResult:
    import bitsandbytes.functional as F

    device = ctx["device"]
    g = torch.Generator().manual_seed(0)
    w32 = (torch.randn(1024, 512, generator=g) * 0.02).to(device)
    metrics, worst = {}, 0.0
    for name in _dtypes(ctx):
        w = w32.to(DTYPES[name])
        q, state = F.quantize_4bit(w, quant_type="nf4", blocksize=64)
        d = F.dequantize_4bit(q, state)
        if "nf4-noise" in INJECT:  # test hook: a quantizer 30% worse than NF4 must fail the bound
            d = d + 0.3 * (d.float() - w32).to(d.dtype)
        if d.dtype != w.dtype:
            raise StepFailed(f"dequantize returned {d.dtype} for {name} input")
        err = rel(d, w32)
        metrics[f"{name}_rel_err"] = round(err, 5)
        worst = max(worst, err)
    metrics["bound"] = tol.NF4_ROUNDTRIP_MAX_REL_ERR
    if worst > tol.NF4_ROUNDTRIP_MAX_REL_ERR:
        raise StepFailed(f"NF4 round-trip error {worst:.4f} > {tol.NF4_ROUNDTRIP_MAX_REL_ERR}", metrics)
    return {
        "summary": f"max rel. error {worst:.4f} ≤ {tol.NF4_ROUNDTRIP_MAX_REL_ERR} ({', '.join(_dtypes(ctx))})",
        "metrics": metrics,
    }


def step_linear4bit(ctx: StepContext) -> StepResult:
    import bitsandbytes.functional as F
    from bitsandbytes.nn.modules import Linear4bit, Params4bit

    device = ctx["device"]
    g = torch.Generator().manual_seed(1)
    weight = torch.randn(256, 512, generator=g) * 0.02
    bias = torch.randn(256, generator=g) * 0.01
    metrics: dict[str, float] = {}
    failures: list[str] = []
    for name in _dtypes(ctx):
        dt = DTYPES[name]
        layer = Linear4bit(512, 256, bias=True, compute_dtype=dt, quant_type="nf4", device="meta")
        layer.weight = Params4bit(weight.clone(), requires_grad=False, quant_type="nf4")
        layer.bias = torch.nn.Parameter(bias.to(dt), requires_grad=False)
        layer = layer.to(device)
        if not isinstance(layer.weight, Params4bit):
            raise StepFailed(f"{name}: Linear4bit.to({device}) lost its Params4bit weight", metrics)
        deq = F.dequantize_4bit(layer.weight.data, layer.weight.quant_state).float()
        x = (torch.randn(8, 512, generator=g)).to(device, dt).requires_grad_(True)
        xr = x.detach().float().requires_grad_(True)
        y = layer(x)
        if "linear4bit-skew" in INJECT:  # test hook: a kernel off by 1% must fail the bound
            y = y * 1.01
        yr = xr @ deq.T + layer.bias.float()
        grad = torch.randn(yr.shape, generator=g).to(device)
        y.backward(grad.to(dt))
        yr.backward(grad)
        with torch.no_grad():  # batch 1 inference takes the gemv_4bit kernel (bf16 bug on Arc A770)
            x1 = torch.randn(1, 512, generator=g).to(device, dt)
            y1 = layer(x1)
            yr1 = x1.float() @ deq.T + layer.bias.float()
        bound = tol.matmul_max_rel_err(name)
        if x.grad is None or xr.grad is None:
            raise StepFailed(f"{name}: backward left no gradient on the input", metrics)
        errs = {"forward": rel(y, yr), "backward": rel(x.grad, xr.grad), "gemv": rel(y1, yr1)}
        for kind, err in errs.items():
            metrics[f"{name}_{kind}_rel_err"] = float(f"{err:.3g}")
            if not err <= bound:
                failures.append(f"{name} {kind} rel. error {err:.3g} > {bound:.3g}")
        metrics[f"{name}_bound"] = float(f"{bound:.3g}")
    if failures:
        raise StepFailed(
            "; ".join(failures), metrics, "a known bf16 gemv_4bit bug on Arc A-series: train in fp16, or update bitsandbytes"
        )
    return {
        "summary": f"forward, backward and gemv match the dequantized reference ({', '.join(_dtypes(ctx))})",
        "metrics": metrics,
    }


def step_adam8bit(ctx: StepContext) -> StepResult:
    from bitsandbytes.optim.adam import Adam8bit

    device = ctx["device"]
    g = torch.Generator().manual_seed(2)
    shapes = [(16, 3072), (3072, 16)]  # rank-16 LoRA A and B of a 3072-wide layer: 8-bit state is used
    p0 = [torch.randn(s, generator=g).mul_(0.02).to(device) for s in shapes]
    p8 = [torch.nn.Parameter(p.clone()) for p in p0]
    p32 = [torch.nn.Parameter(p.clone()) for p in p0]
    lr = 0.0 if "frozen-optimizer" in INJECT else 1e-3
    opt8: torch.optim.Optimizer = Adam8bit(p8, lr=lr)  # torch's type: bitsandbytes leaves its step unannotated
    opt32 = torch.optim.Adam(p32, lr=1e-3)
    first = None
    t0 = time.perf_counter()
    try:
        for _ in range(20):
            for a, b in zip(p8, p32):
                grad = (torch.randn(a.shape, generator=g) * 0.01 + 0.002).to(device)
                a.grad, b.grad = grad.clone(), grad.clone()
            if "adam8bit-drift" in INJECT:  # test hook: an 8-bit optimizer that follows other gradients
                for a in p8:
                    assert a.grad is not None  # set just above
                    a.grad = a.grad + torch.randn(a.shape, generator=g).to(device) * 0.02
            s = time.perf_counter()
            opt8.step()
            sync(device)
            if first is None:
                first = time.perf_counter() - s
            opt32.step()
    except Exception as exc:
        hint = (
            "the 8-bit optimizer runs as a Triton kernel on XPU: check MSVC (cl.exe, vcvars64), the oneAPI "
            "toolkit matching the pair, and the Level Zero headers (LEVEL_ZERO_V1_SDK_PATH)"
            if device.type == "xpu"
            else None
        )
        raise StepFailed(f"Adam8bit.step() raised {type(exc).__name__}: {exc}", {}, hint) from exc
    assert first is not None  # the loop ran 20 steps
    rest = (time.perf_counter() - t0 - first) / 19
    state_dtypes = {k: str(v.dtype).replace("torch.", "") for k, v in opt8.state[p8[0]].items() if torch.is_tensor(v)}
    d8 = torch.cat([(a.detach() - p).flatten() for a, p in zip(p8, p0)])
    d32 = torch.cat([(b.detach() - p).flatten() for b, p in zip(p32, p0)])
    moved = float(d8.norm())
    diff = rel(d8, d32)
    cos = float(torch.nn.functional.cosine_similarity(d8.float(), d32.float(), dim=0)) if moved else 0.0
    metrics = {
        "first_step_s": round(first, 4),
        "later_step_s": round(rest, 5),
        "state_dtypes": state_dtypes,
        "rel_diff_vs_adam32": round(diff, 5),
        "cosine": round(cos, 6),
        "update_norm": moved,
        "bound_rel_diff": tol.ADAM8BIT_MAX_REL_DIFF,
    }
    if state_dtypes.get("state1") != "uint8":
        raise StepFailed(f"8-bit state not used (state1 is {state_dtypes.get('state1')})", metrics)
    if moved == 0.0:
        raise StepFailed(
            "Adam8bit left the parameters unchanged",
            metrics,
            "the optimizer step is a no-op: check the learning rate and the bitsandbytes install",
        )
    if diff > tol.ADAM8BIT_MAX_REL_DIFF or cos < tol.ADAM8BIT_MIN_COSINE:
        raise StepFailed(f"Adam8bit diverges from 32-bit Adam: rel. diff {diff:.4f}, cosine {cos:.4f}", metrics)
    return {
        "summary": f"20 steps within {diff:.3f} of 32-bit Adam (≤ {tol.ADAM8BIT_MAX_REL_DIFF}); "
        f"first step {first * 1000:.0f} ms, then {rest * 1000:.1f} ms",
        "metrics": metrics,
    }


def _lora_output(transformer: torch.nn.Module, batch: TinyBatch) -> torch.Tensor:
    with torch.no_grad():
        out: torch.Tensor = transformer(
            hidden_states=torch.cat([batch.target, batch.control], dim=1),
            encoder_hidden_states=batch.prompt_embeds,
            encoder_hidden_states_mask=None,
            timestep=torch.full((batch.target.shape[0],), 0.5, device=batch.target.device),
            img_shapes=batch.img_shapes,
            return_dict=False,
        )[0]
    return out


def step_lora_roundtrip(ctx: StepContext) -> StepResult:
    from diffusers import QwenImageEditPipeline
    from peft import LoraConfig
    from peft.utils import get_peft_model_state_dict

    from aipc_env.workers.train.tiny import LORA_TARGETS, build_tiny_transformer, make_batch

    device = ctx["device"]
    batch = make_batch(batch_size=1).to(device, torch.float32)
    rank, alpha = 4, 8  # alpha != rank: a loader that drops the metadata rebuilds alpha = rank (half strength)
    model = build_tiny_transformer(seed=3).to(device)
    model.add_adapter(LoraConfig(r=rank, lora_alpha=alpha, target_modules=LORA_TARGETS, init_lora_weights="gaussian"))
    g = torch.Generator().manual_seed(4)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g).mul_(0.05))
    expected = _lora_output(model, batch)
    metadata = {"transformer_lora_adapter_metadata": model.peft_config["default"].to_dict()}
    if "drop-lora-metadata" in INJECT:
        metadata = {}
    with tempfile.TemporaryDirectory(prefix="aipc-verify-lora-") as tmp:
        QwenImageEditPipeline.save_lora_weights(tmp, transformer_lora_layers=get_peft_model_state_dict(model), **metadata)
        results = {}
        for label, use_meta in (("with_metadata", True), ("without_metadata", False)):
            fresh = build_tiny_transformer(seed=3).to(device)
            state, meta = QwenImageEditPipeline.lora_state_dict(tmp, return_lora_metadata=True)
            QwenImageEditPipeline.load_lora_into_transformer(state, transformer=fresh, metadata=meta if use_meta else None)
            out = _lora_output(fresh, batch)
            (config,) = fresh.peft_config.values()
            results[label] = {
                "alpha": config.lora_alpha,
                "max_abs_diff": float((out - expected).abs().max()),
                "bit_exact": bool(torch.equal(out, expected)),
            }
    metrics = {"rank": rank, "alpha": alpha, **results}
    good = results["with_metadata"]
    if not good["bit_exact"] or good["alpha"] != alpha:
        raise StepFailed(
            f"reloaded LoRA differs: alpha {good['alpha']} (saved {alpha}), max diff "
            f"{good['max_abs_diff']:.3g}; the adapter metadata did not survive the round trip",
            metrics,
            "save with transformer_lora_adapter_metadata (diffusers' _collate_lora_metadata)",
        )
    bad = results["without_metadata"]
    if bad["bit_exact"] or bad["alpha"] == alpha:
        raise StepFailed("reloading without metadata was not detected as a wrong-strength adapter", metrics)
    return {
        "summary": f"save → reload bit-exact, alpha {alpha} kept; without metadata alpha becomes {bad['alpha']} (detected)",
        "metrics": metrics,
    }


def step_tiny_qlora(ctx: StepContext) -> StepResult:
    """The built-in edit learned on this device: the trained tiny base in NF4, a LoRA trained with Adam8bit on the
    edit's samples, then judged on held-out samples sampled as the pipeline samples (aipc_env.workers.train.heldout)."""
    from bitsandbytes.optim.adam import Adam8bit
    from peft import LoraConfig

    from aipc_env.workers.train.fit import tiny_base_cache
    from aipc_env.workers.train.heldout import measure_builtin_edit
    from aipc_env.workers.train.objective import flow_matching_loss
    from aipc_env.workers.train.tiny import LORA_TARGETS, quantize_linear_layers_nf4
    from aipc_env.workers.train.tinyedit import TRAIN_SEED, edit_inputs, edit_sample, load_tiny_base

    device = ctx["device"]
    dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
    if device.type == "xpu":
        torch.xpu.reset_peak_memory_stats(device)
    elif device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    model = load_tiny_base(tiny_base_cache(), log=say)
    n_quant = quantize_linear_layers_nf4(model, device, dtype)
    model.requires_grad_(False)
    model.add_adapter(LoraConfig(r=8, lora_alpha=8, target_modules=LORA_TARGETS, init_lora_weights="gaussian"))
    model.enable_gradient_checkpointing()
    model.train()  # stays in train mode: bitsandbytes repacks NF4 weights for its CPU inference kernel in eval mode
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        p.data = p.data.float()
    lr = 0.0 if "frozen-optimizer" in INJECT else 1e-2
    opt: torch.optim.Optimizer = Adam8bit(params, lr=lr)  # torch's type: bitsandbytes leaves its step unannotated
    samples = [edit_sample(TRAIN_SEED + i) for i in range(TINY_RUN_SAMPLES)]
    g = torch.Generator()
    losses, times = [], []
    for step in range(ctx["steps"]):
        g.manual_seed(step)
        picked = [samples[(2 * step + k) % len(samples)] for k in range(2)]
        t = time.perf_counter()
        with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
            loss = flow_matching_loss(model, edit_inputs(picked, device, dtype), g)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync(device)
        times.append(time.perf_counter() - t)
        losses.append(loss.item())
        if time.perf_counter() - ctx["said"] > PROGRESS_SECONDS:
            say(f"       tiny QLoRA step {step + 1}/{ctx['steps']}, loss {loss.item():.4f}")
            ctx["said"] = time.perf_counter()
        if not torch.isfinite(loss):
            raise StepFailed(f"loss became {loss.item()} at step {step + 1}", {"losses": losses})
    verdict = measure_builtin_edit(model, count=16, latent_hw=8, device=device, dtype=dtype)
    steady = times[1:] or times
    metrics = {
        "steps": ctx["steps"],
        "nf4_layers": n_quant,
        "lora_params": sum(p.numel() for p in params),
        "compute_dtype": str(dtype).replace("torch.", ""),
        "heldout": verdict.model_dump(mode="json"),
        "first_step_s": round(times[0], 4),
        "seconds_per_step": round(sum(steady) / len(steady), 5),
        "peak_device_mb": device_memory_mb(device, peak=True),
        "peak_rss_mb": peak_rss_mb(),
        "first_losses": [round(x, 4) for x in losses[:3]],
        "last_losses": [round(x, 4) for x in losses[-3:]],
    }
    held = (
        f"held-out distance to the targets: LoRA {verdict.lora_mean:.3f}, base {verdict.base_mean:.3f}, control "
        f"copied {verdict.copy_mean:.3f}, mean target {verdict.mean_target_mean}"
    )
    if not verdict.learned:
        raise StepFailed(f"the tiny LoRA did not learn the edit: {held}: {verdict.reason}", metrics)
    return {
        "summary": f"{ctx['steps']} NF4+LoRA steps, {held}: learned the edit, {metrics['seconds_per_step'] * 1000:.1f} ms/step",
        "metrics": metrics,
    }


STEPS = [
    ("device", "torch build and device", step_device),
    ("bitsandbytes", "bitsandbytes implementation", step_bitsandbytes),
    ("nf4-roundtrip", "NF4 quantize → dequantize", step_nf4_roundtrip),
    ("linear4bit", "Linear4bit forward/backward", step_linear4bit),
    ("adam8bit", "Adam8bit vs 32-bit Adam", step_adam8bit),
    ("lora-roundtrip", "LoRA save → reload (diffusers)", step_lora_roundtrip),
    ("tiny-qlora", "Tiny NF4 QLoRA run", step_tiny_qlora),
]


def bf16_is_sane(device: torch.device) -> tuple[bool, float]:
    """Whether bf16 matmuls run at a sane speed here (CPUs without AVX512-BF16/AMX are ~100x slower)."""
    if device.type != "cpu":
        return True, 1.0
    a32 = torch.randn(256, 256)
    a16 = a32.bfloat16()
    timings = []
    for a in (a32, a16):
        a @ a
        t = time.perf_counter()
        for _ in range(5):
            a @ a
        timings.append(time.perf_counter() - t)
    slowdown = timings[1] / max(timings[0], 1e-9)
    return slowdown <= tol.BF16_MAX_SLOWDOWN, round(slowdown, 1)


def main(argv: list[str] | None = None) -> int:
    args = VerifySteps.parse(argv)
    return run_worker("verify", lambda: _run_steps(args))


def _run_steps(args: VerifySteps) -> int:
    import bitsandbytes  # noqa: F401 - counted as import time, like torch
    import diffusers  # noqa: F401
    import peft  # noqa: F401

    IMPORTING.stop()
    import_s = time.perf_counter() - T_START
    ctx: StepContext = {
        "device": pick_device(args.device),
        "requested": args.device,
        "bnb_min": args.bnb_min,
        "steps": args.steps,
    }
    sane, slowdown = bf16_is_sane(ctx["device"])
    ctx["dtypes"] = ["float32", "float16"] + (["bfloat16"] if sane else [])
    result: dict[str, Any] = {
        "device": str(ctx["device"]),
        "import_seconds": round(import_s, 2),
        "dtypes": ctx["dtypes"],
        "bf16_slowdown": slowdown,
        "inject": sorted(INJECT),
        "steps": [],
    }
    work_start = time.perf_counter()
    for key, title, fn in STEPS:
        if args.only and key not in args.only:
            continue
        say(f"[....] {title} ...")
        t = ctx["said"] = time.perf_counter()
        entry: dict[str, Any] = {"id": key, "title": title}
        try:
            out = fn(ctx)
            entry.update(passed=True, **out)
        except StepFailed as exc:
            entry.update(passed=False, summary=str(exc), metrics=exc.metrics, hint=exc.hint)
        except Exception as exc:  # noqa: BLE001 - a step that raises is a failed step, the others still run
            entry.update(passed=False, summary=f"{type(exc).__name__}: {exc}", metrics={}, traceback=traceback.format_exc())
        entry["seconds"] = round(time.perf_counter() - t, 3)
        result["steps"].append(entry)
        mark = "PASS" if entry["passed"] else "FAIL"
        print(f"[{mark}] {title}: {entry['summary']} ({entry['seconds']:.2f} s)", flush=True)
    result["work_seconds"] = round(time.perf_counter() - work_start, 2)
    result["passed"] = all(s["passed"] for s in result["steps"])
    if args.out:
        from aipc_env.core.fileio import atomic_write_text

        atomic_write_text(args.out, json.dumps(result, indent=2))
    else:
        print(json.dumps(result, indent=2))
    return ExitCode.OK if result["passed"] else ExitCode.PROBLEMS


if __name__ == "__main__":
    sys.exit(main())
