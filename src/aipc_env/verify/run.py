"""`aipc-env verify` as one function: the verification worker run in the training env through the run service
(oneAPI / MSVC activated as for training), its result read back as a report and recorded for the doctor."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from aipc_env.verify.report import VerifyReport

__all__ = ["VerifyRequest", "read_verify_result", "run_verify"]


@dataclass(frozen=True)
class VerifyRequest:
    steps: int
    device: str | None = None
    env_flag: Path | None = None
    pair_flag: str | None = None
    matrix_path: Path | None = None
    stdout: TextIO | None = None
    """Where the worker's own output goes (None: stdout)."""
    say: Callable[[str], None] | None = None


def read_verify_result(path: Path, *, pair: str | None, env_prefix: str) -> VerifyReport:
    """The worker's result.json as a report (a file another process wrote: read as hostile input)."""
    from pydantic import ValidationError

    from aipc_env.core.fileio import read_json
    from aipc_env.errors import InputError, validation_message

    raw = read_json(path, "verification result")
    if not isinstance(raw, dict):
        raise InputError("the verification result is not a JSON object", path=path, fix="read the run's log")
    try:
        return VerifyReport.model_validate({**raw, "pair": pair, "env_prefix": env_prefix})
    except ValidationError as exc:
        raise validation_message(exc, path, fix="read the run's log; the worker and this aipc-env may differ") from None


def run_verify(req: VerifyRequest) -> VerifyReport:
    """Run the steps; the report (passed or not) is recorded for the doctor. A worker that wrote no result, or a
    result that is not a verification result, is a named error."""
    from aipc_env.core.formats import timestamp
    from aipc_env.errors import AipcError, ExitCode
    from aipc_env.facts.model import VerifyRecord
    from aipc_env.launch.hops import VerifySteps
    from aipc_env.launch.plan import Phase
    from aipc_env.launch.service import Chosen, RunRequest, start_run
    from aipc_env.paths import cache_dir
    from aipc_env.trainenv.record import write_verify_record

    run_dir = cache_dir() / "verify" / _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    result = run_dir / "result.json"

    def phases(chosen: Chosen) -> list[Phase]:
        pair = chosen.pair.pair
        steps = VerifySteps(out=result, steps=req.steps, device=req.device, bnb_min=pair.bitsandbytes_min if pair else None)
        return [Phase(name="verify", argv=steps.argv(chosen.python))]

    outcome = start_run(
        RunRequest(
            command="verify",
            run_dir=run_dir,
            log_file=run_dir / "verify.log",
            phases=phases,
            env_flag=req.env_flag,
            pair_flag=req.pair_flag,
            matrix_path=req.matrix_path,
            device=req.device,
            stdout=req.stdout,
            say=req.say,
        )
    )
    if not result.is_file():
        raise AipcError(
            f"the verification worker ended with exit code {outcome.exit_code} and wrote no result",
            path=outcome.plan.log_file,
            fix="read the log; check that torch imports in the training env",
            exit_code=ExitCode.PROBLEMS,
        )
    pair = outcome.pair.pair
    report = read_verify_result(result, pair=pair.id if pair else None, env_prefix=str(outcome.env.prefix))
    write_verify_record(
        VerifyRecord(
            when=timestamp(),
            passed=report.passed,
            device=report.device,
            env_prefix=str(outcome.env.prefix),
            summary=report.summary,
            injected=report.inject,
        )
    )
    return report
