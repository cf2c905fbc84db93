"""Pass/fail bounds of verify. The same on every device; they depend only on the dtype's precision."""

from __future__ import annotations

NF4_ROUNDTRIP_MAX_REL_ERR = 0.11
"""NF4 (blocksize 64) of Gaussian weights has a relative L2 error of ~0.092 in theory and in practice."""

EPS = {"float32": 1.1920929e-07, "float16": 9.765625e-04, "bfloat16": 7.8125e-03}


def matmul_max_rel_err(dtype: str) -> float:
    """Linear4bit vs the dequantized reference matmul computed in fp32: a few units of the dtype's rounding."""
    return max(1e-5, 4 * EPS[dtype])


ADAM8BIT_MAX_REL_DIFF = 0.05
"""||Δp(Adam8bit) - Δp(Adam)|| / ||Δp(Adam)|| after 20 steps (measured ~0.011 on CPU)."""
ADAM8BIT_MIN_COSINE = 0.99

BF16_MAX_SLOWDOWN = 20.0
"""bf16 is checked only where a bf16 matmul is at most this many times slower than fp32 on the device."""
