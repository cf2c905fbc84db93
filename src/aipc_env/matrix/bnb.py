"""Which implementation of bitsandbytes runs NF4 and Adam8bit on a device: the one rule the doctor (from facts,
before anything runs) and `verify` (in the training env, from what loaded) both state. Standard library only: the
verify worker imports it inside any training env.

On XPU (bitsandbytes 0.50): the native SYCL library does dequantize_4bit, gemv_4bit and dequantize_blockwise; Triton
kernels do quantize_4bit, quantize_blockwise and the 8-bit optimizer updates. Without the native library (a SYCL
runtime older than oneAPI 2025.1) every op falls back to Triton. Triton compiles its kernels on the PC.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TRITON_NEEDS", "BnbBackends", "bnb_backends"]

TRITON_NEEDS = {
    "win-64": "the pair's Triton (with its own dependencies), MSVC C++ build tools (vcvars64), SYCL headers (icpx, "
    "ONEAPI_ROOT or the intel-sycl-rt wheel) and the Level Zero headers (LEVEL_ZERO_V1_SDK_PATH)",
    "linux-64": "the pair's Triton (with its own dependencies), gcc and the Level Zero headers (libze-dev)",
}
"""What the Triton path needs on the PC, per platform."""


@dataclass(frozen=True)
class BnbBackends:
    nf4_matmul: str
    """dequantize / gemv of NF4 weights (forward and backward): native SYCL, Triton fallback, CPU, CUDA or none."""
    nf4_quantize: str
    """Quantizing weights to NF4 (the first load of an unquantized model)."""
    adam8bit: str
    """Adam8bit.step()."""

    def describe(self) -> str:
        return f"NF4 matmul: {self.nf4_matmul}; NF4 quantize: {self.nf4_quantize}; Adam8bit: {self.adam8bit}"

    @property
    def complete(self) -> bool:
        return "none" not in (self.nf4_matmul, self.nf4_quantize, self.adam8bit)

    @property
    def fallback(self) -> bool:
        return self.nf4_matmul == "Triton fallback"


def bnb_backends(device: str, *, native: bool, triton: bool) -> BnbBackends:
    """device: xpu, cuda or cpu; native: bitsandbytes' native library for that device loads; triton: Triton imports
    and can compile kernels."""
    if device == "xpu":
        kernels = "Triton" if triton else "none"
        matmul = "native SYCL" if native else ("Triton fallback" if triton else "none")
        return BnbBackends(matmul, kernels, kernels)
    if device == "cuda":
        return BnbBackends("native CUDA", "native CUDA", "native CUDA")
    return BnbBackends("CPU", "CPU", "CPU")
