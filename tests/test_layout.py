"""The package's structure holds: the environment side never imports torch, only the process layer (and the
runner) import subprocess, no private name crosses modules, the wheel's package list is complete, and the launchers
are the templates in launchers/."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib

from tests.conftest import ROOT

SRC = ROOT / "src" / "aipc_env"
ENVIRONMENT_SIDE = ("aipc_env.cli", "aipc_env.commands", "aipc_env.facts", "aipc_env.doctor", "aipc_env.matrix",
                    "aipc_env.lock", "aipc_env.trainenv", "aipc_env.launch", "aipc_env.train.config",
                    "aipc_env.train.run", "aipc_env.train.recommend", "aipc_env.train.checkpoint",
                    "aipc_env.dataset", "aipc_env.schemas", "aipc_env.distill.config", "aipc_env.distill.prompts",
                    "aipc_env.distill.verdict", "aipc_env.distill.report", "aipc_env.distill.trajectories",
                    "aipc_env.distill.lessons", "aipc_env.qflux")


def _modules():
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC.parent).with_suffix("")
        name = ".".join(rel.parts).removesuffix(".__init__")
        yield name, path, ast.parse(path.read_text(encoding="utf-8"))


def test_environment_side_imports_no_torch():
    code = ("import importlib, pkgutil, sys, aipc_env\n"
            f"sides = {ENVIRONMENT_SIDE!r}\n"
            "for info in pkgutil.walk_packages(aipc_env.__path__, 'aipc_env.'):\n"
            "    if info.name.startswith(sides):\n"
            "        importlib.import_module(info.name)\n"
            "from aipc_env.cli import build_parser; build_parser()\n"
            "print(sorted(m for m in ('torch', 'diffusers', 'bitsandbytes', 'transformers') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_only_the_process_layer_imports_subprocess():
    users = set()
    for name, _, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.Import) and any(a.name == "subprocess" for a in node.names):
                users.add(name)
            if isinstance(node, ast.ImportFrom) and node.module == "subprocess":
                users.add(name)
    assert users == {"aipc_env.procs", "aipc_env.launch.runner"}


def test_no_private_name_crosses_modules():
    crossing = []
    for name, _, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("aipc_env"):
                crossing += [f"{name}: {node.module}.{a.name}" for a in node.names
                             if a.name.startswith("_") and not a.name.startswith("__")]
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
                    node.attr.startswith("_") and not node.attr.startswith("__") and node.value.id in (
                    "parse", "gather", "checks", "specs", "resolve", "select", "record"):
                crossing.append(f"{name}: {node.value.id}.{node.attr}")
    assert not crossing


def test_wheel_package_list_is_complete():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {name for name, path, _ in _modules() if path.name == "__init__.py"} | {"aipc_env.launchers",
                                                                                   "aipc_env.environments"}
    assert listed == found


def test_launchers_are_the_templates():
    from aipc_env.launch.render import TEMPLATES, template_text

    for name in TEMPLATES.values():
        assert template_text(name) == (ROOT / "launchers" / name).read_text(encoding="utf-8")
        assert "@AIPC_ENV_VERSION@" in template_text(name)
