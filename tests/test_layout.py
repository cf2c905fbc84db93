"""The package's structure holds: only the workers folder (aipc_env.workers, what runs inside the training env)
imports torch and the rest of the training stack, nothing outside it imports a worker, only the process layer (and the
runner) import subprocess, no private name crosses modules, the wheel's package list is complete, the built wheel
ships the launcher templates and data, and no test skips under CI=true."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib

from tests.conftest import ROOT

SRC = ROOT / "src" / "aipc_env"
WORKERS = "aipc_env.workers"
"""The one folder whose modules run inside the training env: only they may import the training stack."""
TRAINING_STACK = frozenset({"torch", "diffusers", "peft", "bitsandbytes", "accelerate", "transformers"})


def _modules():
    """Every module of the package. qflux/edits/created/*.py are payload files copied into the upstream clone (no
    __init__.py: data of qflux/patches, not aipc_env modules), so the package rules do not cover them."""
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC.parent).with_suffix("")
        if "edits" in rel.parts:
            continue
        name = ".".join(rel.parts).removesuffix(".__init__")
        yield name, path, ast.parse(path.read_text(encoding="utf-8"))


def imported_names(name: str, path, tree: ast.AST) -> set[str]:
    """Every module a module imports, anywhere in it (module level, in a function, under TYPE_CHECKING):
    `import x`, `from x import y` (relative ones resolved; y counted as x.y too) and `importlib.import_module("x")`
    or `__import__("x")` with a literal name."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join([*parts, base] if base else parts)
            found.add(base)
            found |= {f"{base}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if called in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                found.add(node.args[0].value)
    return found


def folder_rule_problems(modules) -> list[str]:
    """Outside aipc_env.workers: no import of the training stack, and no import of a worker."""
    problems = []
    for name, path, tree in modules:
        if name == WORKERS or name.startswith(WORKERS + "."):
            continue
        for target in sorted(imported_names(name, path, tree)):
            if target.split(".")[0] in TRAINING_STACK:
                problems.append(f"{name} imports {target}")
            elif target == WORKERS or target.startswith(WORKERS + "."):
                problems.append(f"{name} imports {target} (start it as a process: launch/hops.py)")
    return problems


def test_only_the_workers_folder_imports_the_training_stack():
    assert folder_rule_problems(_modules()) == []


def test_the_folder_rule_finds_every_kind_of_import(tmp_path):
    """The scan sees an import at module level, in a function, a from-import, a relative one into workers/ and an
    importlib string; a module inside workers/ may import them all."""
    body = (
        "import importlib\n"
        "import torch.nn\n"
        "def f():\n"
        "    from diffusers import QwenImagePipeline\n"
        "    importlib.import_module('peft')\n"
        "    __import__('bitsandbytes')\n"
        "from ..workers import compare\n"
        "from aipc_env.workers.train.fit import run_fit\n"
        "if False:\n"
        "    import accelerate, transformers\n"
    )
    pkg = tmp_path / "aipc_env" / "train"
    pkg.mkdir(parents=True)
    (pkg / "x.py").write_text(body, encoding="utf-8")
    tree = ast.parse(body)
    problems = folder_rule_problems([("aipc_env.train.x", pkg / "x.py", tree)])
    assert problems == [
        "aipc_env.train.x imports accelerate",
        "aipc_env.train.x imports aipc_env.workers (start it as a process: launch/hops.py)",
        "aipc_env.train.x imports aipc_env.workers.compare (start it as a process: launch/hops.py)",
        "aipc_env.train.x imports aipc_env.workers.train.fit (start it as a process: launch/hops.py)",
        "aipc_env.train.x imports aipc_env.workers.train.fit.run_fit (start it as a process: launch/hops.py)",
        "aipc_env.train.x imports bitsandbytes",
        "aipc_env.train.x imports diffusers",
        "aipc_env.train.x imports diffusers.QwenImagePipeline",
        "aipc_env.train.x imports peft",
        "aipc_env.train.x imports torch.nn",
        "aipc_env.train.x imports transformers",
    ]
    assert folder_rule_problems([("aipc_env.workers.x", pkg / "x.py", tree)]) == []


def test_no_module_outside_the_workers_folder_loads_the_training_stack():
    """By import, not by name: every module outside aipc_env.workers imported in a fresh interpreter (and the CLI's
    parser built) leaves none of the training stack in sys.modules."""
    names = [n for n, path, _ in _modules() if not (n == WORKERS or n.startswith(WORKERS + ".")) and path.name != "__main__.py"]
    code = (
        "import importlib, sys\n"
        f"for name in {names!r}:\n"
        "    importlib.import_module(name)\n"
        "from aipc_env.cli import build_parser; build_parser()\n"
        f"stack = {sorted(TRAINING_STACK)!r}\n"
        "print(len([m for m in sys.modules if m.startswith('aipc_env.')]))\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in stack or m.startswith('aipc_env.workers')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    count, loaded = out.stdout.strip().splitlines()[-2:]
    assert int(count) > 150  # every module outside the folder was imported
    assert loaded == "[]"


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
