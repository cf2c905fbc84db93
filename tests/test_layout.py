"""The package's structure holds: the environment side never imports torch, only the process layer (and the
runner) import subprocess, no private name crosses modules, the wheel's package list is complete, the built wheel
ships the launcher templates and data, and no test skips under CI=true."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib

from tests.conftest import ROOT

SRC = ROOT / "src" / "aipc_env"
ENVIRONMENT_SIDE = (
    "aipc_env.cli",
    "aipc_env.commands",
    "aipc_env.facts",
    "aipc_env.doctor",
    "aipc_env.matrix",
    "aipc_env.lock",
    "aipc_env.trainenv",
    "aipc_env.launch",
    "aipc_env.train.config",
    "aipc_env.train.run",
    "aipc_env.train.recommend",
    "aipc_env.train.checkpoint",
    "aipc_env.dataset",
    "aipc_env.distill.config",
    "aipc_env.distill.prompts",
    "aipc_env.distill.verdict",
    "aipc_env.distill.report",
    "aipc_env.distill.trajectories",
    "aipc_env.distill.lessons",
    "aipc_env.qflux",
)


def _modules():
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC.parent).with_suffix("")
        name = ".".join(rel.parts).removesuffix(".__init__")
        yield name, path, ast.parse(path.read_text(encoding="utf-8"))


def test_environment_side_imports_no_torch():
    code = (
        "import importlib, pkgutil, sys, aipc_env\n"
        f"sides = {ENVIRONMENT_SIDE!r}\n"
        "for info in pkgutil.walk_packages(aipc_env.__path__, 'aipc_env.'):\n"
        "    if info.name.startswith(sides):\n"
        "        importlib.import_module(info.name)\n"
        "from aipc_env.cli import build_parser; build_parser()\n"
        "print(sorted(m for m in ('torch', 'diffusers', 'bitsandbytes', 'transformers') if m in sys.modules))\n"
    )
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
    assert users == {"aipc_env.core.procs", "aipc_env.launch.runner"}


def test_no_private_name_crosses_modules():
    crossing = []
    for name, _, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("aipc_env"):
                crossing += [
                    f"{name}: {node.module}.{a.name}"
                    for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")
                ]
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and node.value.id in ("parse", "gather", "checks", "specs", "resolve", "select", "record")
            ):
                crossing.append(f"{name}: {node.value.id}.{node.attr}")
    assert not crossing


def test_wheel_package_list_is_complete():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {name for name, path, _ in _modules() if path.name == "__init__.py"} | {
        "aipc_env.launchers",
        "aipc_env.environments",
        "aipc_env.lockfiles",
    }
    assert listed == found


def test_the_built_wheel_ships_the_launcher_templates_and_the_data(tmp_path):
    """pip builds the wheel from a copy of the checkout's sources (setuptools writes build/ beside them); each
    launcher template, each environments/ data file and each shipped lock is read out of the zip and must equal
    the checkout's."""
    import shutil
    import zipfile

    from aipc_env.launch.render import TEMPLATES

    src = tmp_path / "src tree"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for folder in ("src", "launchers", "environments", "lockfiles"):
        shutil.copytree(ROOT / folder, src / folder, ignore=ignore)
    out = tmp_path / "wheels"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(src)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = out.glob("aipc_env-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        assert set(TEMPLATES.values()) and all(f"aipc_env/launchers/{n}" in names for n in TEMPLATES.values())
        for name in TEMPLATES.values():
            shipped = archive.read(f"aipc_env/launchers/{name}").decode("utf-8")
            assert shipped == (ROOT / "launchers" / name).read_text(encoding="utf-8"), name
            assert "@AIPC_ENV_VERSION@" in shipped
        for data in sorted((ROOT / "environments").glob("*.yaml")):
            assert archive.read(f"aipc_env/environments/{data.name}") == data.read_bytes(), data.name
        locks = sorted(p for p in (ROOT / "lockfiles").rglob("*") if p.is_file())
        assert len(locks) >= 13  # README.md and, per pair, lock-meta.json and two pylocks
        for lock in locks:
            name = f"aipc_env/lockfiles/{lock.relative_to(ROOT / 'lockfiles').as_posix()}"
            assert archive.read(name) == lock.read_bytes(), name
        package = ROOT / "src" / "aipc_env"  # every template and script file beside the code that renders it
        shipped_files = sorted(
            p
            for folder in ("templates", "scripts")
            for p in package.rglob(f"{folder}/*")
            if p.is_file() and "__pycache__" not in p.parts
        )
        assert len(shipped_files) >= 20
        for path in shipped_files:
            name = f"aipc_env/{path.relative_to(package).as_posix()}"
            assert archive.read(name) == path.read_bytes(), name


def test_no_test_skips_under_ci():
    """A test may skip only through conftest.require_tool (which fails under CI=true) or on a platform
    condition (skipif on sys.platform); never a bare pytest.skip, importorskip or an unconditional mark."""
    offenders = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        if path.name == "conftest.py" and path.parent == ROOT / "tests":
            continue  # require_tool lives there
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Attribute) or not isinstance(node.value, (ast.Name, ast.Attribute)):
                continue
            owner = node.value.id if isinstance(node.value, ast.Name) else node.value.attr
            where = f"{path.relative_to(ROOT)}:{node.lineno}"
            if owner == "pytest" and node.attr in ("skip", "importorskip", "xfail"):
                offenders.append(f"{where}: pytest.{node.attr}")
            elif owner == "mark" and node.attr in ("skip", "xfail"):
                offenders.append(f"{where}: mark.{node.attr}")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "skipif":
                condition = ast.unparse(node.args[0]) if node.args else ""
                if "sys.platform" not in condition:
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}: skipif({condition})")
    assert not offenders, offenders
