"""JSON Schemas of every file format aipc-env reads or writes, generated from the pydantic models.

`python -m aipc_env.schemas` rewrites docs/schemas/; tests fail when a committed schema drifts from its model.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

__all__ = ["schemas", "write_schemas"]


def schemas() -> dict[str, dict]:
    from aipc_env.doctor import DoctorReport
    from aipc_env.facts.model import Facts
    from aipc_env.launch.plan import LaunchPlan
    from aipc_env.lock.drift import Manifest
    from aipc_env.lock.lockfile import LockMeta
    from aipc_env.matrix import Matrix
    from aipc_env.state import EnvRecord
    from aipc_env.train.config import TrainConfig
    from aipc_env.verify.report import VerifyReport

    models = {"facts": Facts, "doctor-report": DoctorReport, "matrix": Matrix, "train-config": TrainConfig,
              "launch-plan": LaunchPlan, "lock-meta": LockMeta, "env-manifest": Manifest, "env-record": EnvRecord,
              "verify-report": VerifyReport}
    return {name: model.model_json_schema() for name, model in models.items()}


def write_schemas(folder: Path) -> list[Path]:
    from aipc_env.fileio import atomic_write_text

    written = []
    for name, schema in schemas().items():
        path = folder / f"{name}.schema.json"
        atomic_write_text(path, json.dumps(schema, indent=2, sort_keys=True) + "\n")
        written.append(path)
    return written


if __name__ == "__main__":
    from aipc_env.paths import project_root

    for p in write_schemas(Path(sys.argv[1]) if len(sys.argv) > 1 else project_root() / "docs" / "schemas"):
        print(p)
