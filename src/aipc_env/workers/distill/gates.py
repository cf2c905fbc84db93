"""Gates G0 (plumbing), G2 (sampler parity) and G3 (quality), each a list of named checks. A violated distillation
lesson fails its check with the lesson's error name; a failed check stops the checks that depend on it.
`inject` names faults to plant (tests prove each gate catches its fault):
grad-embeddings, rgba, no-lora-metadata (G0); wrong-sigmas, parity-ulp (G2: the own loop's first value moved
by one float step, the smallest difference parity must refuse)."""

from __future__ import annotations

import math
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch

from aipc_env.core.formats import write_model
from aipc_env.core.runfolder import LORA_WEIGHTS, RunFolder
from aipc_env.distill.config import DistillConfig
from aipc_env.distill.lesson_errors import LessonError, ParityBroken
from aipc_env.distill.prompts import load_prompts
from aipc_env.distill.verdict import Check, G3Entry, G3Manifest
from aipc_env.errors import AipcError, InputError
from aipc_env.workers.distill import sampler
from aipc_env.workers.distill.lessons import (
    check_deterministic_sampler,
    check_lora_metadata,
    check_parity,
    check_sigmas_verbatim,
    check_step_count,
)

if TYPE_CHECKING:
    import PIL.Image

__all__ = ["CheckList", "gate_g0", "gate_g2", "gate_g3"]


class CheckList:
    """Runs named checks in order; a failing one is recorded with its error name (no traceback)."""

    def __init__(self) -> None:
        self.items: list[Check] = []

    def run(self, name: str, fn: Callable[[], tuple[Any, str]]) -> Any:
        """fn returns (value, detail); run returns the value, or None when the check failed."""
        try:
            value, detail = fn()
        except LessonError as exc:
            self.items.append(Check(name=name, ok=False, detail=exc.message, error=exc.name, fix=exc.fix))
            return None
        except AipcError as exc:
            self.items.append(Check(name=name, ok=False, detail=exc.message, error="input", fix=exc.fix))
            return None
        self.items.append(Check(name=name, ok=True, detail=detail))
        return value

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.items)


def _finite_rgb(images: torch.Tensor) -> str:
    if not bool(torch.isfinite(images).all()):
        raise AipcError("the decoded images hold NaN or Inf values")
    return f"RGB {tuple(images.shape)}, range [{float(images.min()):.3f}, {float(images.max()):.3f}]"


def _decode(pipe: Any, latents: torch.Tensor, cfg: DistillConfig, inject: frozenset[str]) -> torch.Tensor:
    if "rgba" in inject:  # the recorded bug: taking the VAE's 4 channels as the image
        from aipc_env.workers.distill.lessons import check_rgb

        z = pipe._unpack_latents(latents, cfg.height // 32 * 32, cfg.width // 32 * 32, pipe.vae_scale_factor)
        raw = pipe.vae.decode(z.to(pipe.vae.dtype), return_dict=False)[0][:, :, 0]
        check_rgb(raw)
    return sampler.decode_rgb(pipe, latents, cfg.height, cfg.width, cfg.eval.decode_device)


def _pipe_latents(
    pipe: Any, cfg: DistillConfig, prompted: sampler.Prompted, noise: torch.Tensor, grid: list[float], **kw: Any
) -> torch.Tensor:
    latents: torch.Tensor = pipe(
        prompt_embeds=prompted.embeds,
        prompt_embeds_mask=prompted.mask,
        latents=noise.clone(),
        height=cfg.height,
        width=cfg.width,
        sigmas=grid,
        output_type="latent",
        use_kv_cache=cfg.use_kv_cache,
        **kw,
    ).images
    return latents


def gate_g0(
    cfg: DistillConfig, *, log: Callable[[str], object] = print, inject: frozenset[str] = frozenset()
) -> tuple[list[Check], dict[str, Any]]:
    """Plumbing: the pipeline loads; teacher@8 and naive@4 give finite RGB; the trajectory format round-trips; one
    LoRA train step runs; save then reload keeps alpha with bit-exact output."""
    from aipc_env.distill.model_paths import model_key
    from aipc_env.distill.trajectory_formats import TrajectoryMeta
    from aipc_env.workers.distill.lessons import check_lora_before_prepare
    from aipc_env.workers.distill.models import device_and_dtype, load_pipeline, load_transformer, model_dir, resolve_run
    from aipc_env.workers.distill.student import Trajectory, add_lora, make_batch, prepare_student, publish, step_loss
    from aipc_env.workers.distill.trajectories import read_trajectory, write_trajectory

    checks = CheckList()
    metrics: dict[str, Any] = {}
    cfg = resolve_run(cfg, log=log)[0]
    device, dtype = device_and_dtype(cfg)
    path = model_dir(cfg, log=log)
    t = time.perf_counter()
    pipe = checks.run(
        "pipeline-loads",
        lambda: (
            load_pipeline(path, device, dtype, cfg.teacher),
            f"QwenImage21Pipeline from {path.name} in {time.perf_counter() - t:.2f} s",
        ),
    )
    if pipe is None:
        return checks.items, metrics
    prompt = load_prompts(cfg.prompts.train, limit=1)[0].prompt
    prompted = checks.run(
        "embeddings-without-grad",
        lambda: (
            sampler.encode(pipe, [prompt], device, grad="grad-embeddings" in inject),
            "encode_prompt under no_grad: no autograd graph attached",
        ),
    )
    if prompted is None:
        return checks.items, metrics
    g = torch.Generator().manual_seed(cfg.seed)
    noise = sampler.initial_noise(pipe, 1, cfg.height, cfg.width, g, device, prompted.embeds.dtype)
    outs: dict[str, torch.Tensor] = {}
    for name, grid in (("teacher", cfg.teacher_grid), ("naive", cfg.student_sigmas)):

        def run(grid: list[float] = grid, name: str = name) -> tuple[None, str]:
            latents = _pipe_latents(pipe, cfg, prompted, noise, grid)
            outs[name] = latents
            return None, f"{len(grid)} steps: " + _finite_rgb(_decode(pipe, latents, cfg, inject))

        checks.run(f"{name}-{len(grid)}-step-rgb", run)
    if len(outs) < 2:
        return checks.items, metrics

    def roundtrip() -> tuple[dict[str, torch.Tensor], str]:
        final, steps, timesteps, eff = sampler.euler(
            pipe,
            pipe.transformer,
            prompted,
            noise,
            cfg.teacher_grid,
            cfg.height,
            cfg.width,
            use_kv_cache=cfg.use_kv_cache,
            record=True,
        )
        tensors = {
            "latents": torch.stack([s[0] for s in steps]),
            "timesteps": timesteps.float(),
            "sigmas": eff.float(),
            "prompt_embeds": prompted.embeds[0],
            "prompt_mask": torch.ones(prompted.embeds.shape[1], dtype=torch.uint8),
            "image_pad_mask": prompted.image_pad_mask[0].to(torch.uint8),
        }
        meta = TrajectoryMeta(
            key="g0",
            prompt=prompt,
            seed=cfg.seed,
            model_key=model_key(path),
            height=cfg.height,
            width=cfg.width,
            use_kv_cache=cfg.use_kv_cache,
            dtype=str(dtype),
            passed_sigmas=cfg.teacher_sigmas,
        )
        with tempfile.TemporaryDirectory() as tmp:
            write_trajectory(Path(tmp) / "t.safetensors", meta, tensors)
            back = read_trajectory(Path(tmp) / "t.safetensors")
        if (
            back is None
            or back[0] != meta
            or back[1].keys() != tensors.keys()
            or not all(torch.equal(back[1][k], v.cpu()) for k, v in tensors.items())
        ):
            raise AipcError("the trajectory read back differs from what was written")
        if not torch.equal(final, outs["teacher"]):
            raise ParityBroken("the recorded trajectory does not end where pipe(...) ends")
        return back[1], f"{len(steps)} latents + grid + embeddings, bit-exact after write/read"

    stored = checks.run("trajectory-format-roundtrip", roundtrip)
    if not isinstance(stored, dict):
        return checks.items, metrics
    traj = [
        Trajectory(
            stored["latents"],
            stored["timesteps"],
            stored["sigmas"],
            sampler.Prompted(stored["prompt_embeds"][None], None, stored["image_pad_mask"][None].bool()),
        )
    ]
    shapes_one = sampler.img_shapes_for(pipe, 1, cfg.height, cfg.width)
    state: dict[str, Any] = {}

    def train_step() -> tuple[None, str]:
        from accelerate import Accelerator

        model = load_transformer(path, device, dtype, base=cfg.student.base)
        params = add_lora(model, cfg)
        opt = torch.optim.AdamW(params, lr=cfg.student.learning_rate)
        accelerator = Accelerator(mixed_precision="no", cpu=device.type == "cpu")
        model, opt = prepare_student(accelerator, model, opt)
        check_lora_before_prepare(accelerator.unwrap_model(model), opt)
        base_name, base_param = next((n, p) for n, p in model.named_parameters() if "lora_" not in n)
        base_before = base_param.detach().clone()
        lora_before = [p.detach().clone() for p in params]
        batch = make_batch(traj, [(0, len(cfg.student_sigmas) - 1)], cfg.student_stride, shapes_one, device, dtype)
        loss, _ = step_loss(model, batch, cfg.student.loss_weighting)
        accelerator.backward(loss)
        opt.step()
        opt.zero_grad()
        if not math.isfinite(float(loss)):
            raise AipcError(f"the loss is {float(loss)}")
        if all(torch.equal(a, b) for a, b in zip(lora_before, params)):
            raise AipcError("the LoRA weights did not change")
        if not torch.equal(base_before, base_param.detach()):
            raise AipcError(f"the frozen base changed ({base_name})")
        state.update(model=accelerator.unwrap_model(model), batch=batch)
        return None, (
            f"loss {float(loss):.4g}, {len(params)} LoRA tensors updated, base ({cfg.student.base}) "
            "frozen, LoRA added before prepare"
        )

    checks.run("lora-train-step", train_step)
    if "model" not in state:
        return checks.items, metrics

    def save_reload() -> tuple[None, str]:
        from diffusers import QwenImage21Pipeline

        student, batch = state["model"], state["batch"]
        with tempfile.TemporaryDirectory() as tmp:
            lora_dir = Path(tmp) / "lora"
            publish(student, lora_dir, metadata="no-lora-metadata" not in inject)
            meta = check_lora_metadata(lora_dir, rank=cfg.student.rank, alpha=cfg.student.alpha)
            sd, meta = QwenImage21Pipeline.lora_state_dict(str(lora_dir), return_lora_metadata=True)
        fresh = load_transformer(path, device, dtype, base=cfg.student.base)
        QwenImage21Pipeline.load_lora_into_transformer(sd, transformer=fresh, metadata=meta)
        with torch.no_grad():
            a = sampler.velocity(student, batch.x, batch.t, batch.prompted, batch.img_shapes)
            b = sampler.velocity(fresh, batch.x, batch.t, batch.prompted, batch.img_shapes)
        diff = float((a - b).abs().max())
        if diff != 0.0:
            raise ParityBroken(f"the reloaded LoRA's output differs from the trained module's (max diff {diff:g})")
        return None, f"alpha {meta['transformer.lora_alpha']:g} (rank {meta['transformer.r']}) kept, max diff 0.0"

    checks.run("lora-save-reload", save_reload)
    return checks.items, metrics


def gate_g2(
    cfg: DistillConfig, *, log: Callable[[str], object] = print, inject: frozenset[str] = frozenset()
) -> tuple[list[Check], dict[str, Any]]:
    """Sampler parity: the own Euler loop reproduces pipe(...) bit-exactly for both grids (a batch of two
    prompts of different lengths); the scheduler uses the sigmas verbatim; the step count is the real pipeline's
    (num_inference_steps is ignored when sigmas are passed or the model configures sample_sigmas: noted, the
    expected behaviour)."""
    from diffusers import FlowMatchEulerDiscreteScheduler

    from aipc_env.workers.distill.models import device_and_dtype, load_pipeline, model_dir, offload_text_encoder, resolve_run

    checks = CheckList()
    metrics: dict[str, Any] = {}
    cfg = resolve_run(cfg, log=log)[0]
    device, dtype = device_and_dtype(cfg)
    pipe = load_pipeline(model_dir(cfg, log=log), device, dtype, cfg.teacher)
    if "wrong-sigmas" in inject:  # the tiny hub repo's scheduler (distillation lesson 7)
        pipe.scheduler = FlowMatchEulerDiscreteScheduler.from_config(
            {
                **pipe.scheduler.config,
                "use_dynamic_shifting": True,
                "shift_terminal": 0.02,
                "base_shift": 0.5,
                "max_shift": 0.9,
                "time_shift_type": "exponential",
            }
        )
    sched_cfg = dict(pipe.scheduler.config)
    metrics["scheduler_config"] = {
        k: sched_cfg.get(k) for k in ("shift", "use_dynamic_shifting", "shift_terminal", "time_shift_type", "stochastic_sampling")
    }
    metrics["sample_sigmas"] = pipe.config.get("sample_sigmas")

    def deterministic() -> tuple[None, str]:
        check_deterministic_sampler(sched_cfg)
        return None, "stochastic_sampling off"

    checks.run("deterministic-sampler", deterministic)
    prompts = [r.prompt for r in load_prompts(cfg.prompts.train, limit=2)]
    prompted = sampler.encode(pipe, prompts, device)
    offload_text_encoder(pipe, cfg.teacher)
    for name, grid in (("teacher", cfg.teacher_grid), ("student", cfg.student_sigmas)):
        g = torch.Generator().manual_seed(cfg.seed)
        noise = sampler.initial_noise(pipe, len(prompts), cfg.height, cfg.width, g, device, prompted.embeds.dtype)
        ref = _pipe_latents(pipe, cfg, prompted, noise, grid)
        pipe_sigmas = [float(s) for s in pipe.scheduler.sigmas]
        own, _, _, eff = sampler.euler(
            pipe, pipe.transformer, prompted, noise, grid, cfg.height, cfg.width, use_kv_cache=cfg.use_kv_cache
        )
        if "parity-ulp" in inject:
            flat = own.flatten().clone()
            flat[0] = torch.nextafter(flat[0], flat[0] + 1)
            own = flat.view_as(own)
        diff = float((own - ref).abs().max())
        metrics[f"{name}_max_abs_diff"] = diff
        metrics[f"{name}_effective_sigmas"] = [float(s) for s in eff]
        metrics[f"{name}_passed_sigmas"] = grid

        def parity(diff: float = diff, grid: list[float] = grid) -> tuple[None, str]:
            return None, check_parity(diff, steps=len(grid), batch=len(prompts))

        checks.run(f"parity-{name}", parity)

        def verbatim(grid: list[float] = grid, name: str = name, eff: list[float] = pipe_sigmas) -> tuple[None, str]:
            check_sigmas_verbatim(grid, eff, sched_cfg, grid=name)
            return None, "scheduler.sigmas == given grid + [0]"

        checks.run(f"sigmas-verbatim-{name}", verbatim)
    steps = len(cfg.student_sigmas)
    sample_sigmas = pipe.config.get("sample_sigmas")
    behaviour: list[str] = []
    for probe, passed in (("sigmas-override-steps", cfg.teacher_sigmas), ("default-grid", None)):
        counted: list[int] = []
        g = torch.Generator().manual_seed(cfg.seed)
        pipe(
            prompt_embeds=prompted.embeds[:1],
            height=cfg.height,
            width=cfg.width,
            num_inference_steps=steps,
            sigmas=passed,
            output_type="latent",
            generator=g,
            callback_on_step_end=lambda p, i, t, kw, counted=counted: counted.append(i) or {},
        )
        metrics[f"steps_probe_{probe}"] = {"requested": steps, "sigmas_passed": passed is not None, "ran": len(counted)}

        def step_count(passed: list[float] | None = passed, counted: list[int] = counted) -> tuple[str, str]:
            note = check_step_count(steps, len(counted), passed=passed, sample_sigmas=sample_sigmas)
            return note, note

        note = checks.run(probe, step_count)
        if note:
            behaviour.append(note)
    metrics["behaviour"] = behaviour
    metrics["notes"] = behaviour[:]
    if sample_sigmas and list(map(float, sample_sigmas)) != list(cfg.teacher_grid):
        metrics["notes"].append("the config's teacher_sigmas differ from the model's sample_sigmas (model_index.json)")
    return checks.items, metrics


def _lpips(cfg: DistillConfig) -> Any:  # an lpips.LPIPS module, or None
    """An LPIPS(alex) scorer when weights are configured, else None. The `lpips` package ships its linear layers;
    the AlexNet backbone is read from `eval.lpips_weights` (a TORCH_HOME folder holding
    hub/checkpoints/alexnet-owt-7be5be79.pth), never downloaded."""
    import os

    if not cfg.eval.lpips_weights:
        return None
    ckpt = Path(cfg.eval.lpips_weights) / "hub" / "checkpoints" / "alexnet-owt-7be5be79.pth"
    if not ckpt.is_file():
        raise AipcError(
            f"{ckpt} does not exist",
            key="eval.lpips_weights",
            fix="put torchvision's alexnet-owt-7be5be79.pth under <folder>/hub/checkpoints/, or remove "
            "eval.lpips_weights to measure PSNR/MSE",
        )
    os.environ["TORCH_HOME"] = str(cfg.eval.lpips_weights)
    try:
        import lpips
    except Exception as exc:  # noqa: BLE001 - lpips needs an importable torchvision
        raise AipcError(
            f"the lpips package does not import here ({type(exc).__name__}: {exc})",
            key="eval.lpips_weights",
            fix="pip install lpips (with a torchvision matching torch), or remove eval.lpips_weights to measure PSNR/MSE",
        ) from None
    return lpips.LPIPS(net="alex", verbose=False).eval()


def _distances(a: torch.Tensor, ref: torch.Tensor, scorer: Any) -> dict[str, float]:
    mse = float(((a - ref) ** 2).mean())
    out = {"mse": mse, "psnr": 10 * math.log10(1.0 / mse) if mse > 0 else float("inf")}
    if scorer is not None:
        with torch.no_grad():
            out["lpips"] = float(scorer(a * 2 - 1, ref * 2 - 1).mean())
    return out


def _grid_image(rows: list[list[torch.Tensor]], path: Path) -> None:
    from PIL import Image

    h, w = rows[0][0].shape[-2:]
    pad = 4
    canvas = Image.new("RGB", (len(rows[0]) * (w + pad) + pad, len(rows) * (h + pad) + pad), (255, 255, 255))
    for r, row in enumerate(rows):
        for c, img in enumerate(row):
            arr = (img.permute(1, 2, 0).clamp(0, 1) * 255).round().to(torch.uint8).cpu().numpy()
            canvas.paste(Image.fromarray(arr), (pad + c * (w + pad), pad + r * (h + pad)))
    _write_png(canvas, path)


def _log_grid(cfg: DistillConfig, grid_png: Path) -> None:
    """The G3 grid into the run's tracker (accelerate's TensorBoard tracker, offline, output_dir/logs)."""
    import numpy as np
    from accelerate.tracking import TensorBoardTracker
    from PIL import Image

    from aipc_env.workers.distill.student import require_tracker

    require_tracker(cfg.student.log_with)
    tracker = TensorBoardTracker("distill", str(cfg.out / "logs"))
    tracker.start()
    with Image.open(grid_png) as img:
        tracker.log_images({"g3/grid": np.asarray(img.convert("RGB"))[None]}, step=0, dataformats="NHWC")
    tracker.finish()


def _reference_lora(cfg: DistillConfig) -> Path | None:
    """eval.reference_lora as a readable .safetensors file, or None; checked before anything is sampled."""
    from aipc_env.distill.inputs import reference_lora_file

    if not cfg.eval.reference_lora:
        return None
    path = reference_lora_file(cfg.eval.reference_lora)
    if not path.is_file() or path.suffix != ".safetensors":
        raise InputError(
            f"no LoRA file there (a .safetensors file, or a folder holding {LORA_WEIGHTS})",
            path=path,
            key="eval.reference_lora",
            fix="point eval.reference_lora at the reference LoRA's .safetensors file",
        )
    return path


def _write_png(image: PIL.Image.Image, path: Path) -> None:
    import io

    from aipc_env.core.fileio import atomic_write_bytes

    buf = io.BytesIO()
    image.save(buf, format="PNG")
    atomic_write_bytes(path, buf.getvalue())


def gate_g3(
    cfg: DistillConfig, *, log: Callable[[str], object] = print, inject: frozenset[str] = frozenset()
) -> tuple[list[Check], dict[str, Any], Literal["quality", "plumbing"]]:
    """Per eval prompt and seed, student@4 (the published LoRA), naive@4 and teacher@8 from the same noise, with
    their distances to the teacher. Quality mode (LPIPS, a real model) passes only if the student beats naive by
    the margin and win-rate (aipc_env.distill.g3_verdict); plumbing mode checks what can be checked without judging the
    student: the artifacts read back, the LoRA changes the output, every image is finite."""
    from PIL import Image

    from aipc_env.distill.g3_verdict import (
        METRICS,
        artifacts_read_back,
        decide_entries,
        decide_mode,
        g3_metric,
        lora_changes_output,
        not_worse_than_reference,
        outputs_finite,
        student_beats_naive,
    )
    from aipc_env.distill.inputs import file_sha256
    from aipc_env.workers.distill.models import (
        device_and_dtype,
        is_tiny_random,
        is_tiny_trained,
        load_pipeline,
        model_dir,
        offload_text_encoder,
        resolve_run,
    )

    checks = CheckList()
    metrics: dict[str, Any] = {}
    path = model_dir(cfg, log=log)
    trained = is_tiny_trained(path)
    mode, why = decide_mode(
        cfg.eval.mode, lpips=bool(cfg.eval.lpips_weights), tiny_random=is_tiny_random(path), tiny_trained=trained
    )
    metrics["mode_reason"] = why
    lora_file = RunFolder(cfg.out).lora_file
    if not lora_file.is_file():
        raise AipcError(f"no student LoRA at {lora_file}", fix="run `aipc-env distill train` first")
    check_lora_metadata(lora_file.parent, rank=cfg.student.rank, alpha=cfg.student.alpha)
    lora_sha = file_sha256(lora_file)  # the LoRA evaluated: read once, before it is loaded
    if lora_sha is None:  # gone since the check above
        raise AipcError(f"no student LoRA at {lora_file}", fix="run `aipc-env distill train` first")
    reference = _reference_lora(cfg)
    metric = g3_metric(mode, lpips=bool(cfg.eval.lpips_weights), tiny_trained=trained)
    scorer = _lpips(cfg) if metric == "lpips" else None
    key, metric_note = METRICS[metric]
    cfg = resolve_run(cfg, log=log)[0]
    device, dtype = device_and_dtype(cfg)
    pipe = load_pipeline(path, device, dtype, cfg.teacher)
    records = load_prompts(cfg.prompts.eval)
    log(
        f"g3: {len(records)} eval prompts: sampling teacher@{len(cfg.teacher_grid)} and "
        f"naive@{len(cfg.student_sigmas)} ({mode} mode: {why})"
    )
    encoded = [(rec, sampler.encode(pipe, [rec.prompt], device)) for rec in records]
    offload_text_encoder(pipe, cfg.teacher)
    runs: list[dict[str, Any]] = []  # per prompt x seed: its inputs and each kind's latents
    for rec, prompted in encoded:
        for seed in [rec.seed] if rec.seed is not None else cfg.eval.seeds:
            g = torch.Generator().manual_seed(seed)
            noise = sampler.initial_noise(pipe, 1, cfg.height, cfg.width, g, device, prompted.embeds.dtype)
            runs.append(
                {
                    "prompt": rec.prompt,
                    "seed": seed,
                    "prompted": prompted,
                    "noise": noise,
                    "teacher": _pipe_latents(pipe, cfg, prompted, noise, cfg.teacher_grid),
                    "naive": _pipe_latents(pipe, cfg, prompted, noise, cfg.student_sigmas),
                }
            )
    log(f"g3: student@{len(cfg.student_sigmas)} with the LoRA ({lora_file.name})")
    pipe.load_lora_weights(str(lora_file.parent), adapter_name="student")
    for run in runs:
        run["student"] = _pipe_latents(pipe, cfg, run["prompted"], run["noise"], cfg.student_sigmas)
    kinds = ["teacher", "naive", "student"]
    if reference is not None:
        log(f"g3: reference@{len(cfg.student_sigmas)} with {reference} (the same prompts, seeds and noise)")
        pipe.delete_adapters("student")
        try:
            pipe.load_lora_weights(str(reference.parent), weight_name=reference.name, adapter_name="reference")
        except Exception as exc:  # noqa: BLE001 - any loader failure: one clear line naming the file
            raise InputError(
                f"diffusers cannot load it as a Qwen-Image 2.1 LoRA ({type(exc).__name__}: {str(exc)[:300]})",
                path=reference,
                key="eval.reference_lora",
                fix="point eval.reference_lora at a LoRA for this model (e.g. the 4-step Lightning LoRA's .safetensors)",
            ) from None
        if "reference" not in pipe.get_list_adapters().get("transformer", []):
            raise InputError(
                "no weight of it loads onto this model's transformer (diffusers found no LoRA keys it knows)",
                path=reference,
                key="eval.reference_lora",
                fix="point eval.reference_lora at a LoRA for this model (e.g. the 4-step Lightning LoRA's .safetensors)",
            )
        for run in runs:
            run["reference"] = _pipe_latents(pipe, cfg, run["prompted"], run["noise"], cfg.student_sigmas)
        kinds.append("reference")
    compared = [k for k in kinds if k != "teacher"]
    log(f"g3: decoding {len(kinds) * len(runs)} images on {cfg.eval.decode_device} and measuring distances to the teacher")
    out = cfg.out / "g3"
    out.mkdir(parents=True, exist_ok=True)
    entries, rows, finite = [], [], True
    for i, run in enumerate(runs):
        imgs = {k: sampler.decode_rgb(pipe, run[k], cfg.height, cfg.width, cfg.eval.decode_device)[0] for k in kinds}
        finite = finite and all(bool(torch.isfinite(v).all()) for v in imgs.values())
        files = {}
        for k, img in imgs.items():
            arr = (img.permute(1, 2, 0).clamp(0, 1) * 255).round().to(torch.uint8).cpu().numpy()
            files[k] = f"{i:03d}-seed{run['seed']}-{k}.png"
            _write_png(Image.fromarray(arr), out / files[k])
        rows.append([imgs[k] for k in kinds])
        entries.append(
            {
                "prompt": run["prompt"],
                "seed": run["seed"],
                "files": files,
                "distance_to_teacher": {
                    k: {
                        **_distances(imgs[k][None], imgs["teacher"][None], scorer),
                        "latent_mse": float(((run[k].float() - run["teacher"].float()) ** 2).mean()),
                    }
                    for k in compared
                },
            }
        )
    _grid_image(rows, out / "grid.png")
    if cfg.student.log_with:
        _log_grid(cfg, out / "grid.png")
    mean = {
        k: {m: sum(e["distance_to_teacher"][k][m] for e in entries) / len(entries) for m in entries[0]["distance_to_teacher"][k]}
        for k in compared
    }
    beats, stats = decide_entries(entries, metric, margin=cfg.eval.margin, min_win_rate=cfg.eval.min_win_rate)
    manifest = G3Manifest(
        mode=mode,
        metric=metric,
        metric_note=metric_note,
        lora=str(lora_file),
        lora_sha256=lora_sha,
        teacher_sigmas=cfg.teacher_grid,
        student_sigmas=cfg.student_sigmas,
        height=cfg.height,
        width=cfg.width,
        entries=[G3Entry.model_validate(e) for e in entries],
        grid=f"grid.png (rows: prompt x seed; columns: teacher@8, naive@4, student@4{', reference@4' if reference else ''})",
        mean=mean,
        reference_lora=str(reference) if reference else None,
        reference_lora_sha256=file_sha256(reference) if reference else None,
    )
    write_model(out / "manifest.json", manifest)
    metrics.update(
        {
            "metric": metric,
            "metric_note": metric_note,
            "mean": mean,
            "statistics": stats,
            "images": len(entries),
            "manifest": str(out / "manifest.json"),
            "grid": str(out / "grid.png"),
        }
    )

    checks.run("artifacts-read-back", lambda: (None, artifacts_read_back(out, len(runs), lora_sha)))
    moved = max(float((r["student"] - r["naive"]).abs().max()) for r in runs)
    checks.run("lora-changes-output", lambda: (None, lora_changes_output(moved)))
    checks.run("outputs-finite", lambda: (None, outputs_finite(finite)))
    detail = (
        f"student {metric} {mean['student'][metric]:.4g} vs naive {mean['naive'][metric]:.4g}; closer to the "
        f"teacher on {stats['wins']}/{stats['pairs']} pairs"
    )
    if metric == "latent_mse":
        detail += (
            f" (pixel MSE student {mean['student']['mse']:.4g} vs naive {mean['naive']['mse']:.4g}; margin {cfg.eval.margin:g})"
        )
    if mode == "quality":
        checks.run(
            "student-beats-naive",
            lambda: (None, student_beats_naive(beats, detail, margin=cfg.eval.margin, min_win_rate=cfg.eval.min_win_rate)),
        )
    if reference is not None:
        versus = (
            f"student {key} {mean['student'][key]:.4g} vs reference {mean['reference'][key]:.4g} "
            "(distance to teacher@8, lower is better)"
        )
        metrics["reference_comparison"] = versus
        moved_ref = max(float((r["reference"] - r["naive"]).abs().max()) for r in runs)
        checks.run(
            "reference-compared",
            lambda: (
                None,
                f"the reference LoRA was sampled from the same noise "
                f"({len(runs)} pairs; max |reference - naive| {moved_ref:.3g}): "
                f"{versus}",
            ),
        )
        if mode == "quality":
            checks.run(
                "student-not-worse-than-reference",
                lambda: (
                    None,
                    not_worse_than_reference(mean["student"][key], mean["reference"][key], margin=cfg.eval.margin, metric=key),
                ),
            )
    metrics["comparison"] = detail
    return checks.items, metrics, mode
