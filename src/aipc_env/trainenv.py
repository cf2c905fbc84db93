"""Which training env a command uses (--env, the recorded one, or this interpreter) and its pair."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from aipc_env.errors import InputError
from aipc_env.matrix import Matrix, Pair
from aipc_env.platforms import current_platform

__all__ = ["TrainingEnvChoice", "choose_training_env"]


@dataclass(frozen=True)
class TrainingEnvChoice:
    prefix: Path
    python: Path
    source: str
    pair: Pair | None


def choose_training_env(matrix: Matrix, env: Path | None = None, pair_id: str | None = None) -> TrainingEnvChoice:
    """--env wins, then the env recorded by `aipc-env env`, then this interpreter. The pair: --pair, the recorded
    one, else resolved from the env's installed packages (None for a CPU/CUDA env)."""
    from aipc_env.facts.gather import GatherOptions, _training_env
    from aipc_env.resolve import resolve_pair
    from aipc_env.state import read_env_record

    record = read_env_record()
    if env is not None:
        prefix, source = env, "flag"
    elif record is not None:
        prefix, source = Path(record.prefix), "state"
    else:
        prefix, source = Path(sys.prefix), "current"
    if source == "current":
        python = Path(sys.executable)
    else:
        from aipc_env.facts.gather import env_python

        python = env_python(prefix)
        if not python.is_file():
            raise InputError(f"no Python interpreter in the training env {prefix}", key="--env",
                             fix="build the env with `nox -s env`, or pass --env PREFIX of an existing env")
    pair = matrix.get(pair_id) if pair_id else None
    if pair is None and record is not None and source == "state" and record.pair:
        pair = matrix.by_id.get(record.pair)
    if pair is None:
        facts_env = _training_env(GatherOptions(env_prefix=None if source == "current" else prefix), 30.0)
        res = resolve_pair(facts_env.distributions, matrix, current_platform())
        pair = matrix.by_id.get(res.pair) if res.pair else None
    return TrainingEnvChoice(prefix=prefix, python=python, source=source, pair=pair)
