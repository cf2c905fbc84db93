"""Options with an environment-variable fallback are declared once (commands.options.add_env_option): the flag wins
over the variable, an empty variable is unset, the help names it, and no command reads such a variable by hand."""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

import pytest

from aipc_env.commands.options import add_env_option

COMMANDS = Path(__file__).resolve().parents[1] / "src" / "aipc_env" / "commands"


def _parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_env_option(p, "--trust", env="AIPC_TEST_TRUST", type=Path, metavar="KEY", help="a key")
    return p.parse_args(argv)


def test_flag_wins_over_the_variable_and_an_empty_variable_is_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIPC_TEST_TRUST", raising=False)
    assert _parse([]).trust is None
    monkeypatch.setenv("AIPC_TEST_TRUST", "")
    assert _parse([]).trust is None
    monkeypatch.setenv("AIPC_TEST_TRUST", "from env.pub")
    assert _parse([]).trust == Path("from env.pub")
    assert _parse(["--trust", "flag.pub"]).trust == Path("flag.pub")


def test_the_help_names_the_variable() -> None:
    p = argparse.ArgumentParser()
    add_env_option(p, "--trust", env="AIPC_TEST_TRUST", metavar="KEY", help="a key")
    assert "[env AIPC_TEST_TRUST]" in p.format_help()


def test_no_command_reads_an_option_variable_by_hand() -> None:
    """os.environ / os.getenv with an AIPC_ENV_* name appear in commands/options.py only (the secret password of
    a signing key is not an option: it is never put on a command line)."""
    allowed = {"options.py"}
    secrets = {"AIPC_ENV_SIGN_PASSWORD"}
    found = []
    for path in sorted(COMMANDS.glob("*.py")):
        if path.name in allowed:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            name = None
            if isinstance(node, ast.Call) and ast.unparse(node.func) in ("os.environ.get", "os.getenv") and node.args:
                name = node.args[0]
            elif isinstance(node, ast.Subscript) and ast.unparse(node.value) == "os.environ":
                name = node.slice
            if isinstance(name, ast.Constant) and str(name.value).startswith("AIPC_ENV_") and name.value not in secrets:
                found.append(f"{path.name}: {name.value}")
    assert found == []
