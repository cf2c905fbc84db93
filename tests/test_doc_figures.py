"""Numbers in the docs come from somewhere: every size and duration in README.md and on every page under docs/ is
traced in docs/figures.yaml: a measured one to the value of a benchmark's results file it must equal as rounded on
the page, a quoted one to its source; and every figure in docs/benchmarks.md's table is a value of the results file
of the benchmark its row names (benchmarks/results/), as rounded there."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from aipc_env.core.fileio import parse_yaml, read_yaml
from aipc_env.errors import InputError
from tests.conftest import ROOT

PAGES = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md"))]
FIGURE = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?) ?(KB|kB|MB|GB|GiB|MiB|TB|ms|s|min|minutes|seconds|h|hours)\b")
PER_SECOND = {"ms": 1000.0, "s": 1.0, "seconds": 1.0, "min": 1 / 60, "minutes": 1 / 60, "h": 1 / 3600, "hours": 1 / 3600}


def _figures(text: str) -> set[str]:
    text = re.sub(r"^--8<--.*$", "", text, flags=re.MULTILINE)  # included outputs are the tool's own (docs/outputs)
    return {f"{number} {unit}" for number, unit in FIGURE.findall(text)}


def _traces() -> dict:
    """docs/figures.yaml through the project's own YAML reader, which refuses a key written twice in one mapping
    (PyYAML keeps the last silently: a trace written twice under one page hid the first)."""
    return read_yaml(ROOT / "docs" / "figures.yaml", "docs/figures.yaml")


def test_no_trace_is_written_twice_under_one_heading():
    assert _traces()
    with pytest.raises(InputError, match="appears twice"):
        parse_yaml("pages:\n  a.md:\n    x: 1\n  a.md:\n    y: 2\n", "figures.yaml")


def _benchmark_rows(text: str) -> str:
    """docs/benchmarks.md's table rows: their figures are checked against their results file (the test below)."""
    return "\n".join(line for line in text.splitlines() if "bench_" in line and line.startswith("|"))


@pytest.mark.parametrize("page", PAGES)
def test_every_size_and_duration_on_every_page_is_traced(page: str) -> None:
    traces = _traces()
    text = (ROOT / page).read_text(encoding="utf-8")
    traced = set(traces["quoted"]) | set(traces["measured"].get(page, {})) | set(traces["pages"].get(page, {}))
    untraced = _figures(text) - traced - (_figures(_benchmark_rows(text)) if page == "docs/benchmarks.md" else set())
    assert not untraced, f"{page}: {sorted(untraced)} come from no measurement or quoted source (docs/figures.yaml)"


def test_every_page_is_scanned() -> None:
    assert {"README.md", "docs/index.md", "docs/getting-started.md", "docs/decisions.md", "docs/reference/cli.md"} <= set(PAGES)


def _value(path: list[str]) -> float:
    data = json.loads((ROOT / "benchmarks" / "results" / path[0]).read_text(encoding="utf-8"))
    for key in path[1:]:
        data = data[key]
    assert isinstance(data, (int, float)), path
    return float(data)


def _as_written(figure: str, value: float) -> bool:
    number, unit = figure.split(" ")
    digits = len(number.split(".")[1]) if "." in number else 0
    return round(value * PER_SECOND.get(unit, 1.0), digits) == float(number)


@pytest.mark.parametrize("page", sorted(_traces()["measured"]))
def test_every_measured_figure_is_its_recorded_value_as_rounded(page: str) -> None:
    text = (ROOT / page).read_text(encoding="utf-8")
    for figure, path in _traces()["measured"][page].items():
        assert figure in _figures(text), f"{page} no longer says {figure}: drop it from docs/figures.yaml"
        assert _as_written(figure, _value(path)), f"{page}: {figure} is not {path} ({_value(path)}) as rounded there"


def test_a_measured_figure_is_checked_at_its_rounding() -> None:
    assert _as_written("6.5 s", 6.49858) and not _as_written("6.4 s", 6.49858) and not _as_written("6.49 s", 6.49858)
    assert _as_written("44 ms", 0.04371) and not _as_written("43 ms", 0.04371)
    assert _as_written("7 minutes", 421.3) and not _as_written("4.5 minutes", 421.3)


def test_the_check_finds_an_untraced_figure() -> None:
    assert _figures("the stack takes about 400 MB and trains in about 10 s; a 32 GB laptop") == {
        "400 MB",
        "10 s",
        "32 GB",
    }


def _leaves(data: object) -> list[float]:
    if isinstance(data, dict):
        return [x for v in data.values() for x in _leaves(v)]
    if isinstance(data, list):
        return [x for v in data for x in _leaves(v)]
    if isinstance(data, (int, float)) and not isinstance(data, bool):
        return [float(data)]
    return []


def _recorded(figure: str, unit: str, leaves: list[float]) -> bool:
    digits = len(figure.split(".")[1]) if "." in figure else 0
    scales = (1.0, 1000.0) if unit == "ms" else (1.0,)
    return any(round(v * scale, digits) == float(figure) for v in leaves for scale in scales)


def test_every_figure_of_the_benchmarks_table_is_in_its_results_file() -> None:
    rows = [line for line in (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8").splitlines() if "bench_" in line]
    assert rows
    checked = 0
    for row in rows:
        name = re.search(r"bench_([a-z_]+)\.py", row)
        assert name, row
        stem = {"learning": "learning-check", "distill_quality": "distill-quality", "fleet_report": "fleet-report"}.get(
            name.group(1), name.group(1)
        )
        results = sorted(Path(ROOT / "benchmarks" / "results").glob(f"{stem}*.json"))
        assert results, f"no results file for {name.group(0)}"
        leaves = [x for path in results for x in _leaves(json.loads(path.read_text(encoding="utf-8")))]
        measured = row.split("|")[2]
        for number, unit in re.findall(r"(\d+\.\d+) ?(ms|s)\b", measured):
            assert _recorded(number, unit, leaves), f"{number} {unit} of {name.group(0)}'s row is in none of {results}"
            checked += 1
    assert checked >= 5
