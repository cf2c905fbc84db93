"""Doctor checks: each module registers pure checks (facts -> Finding) into checks.base.REGISTRY."""

from aipc_env.checks import gpu, model_dir, pythonenv, system, toolchain  # noqa: F401 - registration
from aipc_env.checks.base import REGISTRY, CheckContext, Finding, Status

__all__ = ["REGISTRY", "CheckContext", "Finding", "Status", "CATEGORIES"]

CATEGORIES = ("System", "Windows settings", "GPU", "Toolchain", "Training env", "Model")
