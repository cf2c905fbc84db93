"""The teacher trajectories' file formats: each trajectory's metadata and the index of a run's trajectories.
Torch-free (the schemas and the stage inputs read them); workers/distill/trajectories.py writes and reads the
tensors."""

from __future__ import annotations

from typing import ClassVar, Literal

from aipc_env.core.formats import StrictModel, VersionedModel

INDEX = "index.json"


META_KEY = "aipc_trajectory"


class TrajectoryMeta(VersionedModel):
    FORMAT: ClassVar[str] = "trajectory"
    FIX: ClassVar[str] = "run `aipc-env distill trajectories` again; it redoes unreadable files"
    schema_version: Literal[1] = 1
    key: str
    prompt: str
    seed: int
    model_key: str
    height: int
    width: int
    use_kv_cache: bool
    dtype: str
    passed_sigmas: list[float]


class IndexEntry(StrictModel):
    key: str
    prompt: str
    seed: int


class TrajectoryIndex(VersionedModel):
    """<output_dir>/trajectories/index.json: the trajectories of the config's training prompts, in order."""

    FORMAT: ClassVar[str] = "trajectory index"
    FIX: ClassVar[str] = "run `aipc-env distill trajectories` first"
    schema_version: Literal[1] = 1
    model_key: str
    teacher_sigmas: list[float]
    height: int
    width: int
    entries: list[IndexEntry]
