"""A typo gets the closest command, action or option (argparse in Python 3.11 has no suggestion), on stderr and in
the --json error document; a word close to nothing gets no guess."""

from __future__ import annotations

import json

import pytest

from aipc_env.errors import ExitCode
from tests.conftest import run_cli


@pytest.mark.parametrize(
    "argv,guess",
    [
        (["doctr"], "'doctor'"),
        (["trian", "config.yaml"], "'train'"),
        (["dataset", "validat", "x"], "'validate'"),
        (["doctor", "--jsno"], "'--json'"),
        (["doctor", "--lis-checks"], "'--list-checks'"),
        (["matrix", "--verbse"], "'--verbose'"),
        (["doctor", "--check", "x", "--lsit-checks"], "'--list-checks'"),
    ],
)
def test_a_typo_gets_the_closest_word(argv: list[str], guess: str) -> None:
    result = run_cli(*argv)
    assert result.returncode == ExitCode.USAGE
    assert f"did you mean {guess}?" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_the_guess_is_in_the_json_error_document() -> None:
    result = run_cli("doctor", "--jsno", "--json")
    assert result.returncode == ExitCode.USAGE
    doc = json.loads(result.stdout)
    assert doc["fix"].startswith("did you mean '--json'?"), doc


@pytest.mark.parametrize("argv", [["xyzzy"], ["doctor", "--zzzz"], ["doctor", "stray"]])
def test_a_word_close_to_nothing_gets_no_guess(argv: list[str]) -> None:
    result = run_cli(*argv)
    assert result.returncode == ExitCode.USAGE
    assert "did you mean" not in result.stderr, result.stderr
