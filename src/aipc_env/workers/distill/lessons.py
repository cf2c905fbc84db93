"""The root causes the image21-turbo-trajectories distillation project recorded, as named checks. Each raises a
`LessonError` subclass (distill/lesson_errors.py) whose `name` goes into the gate verdicts, and whose message
says what went wrong and how to fix it. Pure checks over tensors, modules and files; torch is imported only
inside the functions that need it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from aipc_env.distill.lesson_errors import (
    EmbeddingsAttachedToGraph,
    GridNotHonoured,
    LoraAfterPrepare,
    LoraAlphaLost,
    LoraMetadataMissing,
    ObjectiveRose,
    ParityBroken,
    RgbaNotSliced,
    SigmasNotVerbatim,
    StochasticSampler,
    VelocityDiverged,
)

if TYPE_CHECKING:
    import torch

__all__ = [
    "check_deterministic_sampler",
    "check_embeddings_detached",
    "check_lora_before_prepare",
    "check_lora_metadata",
    "check_parity",
    "check_rgb",
    "check_sigmas_verbatim",
    "check_step_count",
    "check_training_outcome",
    "mark_prepared",
]


def check_embeddings_detached(*tensors: torch.Tensor | None, where: str = "prompt embeddings") -> None:
    """Lesson 1: `QwenImage21Pipeline.encode_prompt` is not decorated with no_grad; called with grad enabled it
    ties the text encoder's graph to the embeddings, and every training backward walks that shared graph
    (device-mismatch and 'backward through the graph a second time' errors)."""
    for t in tensors:
        if t is not None and (t.requires_grad or t.grad_fn is not None):
            raise EmbeddingsAttachedToGraph(
                f"the {where} carry the text encoder's autograd graph (grad_fn {type(t.grad_fn).__name__})",
                fix="compute embeddings under torch.no_grad() (aipc_env.workers.distill.sampler.encode does), or detach them",
            )


def check_rgb(images: torch.Tensor, *, where: str = "decoded images") -> None:
    """Lesson 2: AutoencoderKLQwenImage21.decode returns RGBA; RGB is [:, :3]."""
    if images.ndim != 4 or images.shape[1] != 3:
        raise RgbaNotSliced(
            f"the {where} have shape {tuple(images.shape)}, expected [B, 3, H, W] (the 2.1 VAE decodes 4 channels: RGBA)",
            fix="slice the decode as vae.decode(z)[0][:, :3, 0] (aipc_env.workers.distill.sampler.decode_rgb)",
        )


def check_lora_metadata(lora_dir: Path, *, rank: int, alpha: float) -> dict[str, Any]:
    """Lesson 6: without adapter metadata the loader rebuilds the LoRA config with alpha = rank (the recorded project's
    half-strength adapter). Reads the file through diffusers' own loader. Returns the metadata."""
    from diffusers import QwenImage21Pipeline

    meta: dict[str, Any] | None
    _, meta = QwenImage21Pipeline.lora_state_dict(str(lora_dir), return_lora_metadata=True)
    if not meta:
        raise LoraMetadataMissing(
            f"the LoRA in {lora_dir} has no adapter metadata: diffusers would load it with alpha = rank "
            f"({rank}) instead of {alpha:g}, a {rank / alpha:.2g}x-strength adapter",
            fix="save with pipe.save_lora_weights(..., **_collate_lora_metadata({'transformer': transformer}))",
            path=lora_dir,
        )
    got_alpha, got_rank = meta.get("transformer.lora_alpha"), meta.get("transformer.r")
    if got_alpha != alpha or got_rank != rank:
        raise LoraAlphaLost(
            f"the LoRA in {lora_dir} loads with rank {got_rank}, alpha {got_alpha}; trained with rank {rank}, alpha {alpha:g}",
            path=lora_dir,
            fix="publish from the trained module's peft_config (aipc_env.workers.distill.student.publish)",
        )
    return meta


def check_deterministic_sampler(scheduler_config: dict[str, Any]) -> None:
    if scheduler_config.get("stochastic_sampling"):
        raise StochasticSampler(
            "the scheduler has stochastic_sampling on: trajectories and parity need the deterministic Euler step",
            fix="set stochastic_sampling: false in scheduler/scheduler_config.json",
        )


def check_sigmas_verbatim(passed: list[float], effective: list[float], scheduler_config: dict[str, Any], *, grid: str) -> None:
    """Lesson 7: the scheduler must use the passed sigmas verbatim (plus a terminal 0). Dynamic shifting warps
    them with a resolution-dependent mu; a shift other than 1 or a shift_terminal rescales them."""
    import numpy as np

    want = np.asarray(list(passed) + [0.0], dtype=np.float32)
    got = np.asarray(effective, dtype=np.float32)
    if want.shape != got.shape or not np.array_equal(want, got):
        settings = {
            k: scheduler_config.get(k)
            for k in (
                "use_dynamic_shifting",
                "shift",
                "shift_terminal",
                "time_shift_type",
                "use_karras_sigmas",
                "use_exponential_sigmas",
                "use_beta_sigmas",
            )
        }
        raise SigmasNotVerbatim(
            f"the scheduler warps the {grid} grid: passed {[round(float(x), 4) for x in want[:-1]]}, it runs "
            f"{[round(float(x), 4) for x in got]} (scheduler config {settings})",
            fix="use the real Turbo scheduler config (use_dynamic_shifting: false, shift: 1.0, shift_terminal: "
            "null) in scheduler/scheduler_config.json",
        )


def check_parity(max_abs_diff: float, *, steps: int, batch: int) -> str:
    """G2: the own Euler loop must reproduce pipe(...) bit for bit: any difference, one float step included, breaks
    parity (a loop that drifts from the pipeline trains the student on trajectories the pipeline never samples)."""
    if max_abs_diff != 0.0:
        raise ParityBroken(
            f"the own {steps}-step loop differs from pipe(...) by up to {max_abs_diff:g}",
            fix="mirror the pipeline exactly (see aipc_env.workers.distill.sampler)",
        )
    return f"own {steps}-step Euler loop == pipe(...) bit-exact (max diff 0.0, batch {batch})"


def check_step_count(requested: int, ran: int, *, passed: list[float] | None, sample_sigmas: list[float] | None) -> str:
    """How many steps `pipe(num_inference_steps=requested, sigmas=passed)` must run, as the real pipeline does:
    len(passed) when sigmas are passed, else len(sample_sigmas) when model_index.json configures them (both ignore
    num_inference_steps: expected, not a fault), else `requested`. Returns the behaviour as a note; a different
    count is a grid fault."""
    if passed is not None:
        want, why = len(passed), f"num_inference_steps={requested} ignored; sigmas= used verbatim ({len(passed)} steps)"
    elif sample_sigmas:
        want, why = (
            len(sample_sigmas),
            (
                f"num_inference_steps={requested} ignored; the model's sample_sigmas "
                f"({len(sample_sigmas)} steps, model_index.json) used verbatim"
            ),
        )
    else:
        want, why = requested, f"num_inference_steps={requested} honoured (no sample_sigmas configured)"
    if ran != want:
        raise GridNotHonoured(
            f"pipe(num_inference_steps={requested}"
            + (f", sigmas=<{len(passed)}>" if passed is not None else "")
            + f") ran {ran} steps, expected {want} (sample_sigmas: {sample_sigmas})",
            fix="use a QwenImage21Pipeline whose scheduler takes sigmas= as given (diffusers >= 0.42)",
        )
    return why


def check_training_outcome(
    *, objective_start: float, objective_end: float, velocity_on: float, velocity_off: float, tolerance: float
) -> None:
    """The train stage's end: the objective on the training pairs must fall, and the adapter's velocity MSE must
    stay within `tolerance` x the adapter-off one (the recorded diverged run: 2.2 vs 0.025)."""
    if not objective_end < objective_start:
        raise ObjectiveRose(
            f"the student objective on the training pairs did not fall: {objective_start:.4g} -> {objective_end:.4g}",
            fix="lower student.learning_rate, or train longer at a lower one; the LoRA was published for inspection only",
        )
    if velocity_on > velocity_off * tolerance:
        raise VelocityDiverged(
            f"with the adapter on, the velocity MSE on the training pairs is {velocity_on:.4g}, "
            f"more than {tolerance:g} x the adapter-off {velocity_off:.4g}",
            fix="lower student.learning_rate (the recorded diverged run: 2.2 vs 0.025)",
        )


def mark_prepared(model: Any) -> None:  # a diffusers transformer with peft's LoRA layers
    """Record which LoRA parameters the model had when accelerator.prepare saw it (the recorded project's working harness:
    LoRA added before prepare)."""
    model._aipc_prepared_lora = frozenset(id(p) for n, p in model.named_parameters() if "lora_" in n)


def check_lora_before_prepare(model: Any, optimizer: torch.optim.Optimizer) -> int:  # model: as mark_prepared's
    """Lesson 5: LoRA layers must exist before `accelerator.prepare`, and the optimizer must hold exactly
    them. Returns the number of trainable LoRA tensors."""
    lora = {id(p) for n, p in model.named_parameters() if "lora_" in n and p.requires_grad}
    prepared = getattr(model, "_aipc_prepared_lora", None)
    if prepared is None:
        raise LoraAfterPrepare(
            "the student was never prepared through aipc_env.workers.distill.student.prepare_student",
            fix="add the LoRA, build the optimizer, then prepare",
        )
    if not lora or lora != set(prepared):
        raise LoraAfterPrepare(
            f"accelerator.prepare saw {len(prepared)} LoRA tensors, the model now has "
            f"{len(lora)}: the adapter was added after prepare",
            fix="add the LoRA (transformer.add_adapter) before accelerator.prepare",
        )
    in_optimizer = {id(p) for group in optimizer.param_groups for p in group["params"]}
    if in_optimizer != lora:
        raise LoraAfterPrepare(
            f"the optimizer holds {len(in_optimizer)} tensors, the LoRA has {len(lora)}",
            fix="build the optimizer from the LoRA parameters after add_adapter",
        )
    return len(lora)
