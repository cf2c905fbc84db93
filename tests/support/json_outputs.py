"""Which documented format each command prints under `--json` (docs/schemas/), and the check that its stdout is
that: one table, read by tests/test_json_outputs.py (every command the parser declares must be in it) and by the
slow tests that run the expensive commands for real."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import jsonschema

SCHEMAS = Path(__file__).resolve().parents[2] / "docs" / "schemas"

WINGET = "winget-configuration"
"""fleet winget prints a WinGet configuration: validated with the official schema (fleet/winget_check.schema)."""

COMMAND_FORMATS: dict[str, tuple[str, ...]] = {
    "doctor": ("doctor-report",),
    "train": ("train-run-report",),
    "verify": ("verify-report",),
    "env": ("env-build-report", "env-check-report", "install-plan"),
    "lock": ("lock-report", "lock-check-report", "lock-verify-reports"),
    "matrix": ("matrix", "matrix-refresh-report"),
    "resolve": ("resolve-report", "toolkit-report"),
    "recommend": ("recommendation",),
    "dataset validate": ("dataset-verdict",),
    "patch-requirements": ("requirements-report",),
    "quantize": ("quantize-result",),
    "compare": ("compare-manifest",),
    "monitor": ("monitor-report",),
    "container render": ("image-context-spec",),
    "container build": ("image-build-report",),
    "container run": ("container-run-report",),
    "container check": ("image-check-report",),
    "fleet winget": (WINGET, "winget-check-report"),
    "fleet ansible": ("files-written",),
    "fleet bundle": ("bundle-manifest",),
    "fleet keygen": ("key-pair-report",),
    "fleet report": ("fleet-report",),
    "distill init": ("files-written",),
    "distill gate": ("distill-run-result",),
    "distill trajectories": ("distill-run-result",),
    "distill train": ("distill-run-result",),
    "distill all": ("distill-run-result",),
    "distill export": ("distill-run-result",),
    "distill publish": ("distill-run-result",),
    "distill report": ("distill-report",),
    "adapt": ("adapt-check-report", "files-written", "smoke-result"),
}


@cache
def schema(name: str) -> dict:
    if name == WINGET:
        from aipc_env.fleet.winget_check import schema as winget_schema

        return winget_schema()
    return json.loads((SCHEMAS / f"{name}.schema.json").read_text(encoding="utf-8"))


def check_json_output(command: str, stdout: str) -> dict:
    """stdout is one JSON document valid against one of the command's formats (an error document is not)."""
    assert "Traceback" not in stdout, stdout[-2000:]
    doc = json.loads(stdout)
    errors = []
    for name in COMMAND_FORMATS[command]:
        try:
            jsonschema.validate(doc, schema(name))
        except jsonschema.ValidationError as exc:
            errors.append(f"{name}: {exc.message}")
        else:
            return doc
    raise AssertionError(f"`{command} --json` printed none of its formats: {errors}")
