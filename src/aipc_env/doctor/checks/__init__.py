"""Doctor checks: pure functions of the facts (and the matrix), declared with `check(...)` in one module per area.
The registry is built here, explicitly, from those modules: importing a module registers nothing."""

from aipc_env.doctor.checks import container, gpu, model_dir, pythonenv, system, toolchain
from aipc_env.doctor.checks.base import CheckContext, CheckSpec, Finding, Status, specs_of

__all__ = ["CATEGORIES", "REGISTRY", "CheckContext", "CheckSpec", "Finding", "Status"]

CATEGORIES = ("System", "Windows settings", "Container", "GPU", "Toolchain", "Training env", "Model")
_MODULES = (system, container, gpu, toolchain, pythonenv, model_dir)


def _build() -> dict[str, CheckSpec]:
    registry: dict[str, CheckSpec] = {}
    for module in _MODULES:
        for spec in specs_of(module):
            if spec.id in registry:
                raise RuntimeError(f"duplicate check id {spec.id}")
            if spec.category not in CATEGORIES:
                raise RuntimeError(f"check {spec.id}: unknown category {spec.category}")
            registry[spec.id] = spec
    return registry


REGISTRY: dict[str, CheckSpec] = _build()
