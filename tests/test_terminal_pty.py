"""What a person sees on a real terminal: every human-facing command run on a pseudo-terminal (standard library pty)
at 80 and 120 columns. Styling reaches the terminal as SGR codes (real ESC bytes), never as `\\x1b[` text; styling
only adds codes (the text is the plain text); the tool's tables wrap between words; NO_COLOR, TERM=dumb and a pipe
give plain text; a control character in data (a GPU name in the facts) is shown escaped while the styling is not."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from tests.support.ptyrun import ROOT, cli_env, on_pipe, on_pty

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="a POSIX pseudo-terminal")

MACHINES = ROOT / "tests" / "fixtures" / "machines"
SGR = re.compile(rb"\x1b\[[0-9;]*m")
ANY_ESCAPE = re.compile(rb"[\x1b\x9b]")
WIDTHS = (80, 120)

STYLED: dict[str, list[str]] = {
    "doctor ready": ["doctor", "--facts", str(MACHINES / "win11_core_ultra_32gb.json")],
    "doctor problems": ["doctor", "--facts", str(MACHINES / "win11_16gb.json")],
    "doctor verbose": ["doctor", "-v", "--facts", str(MACHINES / "linux_arc_a770.json")],
    "matrix": ["matrix"],
    "matrix sources": ["matrix", "-v"],
}
"""Commands whose text for people is styled (bold, colours)."""

PLAIN: dict[str, list[str]] = {
    "doctor checks": ["doctor", "--list-checks"],
    "recommend": ["recommend", "--facts", str(MACHINES / "win11_core_ultra_32gb.json")],
    "help": ["--help"],
    "doctor help": ["doctor", "--help"],
    "usage error": ["doctor", "--no-such-option"],
    "typo": ["doctr"],
    "train dry-run": ["train", "--dry-run"],
    "resolve": ["resolve", "--toolkit", "2025.3"],
}
"""Commands whose text is plain words: on a terminal no code may appear in it, escaped or not."""

VERIFY_SCRIPT = """\
import json, sys
from aipc_env.core.terminal import console
from aipc_env.verify.report import VerifyReport, render_verify
render_verify(console(), VerifyReport.model_validate(json.loads(sys.argv[1])), verbose=True)
"""
VERIFY_REPORT = {
    "device": "cpu",
    "pair": "xpu-2.11",
    "env_prefix": "/home/zoë/envs/aipc xpu",
    "import_seconds": 4.2,
    "work_seconds": 11.5,
    "dtypes": ["bfloat16", "float32"],
    "passed": False,
    "steps": [
        {
            "id": "nf4",
            "title": "NF4 matmul (bitsandbytes)",
            "passed": True,
            "summary": "max error 0.012 within 0.05",
            "seconds": 0.8,
        },
        {
            "id": "lora",
            "title": "LoRA step lowers the loss of a tiny transformer block",
            "passed": False,
            "summary": "loss 0.91 -> 0.93 did not fall over eight steps; check the optimizer and the learning rate",
            "seconds": 3.1,
        },
    ],
}
"""`verify`'s table is drawn from the worker's report: this one, through the real renderer, on the pty."""


def _verify_argv() -> list[str]:
    return [sys.executable, "-c", VERIFY_SCRIPT, json.dumps(VERIFY_REPORT)]


def _words(raw: bytes) -> set[str]:
    text = SGR.sub(b"", raw).decode("utf-8", "replace")
    return set(re.split(r"[\s│┃┆─━┏┓┗┛┡┩└┘┌┐╇╈┼┬┴├┤]+", text)) - {""}


def _check_terminal(raw: bytes, text_styled: bool) -> None:
    assert b"\\x1b[" not in raw and b"\\x9b" not in raw, raw[:400]
    if text_styled:
        assert SGR.search(raw), "styling should reach the terminal as SGR codes"
    # nothing but SGR: no cursor moves, no titles, no stray ESC
    assert not ANY_ESCAPE.search(SGR.sub(b"", raw)), raw[:400]


@pytest.mark.parametrize("columns", WIDTHS)
@pytest.mark.parametrize("name", sorted(STYLED) + sorted(PLAIN) + ["verify"])
def test_a_terminal_gets_styling_as_codes_and_the_text_as_text(name: str, columns: int) -> None:
    argv = _verify_argv() if name == "verify" else None
    args = STYLED.get(name) or PLAIN.get(name) or []
    seen = on_pty(args, columns=columns, argv=argv)
    assert seen.code in (0, 1, 2), seen.text
    _check_terminal(seen.raw, name in STYLED or name == "verify")
    if name in PLAIN and name not in ("usage error", "typo"):
        assert not ANY_ESCAPE.search(seen.raw), seen.raw[:400]
    # styling only adds codes: the same command with NO_COLOR on the same terminal is the text less its codes
    plain = on_pty(args, columns=columns, argv=argv, env=cli_env(NO_COLOR="1"))
    assert not ANY_ESCAPE.search(plain.raw), plain.raw[:400]
    assert SGR.sub(b"", seen.raw) == plain.raw
    # where the tool wraps (tables), it wraps between words: every word at this width is a word of the wide text
    wide = on_pipe(args, argv=argv, env=cli_env(COLUMNS="400"))
    assert _words(seen.raw) <= _words(wide.raw), sorted(_words(seen.raw) - _words(wide.raw))[:10]
    if name.startswith("matrix") or name == "verify":
        for line in plain.text.splitlines():
            if "│" in line or "━" in line or "─" in line or (name == "matrix" and not line.startswith("*")):
                assert len(line) <= columns, line


@pytest.mark.parametrize("setting", [{"NO_COLOR": "1"}, {"TERM": "dumb"}])
def test_no_color_and_a_dumb_terminal_get_plain_text(setting: dict[str, str]) -> None:
    seen = on_pty(STYLED["doctor problems"], env=cli_env(**setting))
    assert seen.code == 1
    assert not ANY_ESCAPE.search(seen.raw) and b"\\x1b" not in seen.raw, seen.raw[:400]
    assert "Doctor found problems" in seen.text


def test_a_pipe_gets_plain_text_and_the_recorded_transcript() -> None:
    seen = on_pipe(STYLED["doctor ready"], env=cli_env(COLUMNS="110"))
    assert not ANY_ESCAPE.search(seen.raw)
    recorded = (ROOT / "docs" / "outputs" / "doctor-ready.txt").read_text(encoding="utf-8")
    assert seen.text == recorded


HOSTILE = "Intel(R) Arc(TM) \x1b[31mEVIL\x1b]0;pwned\x07\x9b2J Graphics"


def test_a_control_character_in_data_is_shown_escaped_while_the_styling_is_not(tmp_path: Path) -> None:
    facts = json.loads((MACHINES / "win11_core_ultra_32gb.json").read_text(encoding="utf-8"))
    facts["gpus"][0]["name"] = HOSTILE
    path = tmp_path / "facts.json"
    path.write_text(json.dumps(facts), encoding="utf-8")
    for columns in WIDTHS:
        seen = on_pty(["doctor", "--facts", str(path)], columns=columns)
        assert seen.code in (0, 1), seen.text
        assert b"\x1b[31mEVIL" not in seen.raw and b"\x07" not in seen.raw and b"\x1b]" not in seen.raw
        assert "Arc(TM) \\x1b[31mEVIL\\x1b]0;pwned\\x07\\x9b2J Graphics" in seen.text, seen.text
        assert SGR.search(seen.raw) and b"\x1b[32m" in seen.raw  # the tool's own green marks are still colour
        assert not ANY_ESCAPE.search(SGR.sub(b"", seen.raw))  # the only codes sent are the tool's SGR


def test_a_value_that_looks_like_markup_is_text(tmp_path: Path) -> None:
    """Markup is off in the one console: a `[bold red]` in data is printed as it is, never read as a style."""
    facts = json.loads((MACHINES / "win11_core_ultra_32gb.json").read_text(encoding="utf-8"))
    facts["gpus"][0]["name"] = "Arc [bold red]B580[/bold red]"
    path = tmp_path / "facts.json"
    path.write_text(json.dumps(facts), encoding="utf-8")
    seen = on_pty(["doctor", "--facts", str(path)])
    assert "Arc [bold red]B580[/bold red]" in seen.text


def test_the_dataset_verdict_on_a_terminal(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "docs"))
    try:
        from gen_outputs import _write_dataset
    finally:
        sys.path.remove(str(ROOT / "docs"))
    _write_dataset(tmp_path / "my-dataset")
    for columns in WIDTHS:
        seen = on_pty(["dataset", "validate", "my-dataset"], columns=columns, cwd=tmp_path)
        assert seen.code == 0, seen.text
        _check_terminal(seen.raw, text_styled=False)
