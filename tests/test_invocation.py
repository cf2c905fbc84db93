"""How a fix spells a command: `aipc-env NAME` where the tool runs as itself (an installed tool, a bundle, a folder
with no noxfile), the nox session the person can type where nox ran it (the README's `pipx run` when nox is not on
PATH). The doctor's own fixes follow it, run for real."""

from __future__ import annotations

import ast
import json
import os
import stat
from pathlib import Path

import pytest

from aipc_env.core.invocation import NOX_SESSIONS, command
from tests.conftest import ROOT, run_cli


def _noxfile_sessions() -> set[str]:
    """Sessions whose body runs `aipc-env <its own name>` (a literal "name" passed to _aipc, _answer, ...)."""
    tree = ast.parse((ROOT / "noxfile.py").read_text(encoding="utf-8"))
    found = set()
    for fn in tree.body:
        if not isinstance(fn, ast.FunctionDef) or not any("session" in ast.unparse(d) for d in fn.decorator_list):
            continue
        name = fn.name.replace("_", "-")
        for d in fn.decorator_list:
            for kw in getattr(d, "keywords", []):
                if kw.arg == "name":
                    name = kw.value.value
        literals = {n.value for n in ast.walk(fn) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
        if name in literals:
            found.add(name)
    return found


def test_the_sessions_it_names_are_the_noxfiles() -> None:
    assert _noxfile_sessions() == NOX_SESSIONS


def test_outside_nox_a_command_is_aipc_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOX_CURRENT_SESSION", raising=False)
    assert command("verify") == "aipc-env verify"
    assert command("env", "--pair", "xpu-2.11") == "aipc-env env --pair xpu-2.11"


def test_under_nox_a_session_is_named_as_the_person_can_type_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("NOX_CURRENT_SESSION", "doctor")
    monkeypatch.setenv("PATH", str(tmp_path))  # no nox on PATH: the README's pipx run of it
    pipx = "py -m pipx" if os.name == "nt" else "pipx"
    assert command("verify") == f'{pipx} run --spec "nox[uv]" nox -s verify'
    assert command("env", "--pair", "xpu-2.11") == f'{pipx} run --spec "nox[uv]" nox -s env -- --pair xpu-2.11'
    assert command("dataset", "validate") == "aipc-env dataset validate"  # no session: the command itself
    nox = tmp_path / "nox"
    nox.write_text("#!/bin/sh\n", encoding="utf-8")
    nox.chmod(nox.stat().st_mode | stat.S_IEXEC)
    assert command("verify") == "nox -s verify"


@pytest.mark.parametrize("under_nox", [False, True])
def test_the_doctors_fix_follows_how_it_was_run(under_nox: bool) -> None:
    facts = json.loads((ROOT / "tests/fixtures/machines/win11_core_ultra_32gb.json").read_text(encoding="utf-8"))
    facts["last_verify"] = None
    env = {**os.environ, "NOX_CURRENT_SESSION": "doctor"} if under_nox else None
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "facts.json"
        path.write_text(json.dumps(facts), encoding="utf-8")
        result = run_cli("doctor", "--json", "--check", "last-verify", "--facts", str(path), env=env)
    fix = json.loads(result.stdout)["findings"][0]["fix"]
    assert fix.endswith("nox -s verify") if under_nox else fix == "aipc-env verify", fix
