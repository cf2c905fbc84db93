"""One worker run in the training env, its result read back: how a command that needs torch (compare, quantize,
monitor) does its work without importing it. The env is the one `train` would use (trainenv.situation.the_env),
the worker is a hop (launch/hops.py) started with that env's interpreter and this aipc-env on its PYTHONPATH, its
output lines go to the command's progress channel, and its result file (a pydantic model) is read with the one
reader (core/formats.load_versioned). A refusal it wrote is raised here as the same error; a worker that ends
without a result is a named error."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from aipc_env.core.formats import StrictModel, VersionedModel, load_versioned
from aipc_env.errors import AipcError, ExitCode
from aipc_env.launch.hops import WorkerArgs, error_file

__all__ = ["WorkerRefusal", "call_worker", "read_refusal", "worker_env"]

M = TypeVar("M", bound=VersionedModel)


class WorkerRefusal(StrictModel):
    """`<result stem>.error.json`: the AipcError a worker raised (launch.hops.run_worker writes it)."""

    message: str
    path: str | None = None
    key: str | None = None
    fix: str | None = None
    exit_code: int


def read_refusal(path: Path) -> AipcError:
    """The error a worker wrote, as the error it raised (a file another process wrote: read as hostile input)."""
    from pydantic import ValidationError

    from aipc_env.core.fileio import read_json
    from aipc_env.errors import InputError, validation_message

    raw = read_json(path, "worker error")
    if not isinstance(raw, dict):
        raise InputError("the worker's error file is not a JSON object", path=path, fix="run the command again")
    try:
        refusal = WorkerRefusal.model_validate(raw)
    except ValidationError as exc:
        raise validation_message(exc, path, fix="run the command again; the worker and this aipc-env may differ") from None
    codes = {int(c) for c in ExitCode} - {ExitCode.OK}  # a refusal never exits 0
    return AipcError(
        refusal.message,
        path=refusal.path,
        key=refusal.key,
        fix=refusal.fix,
        exit_code=refusal.exit_code if refusal.exit_code in codes else ExitCode.PROBLEMS,
    )


def worker_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment a worker starts with: this one, with this aipc-env first on PYTHONPATH and UTF-8 I/O."""
    from aipc_env.paths import package_root

    env = dict(os.environ if environ is None else environ)
    env.pop("PYTHONHOME", None)
    env["PYTHONPATH"] = os.pathsep.join([str(package_root()), *filter(None, [env.get("PYTHONPATH")])])
    env["PYTHONUTF8"], env["PYTHONIOENCODING"] = "1", "utf-8"
    return env


def call_worker(
    hop: Callable[[Path], WorkerArgs],
    model: type[M],
    *,
    what: str,
    say: Callable[[str], object],
    env_flag: Path | None = None,
) -> M:
    """Run the worker `hop(result_path)` in the training env and return its result."""
    from aipc_env.core.procs import run_lines
    from aipc_env.trainenv.situation import the_env

    chosen = the_env(env_flag)
    with tempfile.TemporaryDirectory(prefix="aipc-env-worker-") as tmp:
        result = Path(tmp) / "result.json"
        argv = hop(result).argv(str(chosen.python))
        try:
            code = run_lines(argv, env=worker_env(), on_line=say)
        except OSError as exc:
            raise AipcError(
                f"cannot start the {what} worker with {chosen.python}: {exc.strerror or exc}",
                path=chosen.python,
                fix="check the training env (aipc-env doctor)",
                exit_code=ExitCode.CANNOT_START,
            ) from None
        if code == ExitCode.INTERRUPTED:
            raise KeyboardInterrupt
        if error_file(result).is_file():
            raise read_refusal(error_file(result))
        if code != ExitCode.OK or not result.is_file():
            raise AipcError(
                f"the {what} worker ({chosen.python}) ended with exit code {code} and wrote no result",
                fix="read its output above; check that torch imports in the training env (aipc-env doctor)",
                exit_code=ExitCode.INTERNAL if code == ExitCode.INTERNAL else ExitCode.PROBLEMS,
            )
        return load_versioned(model, result)
