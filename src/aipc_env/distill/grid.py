"""The sigma grids of a distillation run. The teacher grid is the model's own `sample_sigmas` (model_index.json;
the real Turbo ships a non-uniform 8-step grid) unless the config gives one; without either it is the pipeline's
default linspace(1, 1/8). The student grid is every `student_stride`-th teacher sigma, so student step k jumps
from teacher sigma s*k to s*(k+1) (the last one lands on the terminal 0). Torch-free.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from aipc_env.core.formats import StrictModel
from aipc_env.errors import InputError

__all__ = ["Grid", "check_sigmas", "default_teacher_sigmas", "model_sample_sigmas", "resolve_grid", "student_grid"]

GridSource = Literal["config", "model sample_sigmas", "pipeline default linspace"]
_MAX_MODEL_INDEX = 1 << 20
MAX_SIGMAS = 1000
"""The longest teacher grid (a real one has 8; the recorded project's teachers at most a few dozen)."""


def _quote(values: Sequence[object]) -> str:
    """A list for a message: the first few values and how many there are."""
    shown = ", ".join(repr(v)[:20] for v in values[:4])
    return f"[{shown}{f', ... ({len(values)} values)' if len(values) > 4 else ''}]"


class Grid(StrictModel):
    """The grids a stage ran on; written into every verdict."""

    teacher: list[float]
    student: list[float]
    stride: int
    source: GridSource


def student_grid(teacher: list[float], stride: int) -> list[float]:
    """The student grid: every stride-th teacher sigma (4 of 8), so student step k lands where the teacher's step
    stride*(k+1) lands. The one formula (config.student_sigmas and resolve_grid ask here)."""
    return teacher[::stride]


def default_teacher_sigmas(steps: int = 8) -> list[float]:
    """The pipeline's own default grid for `steps` steps (np.linspace(1, 1/steps, steps)), as float32 values.
    Standard library only: the CLI env that writes configs has no numpy."""
    import struct

    step = (1 / steps - 1.0) / (steps - 1) if steps > 1 else 0.0
    grid = [1.0 + i * step for i in range(steps - 1)] + [1 / steps]  # numpy.linspace's arithmetic, no numpy here
    return [struct.unpack("f", struct.pack("f", x))[0] for x in grid]  # as float32


def check_sigmas(value: list[float], stride: int) -> str | None:
    """Why `value` is not a usable teacher grid for `stride`, or None."""
    if len(value) < 2:
        return "a grid needs at least 2 sigmas"
    if len(value) > MAX_SIGMAS:
        return f"{len(value)} sigmas: a teacher grid has at most {MAX_SIGMAS}"
    if any(isinstance(s, bool) or not isinstance(s, int | float) for s in value):
        return "sigmas must be numbers"
    if any(not 0 < s <= 1 for s in value) or any(a <= b for a, b in itertools.pairwise(value)):
        return "sigmas must fall strictly, within (0, 1] (the terminal 0 is added by the scheduler)"
    if len(value) % stride:
        return f"{len(value)} sigmas is not a multiple of student_stride {stride}"
    return None


def model_sample_sigmas(model: Path) -> list[float] | None:
    """The `sample_sigmas` of a diffusers model folder's model_index.json, or None when it configures none."""
    from aipc_env.core.fileio import parse_json, read_text

    index = Path(model) / "model_index.json"
    try:  # bounded from the stream, depth- and number-bounded: one reader for every user file
        data = parse_json(read_text(index, "model_index.json", max_bytes=_MAX_MODEL_INDEX), index, "model_index.json")
    except InputError as exc:
        raise InputError(
            exc.message, path=index, fix="point model at a diffusers model folder with its model_index.json"
        ) from None
    sigmas = data.get("sample_sigmas") if isinstance(data, dict) else None
    if sigmas is None:
        return None
    if not isinstance(sigmas, list):
        raise InputError(
            f"sample_sigmas is {type(sigmas).__name__}, not a list",
            path=index,
            key="sample_sigmas",
            fix="restore the model's model_index.json, or set teacher_sigmas in the config",
        )
    return sigmas


def resolve_grid(teacher_sigmas: list[float] | None, stride: int, model: Path) -> Grid:
    """The run's grids: the config's teacher grid when it sets one, else the model's sample_sigmas, else the
    pipeline's default linspace."""
    source: GridSource
    if teacher_sigmas is not None:
        teacher, source = list(teacher_sigmas), "config"
    elif (sampled := model_sample_sigmas(model)) is not None:
        problem = check_sigmas(sampled, stride)
        if problem:
            raise InputError(
                f"its sample_sigmas {_quote(sampled)} cannot be the teacher grid: {problem}",
                path=Path(model) / "model_index.json",
                key="sample_sigmas",
                fix="set teacher_sigmas (and student_stride) in the distillation config",
            )
        teacher, source = [float(s) for s in sampled], "model sample_sigmas"
    else:
        teacher, source = default_teacher_sigmas(8), "pipeline default linspace"
    return Grid(teacher=teacher, student=student_grid(teacher, stride), stride=stride, source=source)
