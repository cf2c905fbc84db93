"""The JSON results the training env's workers write and the environment side reads back: compare's manifest,
monitor's report, quantize's result, the cache index and the fit summary. Torch-free (commands/, the schemas and
`train` read them; workers/ writes them)."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import StringConstraints

from aipc_env.core.formats import StrictModel, VersionedModel
from aipc_env.train.verdict import LearningVerdict

__all__ = ["CacheIndex", "CompareManifest", "CompareSample", "FitSummary", "MonitorReport", "QuantizeResult"]


class CompareSample(StrictModel):
    id: str
    prompt: str | None
    seed: int
    size: list[int]
    files: dict[str, str]
    """base, lora and (when the sample has one) target image file names."""
    seconds: dict[str, float]
    base_vs_lora: float
    """Mean absolute pixel difference (0-255) between the base and LoRA images."""
    distance_to_target: dict[str, float] | None = None


class CompareManifest(VersionedModel):
    """<out>/manifest.json of `aipc-env compare`."""

    FORMAT: ClassVar[str] = "compare manifest"
    LEGACY_KEYS: ClassVar[dict[str, str]] = {"manifest_version": "schema_version"}
    schema_version: Literal[1] = 1
    model: str
    lora: str
    lora_rank: int
    lora_alpha: float
    num_inference_steps: int
    seed: int
    device: str
    samples: list[CompareSample]
    lora_changed_nothing: bool
    verdict: LearningVerdict | None = None
    """Base vs LoRA distance to the targets, judged against the margin (None: no sample has a target)."""


class MonitorReport(VersionedModel):
    """`aipc-env monitor --json`: what was sampled."""

    FORMAT: ClassVar[str] = "monitor report"
    schema_version: Literal[1] = 1
    samples: int
    csv: str
    plot: str | None


class QuantizeResult(VersionedModel):
    """`aipc-env quantize --json`."""

    FORMAT: ClassVar[str] = "quantize result"
    schema_version: Literal[1] = 1
    part: Literal["transformer", "text-encoder"]
    dst: str
    seconds: float
    size_bytes: int
    peak_rss_mb: float | None
    peak_device_mb: float | None
    method: str


class CacheIndex(VersionedModel):
    """<cache_dir>/index.json: the entries of one run's samples, in order."""

    FORMAT: ClassVar[str] = "cache index"
    FIX: ClassVar[str] = "run the cache phase again; it redoes only what is missing"
    schema_version: Literal[1] = 1
    keys: list[Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{32}$")]]
    """Entry file names (hashes): never a path out of the cache folder."""
    shapes: list[list[tuple[int, int, int]]] | None = None
    """Each entry's img_shapes (target, then each control), in `keys`' order: the fit's buckets."""
    buckets: dict[str, int] = {}
    """Samples per bucket (bucket_name of the shapes)."""
    control_pixels: int | None = None
    """The control area the entries were conditioned at."""


class FitSummary(VersionedModel):
    """<output_dir>/fit_summary.json."""

    FORMAT: ClassVar[str] = "fit summary"
    schema_version: Literal[1] = 1
    steps: int
    models_in_memory: list[str]
    lora: str
    final_smoothed_loss: float | None
    resumed_from: str | None
    heldout: LearningVerdict | None = None
    """Whether the LoRA learned the edit, on held-out samples (the built-in default; None where none were judged)."""
