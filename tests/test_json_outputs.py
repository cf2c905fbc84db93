"""Every command's `--json` on a valid input: stdout is one document of the command's format in docs/schemas/
(tests/support/json_outputs.py names it), derived from the parser: a command without a named format fails here.
The cheap commands run here, in process, on built-in defaults, fixtures and dry runs; the expensive ones (a real
image build, a training run, NF4 quantization) are run with --json by the slow tests named in EXPENSIVE, which
check their stdout the same way."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest

from aipc_env.cli import main
from tests.conftest import MACHINES, ROOT
from tests.support.json_outputs import COMMAND_FORMATS, SCHEMAS, WINGET, check_json_output
from tests.test_json_contract import COMMANDS

FIXTURES = ROOT / "tests" / "fixtures"

EXPENSIVE = {
    "verify": "tests/test_verify.py",
    "quantize": "tests/test_quantize.py",
    "compare": "tests/test_compare_monitor.py",
    "container build": "tests/test_container.py",
    "container check": "tests/test_container.py",
    "fleet bundle": "tests/conftest.py",
}
"""Commands whose valid run costs minutes: the slow test file that runs each with --json and checks its stdout."""


def _distill_config(tmp: Path) -> Path:
    assert main(["distill", "init", str(tmp / "distill run")]) == 0
    return tmp / "distill run" / "distill.yaml"


def _dataset(tmp: Path) -> Path:
    from tests.test_dataset import local

    return local(tmp / "dataset")


def _requirements(tmp: Path) -> Path:
    path = tmp / "requirements.txt"
    path.write_text("torch==2.5.1\ndiffusers\n", encoding="utf-8")
    return path


def _reports(tmp: Path) -> Path:
    folder = tmp / "reports"
    folder.mkdir()
    for report in (FIXTURES / "reports").glob("*.report.json"):
        shutil.copy(report, folder)
    return folder


CHEAP: dict[str, object] = {
    "doctor": lambda t: ["doctor", "--facts", str(MACHINES / "win11_core_ultra_32gb.json")],
    "train": lambda t: ["train", "--dry-run"],
    "env": lambda t: ["env", "--dry-run", "--pair", "xpu-2.12", "--prefix", str(t / "env")],
    "lock": lambda t: ["lock", "check"],
    "matrix": lambda t: ["matrix"],
    "resolve": lambda t: ["resolve", "--pip-list", str(FIXTURES / "outputs" / "pip_list_torch211_xpu_win.txt")],
    "recommend": lambda t: ["recommend", "--facts", str(MACHINES / "win11_core_ultra_32gb.json")],
    "dataset validate": lambda t: ["dataset", "validate", str(_dataset(t))],
    "patch-requirements": lambda t: ["patch-requirements", str(_requirements(t)), "--pair", "xpu-2.13"],
    "monitor": lambda t: ["monitor", "--out", str(t / "m.csv"), "--duration", "1", "--interval", "0.5", "--device", "none"],
    "container render": lambda t: ["container", "render", "--pair", "xpu-2.12", "--gpu-runtime", "none", "--out", str(t / "ctx")],
    "container run": lambda t: ["container", "run", "--dry-run", "--", "doctor"],
    "fleet winget": lambda t: ["fleet", "winget", "--pair", "xpu-2.13"],
    "fleet ansible": lambda t: ["fleet", "ansible", "--pair", "xpu-2.13", "--out", str(t / "playbook")],
    "fleet keygen": lambda t: ["fleet", "keygen", "--secret", str(t / "a.key"), "--public", str(t / "a.pub")],
    "fleet report": lambda t: ["fleet", "report", str(_reports(t))],
    "distill init": lambda t: ["distill", "init", str(t / "fresh")],
    "distill gate": lambda t: ["distill", "gate", "g0", "--dry-run", "--config", str(_distill_config(t))],
    "distill trajectories": lambda t: ["distill", "trajectories", "--dry-run", "--config", str(_distill_config(t))],
    "distill train": lambda t: ["distill", "train", "--dry-run", "--config", str(_distill_config(t))],
    "distill all": lambda t: ["distill", "all", "--dry-run", "--config", str(_distill_config(t))],
    "distill export": lambda t: ["distill", "export", "--dry-run", "--config", str(_distill_config(t))],
    "distill publish": lambda t: [
        "distill",
        "publish",
        "--dry-run",
        "--repo",
        "someone/student",
        "--config",
        str(_distill_config(t)),
    ],
    "distill report": lambda t: ["distill", "report", "--config", str(_distill_config(t))],
    "adapt": "upstream_clone",  # the real upstream source, pristine: --check names its findings (exit 1)
}


def test_every_command_names_its_formats_and_each_has_a_schema():
    assert set(COMMAND_FORMATS) == set(COMMANDS), "a command without a --json format (tests/support/json_outputs.py)"
    for names in COMMAND_FORMATS.values():
        for name in names:
            assert name == WINGET or (SCHEMAS / f"{name}.schema.json").is_file(), name
    assert set(CHEAP) | set(EXPENSIVE) == set(COMMANDS) and not set(CHEAP) & set(EXPENSIVE)


@pytest.mark.parametrize("command", sorted(EXPENSIVE))
def test_an_expensive_command_is_checked_by_its_slow_test(command):
    """The named slow test file runs the command with --json and hands its stdout to check_json_output."""
    tree = ast.parse((ROOT / EXPENSIVE[command]).read_text(encoding="utf-8"))
    checked = [
        node.args[0].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and getattr(node.func, "id", None) == "check_json_output"
        and node.args
        and isinstance(node.args[0], ast.Constant)
    ]
    assert command in checked, f"{EXPENSIVE[command]} does not check `{command} --json`"


@pytest.mark.parametrize("command", sorted(CHEAP))
def test_a_valid_input_prints_the_commands_format(command, tmp_path, capsys, request):
    if command == "adapt":
        argv = ["adapt", "--check", str(request.getfixturevalue("upstream_clone"))]
    else:
        argv = CHEAP[command](tmp_path)  # type: ignore[operator]
    capsys.readouterr()  # a fixture command's own output (distill init) is not this one's
    cut = argv.index("--") if "--" in argv else len(argv)  # after --: the container's command
    try:
        code = main([*argv[:cut], "--json", *argv[cut:]])
    except SystemExit as stop:
        code = int(stop.code or 0)
    out = capsys.readouterr().out
    assert code in (0, 1), out[-3000:]
    check_json_output(command, out)
