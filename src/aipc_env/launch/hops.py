"""One protocol per process hop: what a worker takes, declared once as a frozen dataclass that the caller turns into
argv (`argv`) and the worker parses back (`parse`), and the one error handler every worker's main runs under
(`run_worker`). Standard library only: workers import it inside the training env.

A field `name` is the flag `--name` (underscores as dashes): a str, int, float or Path takes a value (None: left out), a
bool is a switch, a tuple of str repeats the flag. A field with `metadata={"choices": ...}` is checked."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, TypeVar

from aipc_env.errors import AipcError, ExitCode

__all__ = [
    "EXPORT_FORMATS",
    "AccelerateProbe",
    "CompareRun",
    "DistillExport",
    "DistillPublish",
    "DistillStages",
    "EnginePhase",
    "MonitorRun",
    "QuantizeRun",
    "SmokePrepare",
    "SmokeVerify",
    "TinyModel",
    "VerifySteps",
    "WorkerArgs",
    "error_file",
    "run_worker",
    "step_of",
]

W = TypeVar("W", bound="WorkerArgs")
EXPORT_FORMATS = ("comfyui",)
"""The layouts `distill export` writes (workers/distill/export.py)."""


@dataclass(frozen=True)
class WorkerArgs:
    MODULE: ClassVar[str]
    STEP: ClassVar[str | None] = None
    """A worker with several steps takes the step's name first."""

    @classmethod
    def _fields(cls) -> list[tuple[dataclasses.Field[object], object]]:
        hints = typing.get_type_hints(cls)
        return [(f, hints[f.name]) for f in dataclasses.fields(cls)]

    def args(self) -> list[str]:
        out = [self.STEP] if self.STEP else []
        for f, _hint in self._fields():
            value, flag = getattr(self, f.name), "--" + f.name.replace("_", "-")
            if value is None or value is False:
                continue
            if value is True:
                out.append(flag)
            elif isinstance(value, tuple):
                for item in value:
                    out += [flag, str(item)]
            else:
                out += [flag, str(Path(value).absolute()) if isinstance(value, Path) else str(value)]
        return out

    def argv(self, python: str, *runner: str) -> list[str]:
        """`python -m MODULE ...`, or `*runner MODULE ...` for a module runner (accelerate launch ... -m)."""
        return [*runner, self.MODULE, *self.args()] if runner else [python, "-m", self.MODULE, *self.args()]

    @classmethod
    def parse(cls, argv: list[str] | None = None) -> typing.Self:
        parser = argparse.ArgumentParser(prog=cls.MODULE)
        if cls.STEP:
            parser.add_argument("step", choices=[cls.STEP])
        for f, hint in cls._fields():
            flag = "--" + f.name.replace("_", "-")
            required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            choices = f.metadata.get("choices")
            if hint is bool:
                parser.add_argument(flag, dest=f.name, action="store_true")
            elif typing.get_origin(hint) is tuple:
                parser.add_argument(flag, dest=f.name, action="append", default=[], choices=choices)
            else:
                kind = next((t for t in (int, float, Path, str) if t is hint or t in typing.get_args(hint)), str)
                parser.add_argument(
                    flag, dest=f.name, type=kind, required=required, choices=choices, default=None if required else f.default
                )
        values = vars(parser.parse_args(argv))
        values.pop("step", None)
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in values.items()})


def step_of(argv: list[str] | None) -> str | None:
    """The step a multi-step worker was asked for (the first argument)."""
    args = sys.argv[1:] if argv is None else argv
    return args[0] if args else None


def error_file(result: Path) -> Path:
    """Where a worker started for a result writes its refusal instead (beside the result: `<stem>.error.json`)."""
    return result.with_name(result.stem + ".error.json")


def run_worker(what: str, body: Callable[[], int], *, result: Path | None = None) -> int:
    """A worker's main: its exit code; an AipcError is its message and exit code, Ctrl-C is INTERRUPTED (the runner
    says so in one line), anything else one line for the user with the traceback in the run's log. A worker that
    writes a `result` writes its AipcError to `error_file(result)` instead of printing it: the command that started
    it raises the same error (launch/worker_call.py), so the user sees it once, in text or as --json."""
    try:
        return int(body())
    except AipcError as exc:
        if result is not None:
            import json

            fields = {"message": exc.message, "path": exc.path, "key": exc.key, "fix": exc.fix, "exit_code": int(exc.exit_code)}
            error_file(result).write_text(json.dumps(fields), encoding="utf-8")
            return int(exc.exit_code)
        from aipc_env.core.terminal import visible

        print(visible(exc.render()), file=sys.stderr)
        return int(exc.exit_code)
    except KeyboardInterrupt:
        return ExitCode.INTERRUPTED
    except Exception as exc:  # noqa: BLE001 - one line for the user, the traceback into the run's log
        import traceback

        log = os.environ.get("AIPC_LOG_FILE")
        if log:
            with open(log, "a", encoding="utf-8") as fh:
                fh.write(traceback.format_exc())
        else:
            traceback.print_exc()
        print(
            f"aipc-env: internal error in {what}: {type(exc).__name__}: {exc}" + (f" (traceback in {log})" if log else ""),
            file=sys.stderr,
        )
        return ExitCode.INTERNAL


# --------------------------------------------------------------------------- the hops


@dataclass(frozen=True)
class EnginePhase(WorkerArgs):
    """The built-in engine's phase (workers/train/engine.py), started by train/run.py."""

    MODULE: ClassVar[str] = "aipc_env.workers.train.engine"
    phase: str = field(metadata={"choices": ("cache", "fit")})
    config: Path


@dataclass(frozen=True)
class TinyModel(WorkerArgs):
    """The tiny-model phase of `train CONFIG --model tiny` (workers/train/tinypipe.py): a tiny random Qwen-Image-Edit in
    the diffusers layout, built into `out`; started by train/run.py."""

    MODULE: ClassVar[str] = "aipc_env.workers.train.tinypipe"
    out: Path
    plus: bool = False


@dataclass(frozen=True)
class HeldOutPhase(WorkerArgs):
    """A run's judge phase (workers/heldout_phase.py), after the fit when the config has data.heldout; started by
    train/run.py."""

    MODULE: ClassVar[str] = "aipc_env.workers.heldout_phase"
    config: Path


@dataclass(frozen=True)
class VerifySteps(WorkerArgs):
    """verify's steps (workers/verify.py), started by commands/verify.py."""

    MODULE: ClassVar[str] = "aipc_env.workers.verify"
    out: Path | None = None
    steps: int = 200
    bnb_min: str | None = None
    device: str | None = None
    only: tuple[str, ...] = ()


@dataclass(frozen=True)
class DistillStages(WorkerArgs):
    """distill's stages (workers/distill/worker.py), started by commands/distill.py (train under accelerate launch)."""

    MODULE: ClassVar[str] = "aipc_env.workers.distill.worker"
    stages: str
    config: Path
    run_id: str | None = None
    inject: tuple[str, ...] = ()


@dataclass(frozen=True)
class DistillExport(WorkerArgs):
    MODULE: ClassVar[str] = "aipc_env.workers.distill.export"
    config: Path
    format: str = field(default="comfyui", metadata={"choices": EXPORT_FORMATS})
    out: Path | None = None
    repo: str | None = None


@dataclass(frozen=True)
class DistillPublish(WorkerArgs):
    MODULE: ClassVar[str] = "aipc_env.distill.publish"
    config: Path
    repo: str
    folder: Path | None = None
    endpoint: str | None = None
    public: bool = False


@dataclass(frozen=True)
class SmokePrepare(WorkerArgs):
    """The qflux smoke's first step (workers/qflux_smoke.py), started by qflux/smoke.py."""

    MODULE: ClassVar[str] = "aipc_env.workers.qflux_smoke"
    STEP: ClassVar[str | None] = "prepare"
    out: Path
    recommended: Path
    config: Path
    plus: bool = False


@dataclass(frozen=True)
class SmokeVerify(WorkerArgs):
    MODULE: ClassVar[str] = "aipc_env.workers.qflux_smoke"
    STEP: ClassVar[str | None] = "verify"
    run: Path
    clone: Path
    config: Path


@dataclass(frozen=True)
class CompareRun(WorkerArgs):
    """`aipc-env compare`'s worker (workers/compare.py), started by commands/compare.py; `result`: its manifest.
    The user's paths go as given (str), so the results name them as the user did; the worker runs in the same
    folder."""

    MODULE: ClassVar[str] = "aipc_env.workers.compare"
    model: Path
    lora: str
    test_set: str
    out: str
    result: Path
    margin: float
    num_inference_steps: int = 20
    seed: int = 0
    device: str = "auto"
    max_samples: int | None = None


@dataclass(frozen=True)
class QuantizeRun(WorkerArgs):
    """`aipc-env quantize`'s worker (workers/quantize.py), started by commands/quantize.py."""

    MODULE: ClassVar[str] = "aipc_env.workers.quantize"
    part: str = field(metadata={"choices": ("transformer", "text-encoder")})
    src: str
    dst: str
    result: Path
    device: str | None = None


@dataclass(frozen=True)
class MonitorRun(WorkerArgs):
    """The memory monitor (workers/monitor.py), started by commands/monitor.py (with a result) and by
    train/run.py beside a run's phases (without)."""

    MODULE: ClassVar[str] = "aipc_env.workers.monitor"
    out: str
    interval: float = 1.0
    duration: float | None = None
    pid: int | None = None
    device: str = field(default="auto", metadata={"choices": ("auto", "xpu", "cuda", "none")})
    result: Path | None = None


@dataclass(frozen=True)
class AccelerateProbe(WorkerArgs):
    """accelerate's enum values (workers/accelerate_choices.py), read for `aipc-env adapt`'s check."""

    MODULE: ClassVar[str] = "aipc_env.workers.accelerate_choices"
    result: Path
