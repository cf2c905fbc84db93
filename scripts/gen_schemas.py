"""JSON Schemas of every file format aipc-env reads, writes or prints, generated from the pydantic models.

`python scripts/gen_schemas.py [FOLDER]` rewrites docs/schemas/ (a maintainer's tool, not shipped in the wheel); tests
fail when a committed schema drifts from its model, and when a VersionedModel of the package is missing here. This
tool imports every format; formats.py imports none.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel

__all__ = ["models", "schemas", "write_schemas"]


def models() -> dict[str, type[BaseModel]]:
    from aipc_env.commands.result import ErrorDocument, FilesWritten
    from aipc_env.container.build import ImageBuildReport, ImageCheckReport
    from aipc_env.container.render import ContextSpec
    from aipc_env.container.run import ContainerRunReport
    from aipc_env.dataset.validate import Verdict
    from aipc_env.distill.config import DistillConfig
    from aipc_env.distill.report import DistillReport
    from aipc_env.distill.trajectory_formats import TrajectoryIndex, TrajectoryMeta
    from aipc_env.distill.verdict import DistillRunResult, G3Manifest
    from aipc_env.distill.verdict import Verdict as DistillVerdict
    from aipc_env.doctor import CheckCatalog, DoctorReport
    from aipc_env.facts.model import Facts
    from aipc_env.fleet.bundle import BundleManifest
    from aipc_env.fleet.keygen import KeyPairReport
    from aipc_env.fleet.report import FleetReport
    from aipc_env.fleet.winget_check import WinGetCheckReport
    from aipc_env.fleet.winget_pins import WinGetPins
    from aipc_env.launch.plan import LaunchPlan
    from aipc_env.lock.artifacts import InstallPlanReport
    from aipc_env.lock.conda_layer import CondaSources
    from aipc_env.lock.lock import LockReport
    from aipc_env.lock.lockfile import LockCheckReport, LockMeta
    from aipc_env.lock.refresh import RefreshReport
    from aipc_env.lock.verify import LockVerifyReport, LockVerifyReports
    from aipc_env.lock.wheels import WheelManifest
    from aipc_env.matrix import Matrix
    from aipc_env.matrix.gpu_runtime import GpuRuntimeTable
    from aipc_env.matrix.resolve import ResolveReport, ToolkitReport
    from aipc_env.qflux.adapt import AdaptManifest
    from aipc_env.qflux.checker import AccelerateChoices
    from aipc_env.qflux.checker import CheckReport as AdaptCheckReport
    from aipc_env.qflux.patches import EditSet
    from aipc_env.qflux.smoke import SmokeResult
    from aipc_env.train.config import TrainConfig
    from aipc_env.train.memory_model import MemoryCoefficients
    from aipc_env.train.recommend import RecommendReport
    from aipc_env.train.report import TrainRunReport
    from aipc_env.train.results import CacheIndex, CompareManifest, FitSummary, MonitorReport, QuantizeResult
    from aipc_env.train.resume import CheckpointState
    from aipc_env.trainenv.build import EnvBuildReport
    from aipc_env.trainenv.drift import EnvCheckReport, Manifest
    from aipc_env.trainenv.record import EnvRecord, UsedEnvRecord, VerifyState
    from aipc_env.trainenv.requirements import RequirementsReport
    from aipc_env.verify.report import VerifyReport

    return {
        "error-document": ErrorDocument,
        "files-written": FilesWritten,
        "facts": Facts,
        "doctor-report": DoctorReport,
        "check-catalog": CheckCatalog,
        "matrix": Matrix,
        "resolve-report": ResolveReport,
        "toolkit-report": ToolkitReport,
        "train-config": TrainConfig,
        "launch-plan": LaunchPlan,
        "lock-meta": LockMeta,
        "lock-report": LockReport,
        "lock-check-report": LockCheckReport,
        "env-manifest": Manifest,
        "env-check-report": EnvCheckReport,
        "env-build-report": EnvBuildReport,
        "env-record": EnvRecord,
        "used-env-record": UsedEnvRecord,
        "verify-record": VerifyState,
        "verify-report": VerifyReport,
        "requirements-report": RequirementsReport,
        "recommendation": RecommendReport,
        "memory-coefficients": MemoryCoefficients,
        "dataset-verdict": Verdict,
        "cache-index": CacheIndex,
        "checkpoint-state": CheckpointState,
        "fit-summary": FitSummary,
        "train-run-report": TrainRunReport,
        "compare-manifest": CompareManifest,
        "monitor-report": MonitorReport,
        "quantize-result": QuantizeResult,
        "image-context-spec": ContextSpec,
        "image-build-report": ImageBuildReport,
        "image-check-report": ImageCheckReport,
        "container-run-report": ContainerRunReport,
        "bundle-manifest": BundleManifest,
        "fleet-report": FleetReport,
        "key-pair-report": KeyPairReport,
        "winget-check-report": WinGetCheckReport,
        "distill-config": DistillConfig,
        "distill-verdict": DistillVerdict,
        "trajectory-meta": TrajectoryMeta,
        "trajectory-index": TrajectoryIndex,
        "g3-manifest": G3Manifest,
        "adapt-manifest": AdaptManifest,
        "adapt-check-report": AdaptCheckReport,
        "accelerate-choices": AccelerateChoices,
        "smoke-result": SmokeResult,
        "qflux-edit-set": EditSet,
        "xpu-wheel-manifest": WheelManifest,
        "lock-verify-report": LockVerifyReport,
        "winget-pins": WinGetPins,
        "gpu-runtime-table": GpuRuntimeTable,
        "matrix-refresh-report": RefreshReport,
        "install-plan": InstallPlanReport,
        "lock-verify-reports": LockVerifyReports,
        "distill-run-result": DistillRunResult,
        "distill-report": DistillReport,
        "conda-layer-sources": CondaSources,
    }


def schemas() -> dict[str, dict[str, Any]]:
    return {name: model.model_json_schema() for name, model in models().items()}


def write_schemas(folder: Path) -> list[Path]:
    from aipc_env.core.fileio import write_json

    written = []
    for name, schema in schemas().items():
        path = folder / f"{name}.schema.json"
        write_json(path, schema, sort_keys=True)
        written.append(path)
    return written


if __name__ == "__main__":
    from aipc_env.paths import project_root

    for p in write_schemas(Path(sys.argv[1]) if len(sys.argv) > 1 else project_root() / "docs" / "schemas"):
        print(p)
