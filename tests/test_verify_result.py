"""The verification worker's result.json is read back as hostile input: what is not a verification result is a
named refusal (file and key), never a traceback; what is one becomes the report, with the env and pair the run
service chose (a result cannot claim another)."""

from __future__ import annotations

import json

import pytest

from aipc_env.errors import InputError
from aipc_env.verify.run import read_verify_result

GOOD = {
    "device": "cpu",
    "import_seconds": 1.0,
    "work_seconds": 2.0,
    "dtypes": ["float32"],
    "steps": [{"id": "nf4", "title": "NF4 round trip", "passed": True, "summary": "ok", "seconds": 0.5}],
    "passed": True,
}


def test_a_result_becomes_the_report_with_the_chosen_env_and_pair(tmp_path):
    path = tmp_path / "result.json"
    path.write_text(json.dumps({**GOOD, "pair": "claimed", "env_prefix": "/elsewhere"}), encoding="utf-8")
    report = read_verify_result(path, pair="xpu-2.12", env_prefix="/env")
    assert (report.pair, report.env_prefix, report.passed) == ("xpu-2.12", "/env", True)


@pytest.mark.parametrize(
    "text,named",
    [
        ("[1]", "not a JSON object"),
        (json.dumps({**GOOD, "passed": "maybe"}), "passed"),
        (json.dumps({k: v for k, v in GOOD.items() if k != "steps"}), "steps"),
        ("{", "result.json"),
    ],
)
def test_a_result_that_is_not_one_is_named(tmp_path, text, named):
    path = tmp_path / "result.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputError) as refused:
        read_verify_result(path, pair=None, env_prefix="/env")
    assert named in refused.value.render() and refused.value.path == str(path)
