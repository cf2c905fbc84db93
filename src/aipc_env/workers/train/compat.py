"""Compatibility shims for the training stack, applied only where needed. Imports torch stack lazily."""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import logging

__all__ = ["processor_without_video", "quiet_bitsandbytes_notices"]

_APPLIED = False


def processor_without_video() -> bool:
    """transformers >= 5 builds Qwen2VLProcessor with a video processor, which needs torchvision. Where
    torchvision is missing (it is optional in the training env), limit the processor to image processor +
    tokenizer, which is all the Qwen-Image-Edit pipelines use. The same holds for Qwen3VLProcessor (Qwen-Image-2.1's
    text encoder; its video processor is never used by the image pipelines). A test-environment shim: where
    torchvision imports (any real training env), nothing is changed. Returns whether the shim is active."""
    global _APPLIED
    if _APPLIED:
        return True
    if importlib.util.find_spec("torchvision") is not None:
        try:
            import torchvision  # noqa: F401

            return False
        except Exception:  # noqa: BLE001, S110 - a torchvision that does not import is as good as none
            pass
    import transformers

    for name in ("Qwen2VLProcessor", "Qwen3VLProcessor"):  # Qwen3VLProcessor: transformers >= 4.57
        cls = getattr(transformers, name, None)
        if cls is None:
            continue
        if hasattr(cls, "get_attributes"):  # transformers >= 5
            cls.get_attributes = classmethod(lambda cls: ["image_processor", "tokenizer"])
        else:  # transformers 4.x (qwen-image-finetune pins 4.52.4)
            cls.attributes = ["image_processor", "tokenizer"]
    _APPLIED = True
    return True


class _DropNotice:
    """A logging filter that drops a third-party notice with nothing to act on, known by its text."""

    def __init__(self, text: str) -> None:
        self._text = text

    def filter(self, record: logging.LogRecord) -> bool:  # logging.Filter protocol
        return self._text not in record.getMessage()


KERNELS_MISSING = "gemm_4bit_forward"
"""bitsandbytes >= 0.50 logs on every CPU import that the optional `kernels` package (a faster CPU NF4 matmul from the
Hugging Face hub) is missing. The pure PyTorch path it falls back to is the one tested here, so the notice is dropped
(docs/testing.md explains it once)."""
OFFLINE_TRUST = "Skipping publisher trust check"
"""transformers >= 5.25 requires the `kernels` package, which warns on every offline load of its CPU NF4 kernel that
it cannot check the kernel's publisher "because Hugging Face Hub is in offline mode". The training env runs offline
on purpose (HF_HUB_OFFLINE: every model is a local folder), so the line says nothing to act on."""
KERNELS_HUB_LOGGER = "kernels._internals.hf_hub"
"""The logger of kernels' hub access (kernels 0.19.1, kernels/_internals/hf_hub.py: `logging.getLogger(__name__)`)."""


def quiet_bitsandbytes_notices() -> None:
    """Install the filters before bitsandbytes is imported (it logs at import time)."""
    import logging

    logging.getLogger("bitsandbytes.backends.cpu.ops").addFilter(_DropNotice(KERNELS_MISSING))
    logging.getLogger(KERNELS_HUB_LOGGER).addFilter(_DropNotice(OFFLINE_TRUST))
