"""Numbers in the docs come from somewhere: every size and duration on the first pages a newcomer reads is quoted
from its source (docs/figures.yaml), and every figure in docs/benchmarks.md's table is a value of the results file
of the benchmark its row names (benchmarks/results/), as rounded there."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT

FIRST_PAGES = ["README.md", "docs/index.md", "docs/getting-started.md"]
FIGURE = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?) ?(KB|kB|MB|GB|GiB|MiB|TB|ms|s|min|minutes|seconds|h|hours)\b")


def _figures(text: str) -> set[str]:
    text = re.sub(r"^--8<--.*$", "", text, flags=re.MULTILINE)  # included outputs are the tool's own (docs/outputs)
    return {f"{number} {unit}" for number, unit in FIGURE.findall(text)}


@pytest.mark.parametrize("page", FIRST_PAGES)
def test_every_size_and_duration_on_the_first_pages_is_traced(page: str) -> None:
    traced = yaml.safe_load((ROOT / "docs" / "figures.yaml").read_text(encoding="utf-8"))["quoted"]
    untraced = _figures((ROOT / page).read_text(encoding="utf-8")) - set(traced)
    assert not untraced, f"{page}: {sorted(untraced)} come from no measurement or quoted source (docs/figures.yaml)"


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
