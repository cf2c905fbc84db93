"""`--json` as a contract, derived from the parser (not a hand list of commands): every command that takes --json
answers a refusal with a versioned error document on stdout (docs/schemas/error-document.schema.json) and the exit
code of its text twin; the commands that do not take --json yet are named here, so a new one cannot slip in."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import jsonschema
import pytest

from aipc_env.cli import build_parser, main
from tests.conftest import ROOT

ERROR_SCHEMA = json.loads((ROOT / "docs" / "schemas" / "error-document.schema.json").read_text(encoding="utf-8"))


def _leaves(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield " ".join(path), parser
        return
    for name, sub in subs[0].choices.items():
        yield from _leaves(sub, (*path, name))


def _takes_json(parser: argparse.ArgumentParser) -> bool:
    return any("--json" in a.option_strings for a in parser._actions)


COMMANDS = dict(_leaves(build_parser()))
JSON_COMMANDS = sorted(name for name, p in COMMANDS.items() if _takes_json(p))


def _run(argv: list[str], capsys) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as stop:
        code = int(stop.code or 0)
    return code, capsys.readouterr().out


def _error_document(stdout: str) -> dict:
    doc = json.loads(stdout)
    jsonschema.validate(doc, ERROR_SCHEMA)
    return doc


def test_every_command_takes_json():
    without = {name for name, p in COMMANDS.items() if not _takes_json(p)}
    assert without == set()
    assert len(JSON_COMMANDS) == len(COMMANDS) >= 31


@pytest.mark.parametrize("command", JSON_COMMANDS)
def test_a_bad_argument_is_a_json_error_document(command, capsys):
    code, out = _run([*command.split(), "--json", "--no-such-option"], capsys)
    doc = _error_document(out)
    assert code == 2 and doc["code"] == 2 and doc["code_name"] == "USAGE"
    # argparse names what it refused first: a missing required argument, else the unknown option
    assert doc["message"].startswith("aipc-env") and ("--no-such-option" in doc["message"] or "required" in doc["message"]), doc
    assert doc["fix"].endswith("--help lists the arguments")


BAD_INPUTS = {
    "dataset validate": (["dataset", "validate", "{missing}"], "{missing}"),
    "resolve": (["resolve", "--pip-list", "{missing}"], "{missing}"),
    "doctor": (["doctor", "--facts", "{missing}"], "{missing}"),
    "compare": (["compare", "--config", "{missing}", "--lora", "x", "--test-set", "y", "--out", "{tmp}/o"], "{missing}"),
    "patch-requirements": (["patch-requirements", "{missing}"], "{missing}"),
    "fleet report": (["fleet", "report", "{missing}"], "{missing}"),
}


@pytest.mark.parametrize("command", sorted(BAD_INPUTS))
def test_a_refused_input_is_a_json_error_document_naming_the_file(command, tmp_path, capsys):
    argv, where = BAD_INPUTS[command]
    missing = tmp_path / "no such file ü.txt"

    def fill(text: str) -> str:
        return text.replace("{missing}", str(missing)).replace("{tmp}", str(tmp_path))

    code, out = _run([*map(fill, argv), "--json"], capsys)
    doc = _error_document(out)
    assert code == doc["code"] == 2, doc
    assert Path(doc["file"]) == Path(fill(where)) or fill(where) in doc["message"], doc


def test_an_internal_error_is_a_json_error_document(monkeypatch, capsys):
    from aipc_env.commands import matrix

    def broken(_args):
        raise RuntimeError("boom")

    parser = build_parser()
    monkeypatch.setattr("aipc_env.cli.build_parser", lambda: parser)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            action.choices["matrix"].set_defaults(run=broken)
    assert matrix  # the command module the parser took its run from
    code, out = _run(["matrix", "--json"], capsys)
    doc = _error_document(out)
    assert code == 3 and doc["code_name"] == "INTERNAL" and "RuntimeError: boom" in doc["message"]


def test_without_json_a_refusal_prints_nothing_on_stdout(tmp_path, capsys):
    code, out = _run(["dataset", "validate", str(tmp_path / "missing")], capsys)
    assert code == 2 and out == ""


def test_fleet_winget_json_prints_its_configuration(capsys):
    """It ended in "internal error: TypeError: a command's --json output must be a model, not dict" (exit 3)."""
    import yaml

    from aipc_env.fleet.winget import SCHEMA_URL, render_yaml, winget_configuration
    from aipc_env.matrix import load_matrix

    code, out = _run(["fleet", "winget", "--pair", "xpu-2.12", "--json"], capsys)
    assert code == 0
    pair = load_matrix().get("xpu-2.12")
    assert json.loads(out) == yaml.safe_load(render_yaml(winget_configuration(pair), pair))
    assert SCHEMA_URL in render_yaml(winget_configuration(pair), pair)
