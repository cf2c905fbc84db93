"""The fit phase's peak device memory, estimated from coefficients measured at real width (benchmarks/memory_model.py).

Pure and torch-free: `recommend` runs it. The benchmark measured one optimizer step of diffusers'
QwenImageTransformer2DModel with 1 and 2 full-width blocks (NF4 Linear layers, LoRA, gradient checkpointing,
Adam8bit, bf16) at two sequence lengths; `fit_coefficients` turns its JSON into the shipped coefficients
(memory-coefficients.json beside this module; a test checks they equal the committed benchmark's), and `estimate`
extrapolates to the released model's 60 blocks:

    peak = weights(fixed + 60 x per block) + LoRA and optimizer state (x rank / measured rank)
           + step transient (fixed(tokens) + 60 x per block(tokens))           [checkpointing on]

Only the transformer counts: the fit phase never loads the text encoder or the VAE (mode-aware loading, runbook
§7.3; cache first, §7.4). Without checkpointing every block keeps its whole graph; that is inferred (each block
taken as the checkpointed step's fixed transient, which holds one block's graph during its recompute), not measured.
"""

from __future__ import annotations

import math
from functools import cache
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from aipc_env.core.formats import StrictModel, VersionedModel, load_versioned
from aipc_env.errors import InputError, validation_message

__all__ = [
    "COEFFICIENTS",
    "MODEL_BLOCKS",
    "BenchmarkPoint",
    "MemoryBenchmark",
    "MemoryCoefficients",
    "MemoryEstimate",
    "control_tokens",
    "estimate",
    "fit_coefficients",
    "load_coefficients",
    "target_tokens",
    "text_tokens",
]

COEFFICIENTS = Path(__file__).with_name("memory-coefficients.json")
BENCHMARK_FILE = "benchmarks/results/memory-model.json"
MODEL_BLOCKS = 60
"""The released Qwen-Image(-Edit) transformer's num_layers: diffusers 0.42.1 QwenImageTransformer2DModel's default
(transformer_qwenimage.py, `num_layers: int = 60`), which is the released model's config."""
VL_TOKENS_PER_CONTROL = 196
"""Inferred: the Plus pipeline's 384 x 384 VL image, resized to a multiple of 28 (392 x 392), is 14 x 14 merged
Qwen2.5-VL patches."""
PROMPT_TOKENS = 256
"""The prompt's share of the text sequence: the runbook accepts instructions of up to 200 words."""


class BenchmarkPoint(BaseModel):
    """One measured point of benchmarks/results/memory-model.json (extra keys are informative)."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)
    blocks: int = Field(ge=1, le=8)
    tokens: int = Field(ge=1, le=1_000_000)
    transient_bytes: int = Field(ge=0, le=2**45)
    frozen_weight_bytes: int = Field(ge=0, le=2**45)
    quant_state_bytes: int = Field(ge=0, le=2**45)
    lora_bytes: int = Field(ge=0, le=2**40)
    optimizer_state_bytes: int = Field(ge=0, le=2**40)
    step_seconds: float = Field(ge=0, le=10**6)


class MemoryBenchmark(BaseModel):
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)
    benchmark: Literal["memory-model"]
    points: dict[str, BenchmarkPoint]
    machine: dict[str, Any]
    lora_rank: int = Field(16, ge=1, le=1024)


class MemoryCoefficients(VersionedModel):
    """memory-coefficients.json: what `estimate` reads (bytes; per-token slopes in bytes per token)."""

    FORMAT: ClassVar[str] = "memory-model coefficients"
    FIX: ClassVar[str | None] = "reinstall aipc-env (the file ships with it)"
    schema_version: Literal[1] = 1
    source: str
    measured_at: str
    lora_rank: int = Field(ge=1, le=1024)
    fixed_weight_bytes: float = Field(ge=0)
    block_weight_bytes: float = Field(ge=0)
    block_lora_bytes: float = Field(ge=0)
    """LoRA weights (fp32) and Adam8bit state of one block at lora_rank."""
    fixed_transient_bytes: float
    fixed_transient_per_token: float
    block_transient_bytes: float
    block_transient_per_token: float
    tokens_measured: tuple[int, int]
    step_seconds: dict[str, float]


class MemoryEstimate(StrictModel):
    """The estimate `recommend` reports (bytes)."""

    total_bytes: int
    weights_bytes: int
    lora_bytes: int
    transient_bytes: int
    tokens: int = Field(description="target + control + text tokens of one sample")
    batch: int
    checkpointing: bool
    inferred: list[str] = Field(default_factory=list)
    source: str
    measured_at: str


def _point(bench: MemoryBenchmark, blocks: int, which: str) -> BenchmarkPoint:
    matches = [p for p in bench.points.values() if p.blocks == blocks]
    if len(matches) < 2:
        raise ValueError(f"the benchmark needs two sequence lengths at {blocks} block(s), has {len(matches)}")
    ordered = sorted(matches, key=lambda p: p.tokens)
    return ordered[0] if which == "short" else ordered[-1]


def fit_coefficients(raw: object, source: str = BENCHMARK_FILE) -> MemoryCoefficients:
    """The coefficients from the benchmark's JSON: per block = 2 blocks - 1 block, fixed = 1 block - per block, at
    each of two lengths; each a line in tokens through the two lengths. A malformed file is an InputError."""
    try:
        bench = MemoryBenchmark.model_validate(raw)
    except ValidationError as exc:
        raise validation_message(exc, source) from None
    try:
        s1, l1, s2, l2 = (_point(bench, b, w) for b in (1, 2) for w in ("short", "long"))
    except ValueError as exc:
        raise InputError(str(exc), path=source, key="points") from None
    if not (s1.tokens == s2.tokens < l1.tokens == l2.tokens):
        raise InputError("the 1- and 2-block points must share two distinct sequence lengths", path=source, key="points")

    def static(p: BenchmarkPoint) -> int:
        return p.frozen_weight_bytes + p.quant_state_bytes

    def lora(p: BenchmarkPoint) -> int:
        return p.lora_bytes + p.optimizer_state_bytes

    block_weights = static(l2) - static(l1)
    span = l1.tokens - s1.tokens
    block_short, block_long = s2.transient_bytes - s1.transient_bytes, l2.transient_bytes - l1.transient_bytes
    fixed_short, fixed_long = s1.transient_bytes - block_short, l1.transient_bytes - block_long
    block_slope = (block_long - block_short) / span
    fixed_slope = (fixed_long - fixed_short) / span
    measured_at = str(bench.machine.get("measured_at", "unknown"))
    try:
        return MemoryCoefficients(
            source=source,
            measured_at=measured_at,
            lora_rank=bench.lora_rank,
            fixed_weight_bytes=static(l1) - block_weights,
            block_weight_bytes=block_weights,
            block_lora_bytes=lora(l2) - lora(l1),
            fixed_transient_bytes=fixed_short - fixed_slope * s1.tokens,
            fixed_transient_per_token=fixed_slope,
            block_transient_bytes=block_short - block_slope * s1.tokens,
            block_transient_per_token=block_slope,
            tokens_measured=(s1.tokens, l1.tokens),
            step_seconds={name: p.step_seconds for name, p in sorted(bench.points.items())},
        )
    except ValidationError as exc:  # e.g. 2 blocks weigh less than 1: the points contradict each other
        raise validation_message(exc, source, fix="run benchmarks/memory_model.py again") from None


@cache
def load_coefficients(path: Path = COEFFICIENTS) -> MemoryCoefficients:
    return load_versioned(MemoryCoefficients, path)


def target_tokens(size: tuple[int, int] | list[int]) -> int:
    """Tokens of an (h, w) target: VAE /8, then 2 x 2 patches (the cache rounds sizes down to 16)."""
    h, w = size
    return (h // 16) * (w // 16)


def control_tokens(pixels: int) -> int:
    """Tokens of a control resized to an area of `pixels` (any aspect ratio: the area decides)."""
    return pixels // 256


def text_tokens(controls: int) -> int:
    """The prompt embedding length assumed: the VL images of the controls plus the prompt."""
    return VL_TOKENS_PER_CONTROL * controls + PROMPT_TOKENS


def estimate(
    target_size: tuple[int, int] | list[int],
    *,
    control_pixels: int,
    controls: int = 1,
    text: int | None = None,
    batch: int = 1,
    checkpointing: bool = True,
    rank: int = 16,
    coefficients: MemoryCoefficients | None = None,
) -> MemoryEstimate:
    """Peak fit-phase device memory of one step of the released model (60 blocks)."""
    if batch < 1 or controls < 0 or rank < 1 or control_pixels < 0:
        raise ValueError("batch and rank must be >= 1, controls and control_pixels >= 0")
    co = coefficients or load_coefficients()
    sample = (
        target_tokens(target_size) + controls * control_tokens(control_pixels) + (text_tokens(controls) if text is None else text)
    )
    tokens = sample * batch
    inferred = []
    weights = co.fixed_weight_bytes + MODEL_BLOCKS * co.block_weight_bytes
    lora = MODEL_BLOCKS * co.block_lora_bytes * rank / co.lora_rank
    fixed = co.fixed_transient_bytes + co.fixed_transient_per_token * tokens
    block = co.block_transient_bytes + co.block_transient_per_token * tokens
    if checkpointing:
        transient = fixed + MODEL_BLOCKS * block
    else:
        transient = MODEL_BLOCKS * fixed
        inferred.append("without gradient checkpointing each block is taken to hold one block's whole graph")
    lo, hi = co.tokens_measured
    if not lo <= tokens <= hi:
        inferred.append(f"{tokens} tokens is outside the measured {lo}-{hi}: extrapolated linearly")
    if batch > 1:
        inferred.append("batch scales the per-token parts (tokens x batch)")
    if rank != co.lora_rank:
        inferred.append(f"LoRA state scaled from rank {co.lora_rank} to {rank}")
    parts = [math.ceil(max(0.0, x)) for x in (weights, lora, transient)]
    return MemoryEstimate(
        total_bytes=sum(parts),
        weights_bytes=parts[0],
        lora_bytes=parts[1],
        transient_bytes=parts[2],
        tokens=sample,
        batch=batch,
        checkpointing=checkpointing,
        inferred=inferred,
        source=co.source,
        measured_at=co.measured_at,
    )
