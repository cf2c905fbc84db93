"""Structure facts (issue 35), read from the code's own imports (every import: module level, inside functions and
under TYPE_CHECKING): no import cycle between modules or between rooms; no import from a lower floor to a higher one
(the CLI reaches the commands by name, not by import); every room of the package is on the map; `choose_pair` is
called from one place with one argument shape. The map is FLOORS below; docs/architecture.md draws the same."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

from tests.conftest import ROOT

SRC = ROOT / "src" / "aipc_env"

# floor -> rooms (a room: a subpackage, or a module at the package root). A room imports from lower floors only.
FLOORS: dict[int, tuple[str, ...]] = {
    0: ("aipc_env", "errors", "paths", "core"),
    1: ("dataset", "matrix"),
    2: ("lock",),
    3: ("facts",),
    4: ("trainenv",),
    5: ("doctor", "container", "launch"),
    6: ("fleet", "train"),
    7: ("verify", "distill"),
    8: ("qflux",),
    9: ("workers",),
    10: ("commands",),
    11: ("cli",),
    12: ("__main__",),
}
BASE = FLOORS[0]  # the ground floor's modules may import each other (their module graph stays acyclic)


def _modules(src: Path) -> dict[str, Path]:
    mods = {}
    for path in src.rglob("*.py"):
        rel = path.relative_to(src.parent).with_suffix("")
        if "edits" in rel.parts:  # another project's code, applied to a clone
            continue
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        mods[".".join(parts)] = path
    return mods


def import_graph(src: Path) -> dict[str, set[str]]:
    """module -> the package's modules it imports (a `from X import name` of a submodule counts as that module)."""
    mods = _modules(src)
    graph: dict[str, set[str]] = defaultdict(set)
    for mod, path in mods.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(parts + ([node.module] if node.module else []))
                targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
            else:
                continue
            graph[mod] |= {t for t in targets if t in mods and t != mod}
    return graph


def room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found = []
    for start in sorted(set(graph) | {t for ts in graph.values() for t in ts}):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def floor_problems(graph: dict[str, set[str]], floors: dict[int, tuple[str, ...]]) -> list[str]:
    floor_of = {r: f for f, rooms in floors.items() for r in rooms}
    problems = [f"{m}: room {room(m)!r} is on no floor" for m in sorted(graph) if room(m) not in floor_of]
    for mod, targets in sorted(graph.items()):
        a = room(mod)
        for target in sorted(targets):
            b = room(target)
            if a == b or a not in floor_of or b not in floor_of:
                continue
            if floor_of[a] < floor_of[b] or (floor_of[a] == floor_of[b] and a not in BASE):
                problems.append(f"{mod} (floor {floor_of[a]}) imports {target} (floor {floor_of[b]})")
    return problems


def test_no_import_cycle_between_modules_or_rooms():
    graph = import_graph(SRC)
    assert cycles(graph) == []
    rooms: dict[str, set[str]] = defaultdict(set)
    for mod, targets in graph.items():
        rooms[room(mod)] |= {room(t) for t in targets} - {room(mod)}
    assert cycles(rooms) == []


def test_every_import_goes_down_and_every_room_is_on_the_map():
    graph = import_graph(SRC)
    for mod in _modules(SRC):
        graph.setdefault(mod, set())
    assert floor_problems(graph, FLOORS) == []
    mapped = {r for rooms in FLOORS.values() for r in rooms}
    assert mapped == {room(m) for m in _modules(SRC)}, "a room on the map that the package lacks, or the reverse"


ROOT_MODULES = {"__init__", "__main__", "cli", "errors", "paths"}
"""The package root holds the CLI, the errors and the paths; every other module lives in the room it serves."""


def test_the_package_root_holds_only_the_cli_errors_and_paths():
    loose = {p.stem for p in SRC.glob("*.py")}
    assert loose == ROOT_MODULES, f"move {sorted(loose - ROOT_MODULES)} into the room it serves (core/ serves all)"


def test_the_scans_find_a_cycle_an_up_arrow_and_a_room_off_the_map(tmp_path):
    pkg = tmp_path / "aipc_env"
    for rel, text in {
        "__init__.py": "",
        "errors.py": "from aipc_env.paths import x\n",
        "paths.py": "def f():\n    from aipc_env import errors\n",
        "lock/__init__.py": "",
        "lock/a.py": "from aipc_env.facts.b import y\n",
        "facts/__init__.py": "",
        "facts/b.py": "from ..lock import a\n",
        "matrix/__init__.py": "",
        "matrix/m.py": "from aipc_env.lock import a\n",
        "newroom.py": "import aipc_env.errors\n",
    }.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    graph = import_graph(pkg)
    assert cycles(graph) == [["aipc_env.errors", "aipc_env.paths"], ["aipc_env.facts.b", "aipc_env.lock.a"]]
    problems = floor_problems(graph, FLOORS)
    assert "aipc_env.lock.a (floor 2) imports aipc_env.facts.b (floor 3)" in problems
    assert "aipc_env.matrix.m (floor 1) imports aipc_env.lock.a (floor 2)" in problems
    assert "aipc_env.facts.b (floor 3) imports aipc_env.lock.a (floor 2)" not in problems
    assert "aipc_env.newroom: room 'newroom' is on no floor" in problems
    same = floor_problems({"aipc_env.doctor.x": {"aipc_env.launch.y"}, "aipc_env.launch.y": set()}, FLOORS)
    assert same == ["aipc_env.doctor.x (floor 5) imports aipc_env.launch.y (floor 5)"]


def _choose_pair_calls(src: Path) -> list[tuple[str, str, int, int]]:
    calls = []
    for mod, path in _modules(src).items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for func in [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]:
            for node in ast.walk(func):
                if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "choose_pair":
                    calls.append((mod, func.name, len(node.args), len(node.keywords)))
    return calls


def test_choose_pair_is_called_from_one_place_with_one_shape():
    assert _choose_pair_calls(SRC) == [("aipc_env.trainenv.select", "decide", 2, 0)]


@pytest.mark.parametrize(
    "body", ["def f(s):\n    return choose_pair(s, 'run')\n", "def g(m):\n    return choose_pair(m, 'win-64', fallback=True)\n"]
)
def test_the_call_scan_sees_a_second_caller(tmp_path, body):
    pkg = tmp_path / "aipc_env"
    (pkg / "trainenv").mkdir(parents=True)
    (pkg / "trainenv" / "select.py").write_text("def decide(s, p):\n    return choose_pair(s, p)\n")
    (pkg / "other.py").write_text(body)
    assert len(_choose_pair_calls(pkg)) == 2


def _json_printers(src: Path) -> list[str]:
    """Places in command modules that print JSON or ask whether --json was given (the renderer does both)."""
    found = []
    for path in sorted((src / "commands").glob("*.py")):
        if path.name == "result.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            name = None
            if isinstance(node, ast.Attribute) and node.attr == "json" and getattr(node.value, "id", "") == "args":
                name = "args.json"
            elif isinstance(node, ast.Call):
                func = node.func
                called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
                if called in ("dumps", "dump", "model_dump_json", "print_json"):
                    name = called
            if name:
                found.append(f"{path.name}:{node.lineno}: {name}")
    return found


def test_no_command_prints_json_or_asks_for_it():
    assert _json_printers(SRC) == []


def test_the_json_scan_finds_a_command_that_prints_json(tmp_path):
    (tmp_path / "commands").mkdir()
    (tmp_path / "commands" / "x.py").write_text("import json\ndef run(args):\n    if args.json:\n        print(json.dumps({}))\n")
    assert _json_printers(tmp_path) == ["x.py:3: args.json", "x.py:4: dumps"]


CODE_IN_STRINGS = re.compile(
    r"(?i:<(?:!DOCTYPE|html|table|tr|td|th|div|svg|rect|script|style|select|option)\b)"  # HTML
    r"|^#!/|(?:^|\n)\s*set -e"  # shell
    r"|\$ErrorActionPreference|Write-(?:Error|Warning)|Get-(?:ChildItem|CimInstance)|(?:Join|Test)-Path"
    r"|(?:ForEach|Where)-Object|\bparam\(\["  # PowerShell
    r"|(?:^|\n)\s*(?:RUN|FROM|COPY|ENTRYPOINT) "  # Containerfile
    r"|(?:^|\n)\s*- name: |(?:^|\n)\s*hosts: |\{\{ *[a-z_]+ *\}\}"
)  # Ansible YAML


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            for i, stmt in enumerate(body):  # the docstring, and attribute docstrings after assignments
                if (
                    isinstance(stmt, ast.Expr)
                    and isinstance(stmt.value, ast.Constant)
                    and (i == 0 or isinstance(body[i - 1], (ast.Assign, ast.AnnAssign)))
                ):
                    ids.add(id(stmt.value))
    return ids


def code_in_strings(src: Path) -> list[str]:
    """String literals in the package (not docstrings) that hold shell, PowerShell, HTML, Containerfile or Ansible
    code: such text lives in template files."""
    found = []
    for mod, path in sorted(_modules(src).items()):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = _docstrings(tree)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in skip
                and CODE_IN_STRINGS.search(node.value)
            ):
                found.append(f"{mod}:{node.lineno}")
    return found


def test_no_shell_powershell_html_or_yaml_in_python_strings():
    assert code_in_strings(SRC) == []


@pytest.mark.parametrize(
    "text",
    [
        '"<td>{x}</td>"',
        '"#!/bin/sh\\nset -eu\\n"',
        '"$ErrorActionPreference = 1"',
        '"(Test-Path (Join-Path $root x))"',
        '"FROM x\\nRUN y"',
        '"- name: x\\n  hosts: all"',
        'f"<tr>{a}"',
    ],
)
def test_the_code_scan_finds_each_language(tmp_path, text):
    pkg = tmp_path / "aipc_env"
    pkg.mkdir()
    (pkg / "m.py").write_text(f'"""A docstring may say <td> or #!/bin/sh."""\nX = {text}\n')
    assert code_in_strings(pkg) == ["aipc_env.m:2"]


def test_each_hop_round_trips_through_its_argv(tmp_path):
    """What a caller writes, the worker reads back as the same spec (one declaration per hop)."""
    from aipc_env.launch import hops

    cases = [
        hops.EnginePhase(phase="fit", config=tmp_path / "c d.yaml"),
        hops.HeldOutPhase(config=tmp_path / "c d.yaml"),
        hops.VerifySteps(out=tmp_path / "r.json", steps=7, bnb_min="0.50.2", only=("adam8bit", "device")),
        hops.VerifySteps(),
        hops.DistillStages(stages="g0,g2", config=tmp_path / "c.yaml", run_id="r1", inject=("rgba", "x y")),
        hops.DistillExport(config=tmp_path / "c.yaml", out=tmp_path / "o.safetensors", repo="me/m"),
        hops.DistillPublish(config=tmp_path / "c.yaml", repo="me/m", public=True),
        hops.SmokePrepare(out=tmp_path, recommended=tmp_path / "r.yaml", config=tmp_path / "c.yaml", plus=True),
        hops.SmokeVerify(run=tmp_path, clone=tmp_path / "clone", config=tmp_path / "c.yaml"),
    ]
    for spec in cases:
        argv = spec.argv("py")
        assert argv[:3] == ["py", "-m", spec.MODULE]
        assert type(spec).parse(argv[3:]) == spec, argv
    assert hops.step_of(hops.SmokeVerify(run=tmp_path, clone=tmp_path, config=tmp_path).args()) == "verify"
    with pytest.raises(SystemExit):  # a value outside the declared choices is refused by the worker
        hops.EnginePhase.parse(["--phase", "bake", "--config", "c.yaml"])


NOT_HOP_WORKERS = {
    "qflux/loader_check.py": "runs with a qwen-image-finetune clone's interpreter: two positional paths",
    "fleet/bundle_files.py": "runs alone as a bundle's verify-bundle.py, standard library only",
    "launch/runner.py": "the launcher's own runner: its arguments are the phases of a launch plan",
}


def _main_modules() -> list[str]:
    """Every module with an `if __name__ == "__main__":` block (a docstring mentioning one does not count)."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if any(
            isinstance(node, ast.If) and ast.unparse(node.test) in ('__name__ == "__main__"', "__name__ == '__main__'")
            for node in tree.body
        ):
            found.append(path.relative_to(SRC).as_posix())
    return found


def test_no_worker_parses_its_own_arguments():
    """A worker is any module with a __main__ block. Those the run service starts are declared once in
    launch.hops (argparse there only) and go through run_worker; every other one says here why it is not a hop."""
    from aipc_env.launch import hops

    hop_modules = {
        cls.MODULE.removeprefix("aipc_env.").replace(".", "/") + ".py"
        for cls in vars(hops).values()
        if isinstance(cls, type) and issubclass(cls, hops.WorkerArgs) and cls is not hops.WorkerArgs
    }
    workers = _main_modules()
    assert hop_modules <= set(workers), "a hop names a module without a __main__ block"
    assert set(workers) - hop_modules == set(NOT_HOP_WORKERS), "a new __main__ module: a hop, or a reason here"
    for rel in sorted(hop_modules):
        text = (SRC / rel).read_text(encoding="utf-8")
        assert "ArgumentParser(" not in text and "run_worker(" in text and ".parse(argv)" in text, rel


def test_one_worker_error_handler(capsys):
    from aipc_env.errors import ExitCode, InputError
    from aipc_env.launch.hops import run_worker

    def bad_input() -> int:
        raise InputError("no such thing", key="--config", fix="name it")

    def bug() -> int:
        raise ValueError("boom")

    def stop() -> int:
        raise KeyboardInterrupt

    assert run_worker("x", lambda: ExitCode.PROBLEMS) == ExitCode.PROBLEMS
    assert run_worker("x", bad_input) == ExitCode.USAGE and "no such thing" in capsys.readouterr().err
    assert run_worker("x", bug) == ExitCode.INTERNAL and "internal error in x: ValueError: boom" in capsys.readouterr().err
    assert run_worker("x", stop) == ExitCode.INTERRUPTED
