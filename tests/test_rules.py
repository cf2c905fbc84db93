"""One home per rule (issue 24): one function chooses the pair, `--pair` is declared once, no command, worker,
runner or launcher template returns a literal exit code, every run starts through the run service, and the code is
ruff-clean."""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

from aipc_env.errors import ExitCode
from tests.conftest import ROOT, find_tool, require_tool

SRC = ROOT / "src" / "aipc_env"
DATA = SRC / "qflux" / "edits"  # another project's code, applied to a clone


def _trees():
    for path in sorted(SRC.rglob("*.py")):
        if DATA not in path.parents:
            yield path, ast.parse(path.read_text(encoding="utf-8"))


def _calls(tree: ast.AST, name: str) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if called == name:
                lines.append(node.lineno)
    return lines


def test_one_function_chooses_the_pair():
    """Only trainenv/select.py falls back to the newest pair or defines a chooser; resolution (which pair a package
    set *is*) is asked for by the chooser, the doctor's report and the resolve command only. (That choose_pair has one
    caller is tests/test_structure.py's.)"""
    newest, choosers, resolvers = [], [], []
    for path, tree in _trees():
        rel = path.relative_to(SRC).as_posix()
        if rel.startswith("matrix/"):
            continue
        newest += [f"{rel}:{n}" for n in _calls(tree, "newest")]
        resolvers += [rel for _ in _calls(tree, "resolve_pair")]
        choosers += [
            rel
            for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef) and re.fullmatch(r"(choose|pick|select|smoke)_pair|.*_pair_for", node.name)
        ]
    assert newest == [n for n in newest if n.startswith("trainenv/select.py")] and newest
    assert choosers == ["trainenv/select.py"]
    assert set(resolvers) <= {"trainenv/select.py", "doctor/checks/base.py"}


def test_situations_are_gathered_in_one_place():
    """A Situation is made by trainenv/situation.py only (situation_for per purpose, situation_from_facts for the
    doctor): what each purpose reads has one home."""
    made = sorted({path.relative_to(SRC).as_posix() for path, tree in _trees() if _calls(tree, "Situation")})
    assert made == ["trainenv/situation.py"]
    gathered = sorted({path.relative_to(SRC).as_posix() for path, tree in _trees() if _calls(tree, "gather_situation")})
    assert gathered == []


def test_the_run_folders_file_names_have_one_definition():
    """The LoRA weight file and the accelerate config are named in core/runfolder.py only (string literals other than
    docstrings; qflux/checker.py names upstream's own accelerate_config.yaml, a file of the clone)."""
    others = {"accelerate_config.yaml": ["qflux/checker.py"]}
    for name in ("pytorch_lora_weights.safetensors", "accelerate_config.yaml"):
        spelled = set()
        for path, tree in _trees():
            docstrings = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}  # and attribute docs
            for node in ast.walk(tree):
                literal = isinstance(node, ast.Constant) and isinstance(node.value, str) and name in node.value
                if literal and id(node) not in docstrings:
                    spelled.add(path.relative_to(SRC).as_posix())
        assert sorted(spelled) == sorted(["core/runfolder.py", *others.get(name, [])]), (name, spelled)


def test_pair_is_declared_once():
    declared = []
    for path, tree in _trees():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
                flags = [a.value for a in node.args if isinstance(a, ast.Constant)]
                if "--pair" in flags:
                    declared.append(path.relative_to(SRC).as_posix())
    assert declared == ["commands/options.py"]


def _literal_exit_codes(tree: ast.AST) -> list[int]:
    def ints(expr) -> list[ast.Constant]:
        if isinstance(expr, ast.IfExp):
            return ints(expr.body) + ints(expr.orelse)
        is_int = isinstance(expr, ast.Constant) and type(expr.value) is int
        return [expr] if is_int else []

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Return) and node.value is not None:
            found += [c.lineno for c in ints(node.value)]
        if isinstance(node, ast.Call) and node.args:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name in ("exit", "SystemExit", "_exit"):
                found += [c.lineno for c in ints(node.args[0])]
    return found


def test_no_module_returns_a_literal_exit_code():
    """Every module of the package, not a list of them: a new worker or command is covered the day it is written."""
    modules = sorted(SRC.rglob("*.py"))
    assert len(modules) > 150
    offenders = {
        p.relative_to(SRC).as_posix(): lines
        for p in modules
        if (lines := _literal_exit_codes(ast.parse(p.read_text(encoding="utf-8"))))
    }
    assert offenders == {}


def test_the_standalone_bundle_check_uses_the_exit_code_table():
    from aipc_env.fleet import bundle_files

    assert (bundle_files.EXIT_OK, bundle_files.EXIT_PROBLEMS, bundle_files.EXIT_USAGE) == (
        ExitCode.OK,
        ExitCode.PROBLEMS,
        ExitCode.USAGE,
    )


def test_the_scan_finds_literals():
    """The scan above is not vacuous: it sees each form it forbids."""
    code = "def a():\n    return 1\ndef b(x):\n    return 0 if x else 2\nimport sys\nsys.exit(3)\nraise SystemExit(130)\n"
    assert _literal_exit_codes(ast.parse(code)) == [2, 4, 4, 6, 7]
    assert _literal_exit_codes(ast.parse("def a():\n    return ExitCode.OK\n")) == []


TEMPLATE_FILES = sorted(
    [
        *(p for p in (ROOT / "launchers").iterdir() if p.suffix in (".sh", ".bat")),
        *(
            p
            for folder in (*SRC.rglob("templates"), *SRC.rglob("scripts"))
            if folder.is_dir()
            for p in folder.rglob("*")
            if p.is_file()
        ),
    ]
)
"""Every launcher and every template or script file the package renders or ships, found by folder."""


def _literal_exits(text: str) -> list[str]:
    """`exit 1`, `exit /b 2`, `sys.exit(1)`, `rc not in [0, 1]`: exit codes written as numbers."""
    return (
        re.findall(r"\bexit(?: /b)? +(\d+)", text)
        + re.findall(r"\bsys\.exit\((\d+)\)", text)
        + re.findall(r"\brc (?:not )?in \[([\d, ]+)\]", text)
    )


def test_templates_name_their_exit_codes():
    from aipc_env.core.templating import EXIT_MARKS

    assert EXIT_MARKS["exit_usage"] == str(ExitCode.USAGE)
    for path in TEMPLATE_FILES:
        text = path.read_text(encoding="utf-8")
        assert _literal_exits(text) == [], f"{path.name}: {_literal_exits(text)}"
        named = {m.lower() for m in re.findall(r"@AIPC_(EXIT_[A-Z_]+)@", text)}
        assert named <= set(EXIT_MARKS), path.name


def test_the_rendered_playbook_is_yaml(matrix):
    """Every YAML file of the playbook parses (the full Ansible syntax check is tests/test_fleet_ansible.py, slow):
    a task name with ': ' in it once broke the whole play."""
    import yaml

    from aipc_env.fleet.ansible import GpuSource, render_playbook

    source = GpuSource(
        "deb [signed-by=/etc/apt/keyrings/intel-gpu.asc] https://repositories.intel.com/gpu/ubuntu noble client",
        Path("intel-gpu.asc"),
        "intel-gpu.asc",
    )
    for gpu in (None, source):
        for rel, text in render_playbook(matrix.get("xpu-2.13"), gpu).items():
            if rel.endswith(".yml"):
                assert isinstance(yaml.safe_load(text), (dict, list)), rel


def test_the_exit_scan_finds_numbers():
    assert _literal_exits("exit 1\nexit /b 2\nsys.exit(3)\nfailed_when: x.rc not in [0, 1]\nexit $RC\n") == [
        "1",
        "2",
        "3",
        "0, 1",
    ]


def test_every_run_starts_through_the_run_service():
    """Only the run service writes and starts a launcher; the commands that run phases go through it."""
    starters = {}
    for path, tree in _trees():
        rel = path.relative_to(SRC).as_posix()
        for name in ("run_launcher", "write_launcher", "plan_run", "start_run"):
            if _calls(tree, name):
                starters.setdefault(name, set()).add(rel)
    assert starters["run_launcher"] == {"launch/service.py"}
    assert starters["write_launcher"] == {"launch/service.py"}
    assert starters["plan_run"] == {"launch/service.py"}
    assert starters["start_run"] == {"commands/train.py", "verify/run.py", "distill/run.py", "qflux/smoke.py"}


def test_ruff_is_clean():
    ruff = find_tool("ruff")
    require_tool(None if ruff else "ruff is not installed (the dev extra has it)")
    result = subprocess.run(
        [ruff, "check", "--no-cache", "src", "tests", "benchmarks", "noxfile.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout[-4000:]


def test_ruff_format_leaves_the_tree_as_it_is():
    """The tree is in `ruff format`'s style (the qflux edit files, hashed by adapt, are excluded in pyproject)."""
    ruff = find_tool("ruff")
    require_tool(None if ruff else "ruff is not installed (the dev extra has it)")
    result = subprocess.run(
        [ruff, "format", "--check", "--no-cache", "src", "tests", "benchmarks", "docs", "noxfile.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout[-4000:]


def test_mypy_is_clean():
    """The type checker over src/ at 0 errors ([tool.mypy] in pyproject.toml: unused and code-less ignores fail)."""
    mypy = find_tool("mypy")
    require_tool(None if mypy else "mypy is not installed (the dev extra has it)")
    result = subprocess.run(
        [mypy, "--no-incremental", "--cache-dir", "/dev/null"], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout[-6000:]


def test_mypy_is_strict_everywhere():
    """strict = true for the whole package: no module is skipped (ignore_errors) and no override switches a strict
    rule off, except the qflux edit files, which are upstream's code as adapt writes it into a clone."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]
    assert config["strict"] is True and config["files"] == ["src/aipc_env"]
    relaxed = {
        m
        for o in config.get("overrides", [])
        if any(o.get(k) is False for k in ("disallow_untyped_defs", "disallow_any_generics", "disallow_untyped_calls"))
        or o.get("ignore_errors")
        or o.get("ignore_missing_imports") is False
        for m in o["module"]
    }
    assert relaxed <= {"aipc_env.qflux.edits.created.*"}, relaxed
    assert not any(o.get("ignore_errors") for o in config.get("overrides", []))


def test_every_type_ignore_names_its_code_and_its_reason():
    """`# type: ignore[code]  # why` everywhere: a bare ignore hides every error on its line, one without a reason
    cannot be reviewed."""
    bad = []
    for path in sorted((ROOT / "src" / "aipc_env").rglob("*.py")):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if "# type: ignore" in line and not re.search(r"# type: ignore\[[a-z-]+(, ?[a-z-]+)*\]\s+#\s*\S", line):
                bad.append(f"{path.relative_to(ROOT)}:{n}")
    assert bad == []


def _test_references(text: str) -> list[tuple[str, str]]:
    """(file, test) for every `FILE.py::test_name` in a doc; a bare `::test_name` means the file named last."""
    found, current = [], None
    for match in re.finditer(r"(?:tests/)?(test_\w+\.py)?::(test_\w+)", text):
        current = match.group(1) or current
        found.append((current, match.group(2)))
    return found


def test_every_guard_in_the_security_model_names_a_test_that_exists():
    refs = _test_references((ROOT / "docs" / "security.md").read_text(encoding="utf-8"))
    assert len(refs) > 40
    missing = []
    for file, name in refs:
        source = (ROOT / "tests" / file).read_text(encoding="utf-8") if file and (ROOT / "tests" / file).is_file() else ""
        if not re.search(rf"^def {name}\(", source, re.MULTILINE):
            missing.append(f"{file}::{name}")
    assert not missing, missing


def test_the_reference_scan_follows_the_last_named_file():
    assert _test_references("`tests/test_a.py::test_x`, `::test_y`; `test_b.py::test_z`") == [
        ("test_a.py", "test_x"),
        ("test_a.py", "test_y"),
        ("test_b.py", "test_z"),
    ]


# --- one reader (issue 34) -------------------------------------------------------------------------------------

PARSERS = {
    ("json", "loads"),
    ("json", "load"),
    ("tomllib", "loads"),
    ("tomllib", "load"),
    ("yaml", "safe_load"),
    ("yaml", "load"),
    ("yaml", "full_load"),
    ("yaml", "unsafe_load"),
}
PARSE_ALLOWED = {
    # standard-library-only modules (they run before or outside aipc-env's own env): bounded by hand
    "fleet/bundle_files.py": (
        1,
        "the bundle's manifest, size-bounded first, one object, each key once (run by bootstrap scripts; stdlib only)",
    ),
    # files aipc-env generated itself in its own run folder, read by the worker that runs in the qflux env
    "workers/qflux_smoke.py": (3, "the smoke's own generated config and upstream's recommended config, state.json"),
}
"""Where json/yaml/tomllib parse directly, and why; everything else goes through aipc_env.core.fileio (size read from the
stream, depth checked before the parser recurses, numbers bounded, errors naming the file)."""


def test_every_file_is_parsed_by_the_one_reader_or_an_allowed_exception():
    found: dict[str, int] = {}
    for path, tree in _trees():
        rel = path.relative_to(SRC).as_posix()
        if rel == "core/fileio.py":
            continue
        for node in ast.walk(tree):
            func = node.func if isinstance(node, ast.Call) else None
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and (func.value.id, func.attr) in PARSERS:
                found[rel] = found.get(rel, 0) + 1
    unexpected = {rel: n for rel, n in found.items() if n > PARSE_ALLOWED.get(rel, (0, ""))[0]}
    assert not unexpected, f"parse user files with aipc_env.core.fileio (read_json/read_yaml/parse_toml ...): {unexpected}"
    stale = {rel for rel, (n, _) in PARSE_ALLOWED.items() if found.get(rel, 0) < n}
    assert not stale, f"the allowlist names more direct parses than there are: lower it {sorted(stale)}"


def test_the_reader_scan_finds_a_direct_parse(tmp_path):
    """The scan itself: a direct json.loads in a module not on the list is found."""
    tree = ast.parse("import json\n\ndef f(p):\n    return json.loads(p.read_text())\n")
    calls = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and isinstance(n.func.value, ast.Name)
        and (n.func.value.id, n.func.attr) in PARSERS
    ]
    assert len(calls) == 1
