"""The named errors of the distillation lessons (workers/distill/lessons.py runs the checks that raise them):
each `name` goes into the gate verdicts, which the environment side reads (distill/g3_verdict.py). Torch-free."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aipc_env.errors import AipcError, ExitCode


class LessonError(AipcError):
    """A violated distillation lesson. `name` is the stable identifier written into verdicts."""

    name = "lesson"
    seed_item: int | None = None
    exit_code = ExitCode.PROBLEMS
    metrics: dict[str, Any]
    """The stage's metrics so far, set where a stage stops on this error (unset otherwise)."""

    def __init__(self, message: str, *, fix: str | None = None, path: str | Path | None = None) -> None:
        super().__init__(f"[{self.name}] {message}", fix=fix, path=path)


class EmbeddingsAttachedToGraph(LessonError):
    name, seed_item = "embeddings-attached-to-graph", 1


class RgbaNotSliced(LessonError):
    name, seed_item = "rgba-not-sliced", 2


class LoraAfterPrepare(LessonError):
    name, seed_item = "lora-added-after-prepare", 5


class LoraMetadataMissing(LessonError):
    name, seed_item = "lora-metadata-missing", 6


class LoraAlphaLost(LessonError):
    name, seed_item = "lora-alpha-lost", 6


class SigmasNotVerbatim(LessonError):
    name, seed_item = "sigmas-not-verbatim", 7


class GridNotHonoured(LessonError):
    name, seed_item = "grid-not-honoured", 7


class ObjectiveRose(LessonError):
    name = "objective-rose"


class VelocityDiverged(LessonError):
    name = "velocity-diverged"


class StochasticSampler(LessonError):
    name = "stochastic-sampler"


class ParityBroken(LessonError):
    name = "sampler-parity-broken"


class TrainingDiverged(LessonError):
    name = "training-diverged"


class StudentNotBetter(LessonError):
    name = "student-not-better-than-naive"


class StudentWorseThanReference(LessonError):
    name = "student-worse-than-reference"
