"""The maintainer tools in scripts/ (not in the package, so not importable by name): loaded from their files."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from tests.conftest import ROOT


def load_script(name: str) -> ModuleType:
    """scripts/<name>.py as a module (cached in sys.modules under its name)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
