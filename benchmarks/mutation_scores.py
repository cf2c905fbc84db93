"""Mutation scores per module from mutmut's results (run after `mutmut run`; `nox -s mutate` does both).

Reads `mutmut results --all true` (one "mutant: status" line each), the reviewed equivalent mutants in
tests/mutation-equivalents.yaml ({mutant: one-line reason}) and writes benchmarks/results/mutation.json: per module
the counts, the score (killed / mutants that are not judged equivalent; "no tests" and timeouts count against it),
whether it meets the 90% goal, and every survivor that is not judged equivalent. Exit 1 when a module misses the
goal or an equivalent entry names a mutant that no longer exists (the review went stale)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
EQUIVALENTS = ROOT / "tests" / "mutation-equivalents.yaml"
GOAL = 0.90
LINE = re.compile(r"^\s*(?P<name>[\w.]+)__mutmut_\d+: (?P<status>.+)$")
KILLED = {"killed"}


def module_of(mutant: str) -> str:
    """aipc_env.matrix.resolve.x_resolve_pair__mutmut_9 -> aipc_env.matrix.resolve (class methods: xǁClassǁm)."""
    return mutant.split("__mutmut_")[0].rsplit(".", 1)[0]


def scores(lines: list[str], equivalents: dict[str, str]) -> dict[str, dict]:
    by_module: dict[str, dict] = defaultdict(
        lambda: {
            "mutants": 0,
            "killed": 0,
            "survived": 0,
            "no_tests": 0,
            "timeout": 0,
            "other": 0,
            "equivalent": 0,
            "survivors": [],
        }
    )
    for line in lines:
        match = LINE.match(line)
        if not match:
            continue
        mutant = line.split(":")[0].strip()
        status = match["status"].strip()
        if status == "not checked":  # outside this run's MODULE filter: its module keeps its last score
            continue
        row = by_module[module_of(mutant)]
        row["mutants"] += 1
        if mutant in equivalents and status != "killed":
            row["equivalent"] += 1
        elif status in KILLED:
            row["killed"] += 1
        elif status == "survived":
            row["survived"] += 1
            row["survivors"].append(mutant)
        elif status == "no tests":
            row["no_tests"] += 1
            row["survivors"].append(mutant)
        elif status == "timeout":
            row["timeout"] += 1
        else:
            row["other"] += 1
            row["survivors"].append(f"{mutant} ({status})")
    for row in by_module.values():
        judged = row["mutants"] - row["equivalent"]
        row["score"] = round(row["killed"] / judged, 4) if judged else 1.0
        row["goal_met"] = row["score"] >= GOAL
    return dict(sorted(by_module.items()))


def main() -> int:
    out = subprocess.run(
        [sys.executable, "-m", "mutmut", "results", "--all", "true"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    equivalents = yaml.safe_load(EQUIVALENTS.read_text(encoding="utf-8")) or {}
    present = {line.split(":")[0].strip() for line in out if LINE.match(line)}
    stale = sorted(set(equivalents) - present)
    result = {
        "tool": "mutmut",
        "goal": GOAL,
        "modules": scores(out, equivalents),
        "stale_equivalents": stale,
        "equivalents_file": str(EQUIVALENTS.relative_to(ROOT)),
    }
    target = ROOT / "benchmarks" / "results" / "mutation.json"
    previous = json.loads(target.read_text(encoding="utf-8"))["modules"] if target.is_file() else {}
    result["modules"] = {**previous, **result["modules"]}  # a run of some modules keeps the others' scores
    target.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    for name, row in result["modules"].items():
        print(
            f"{name}: {row['score']:.1%} ({row['killed']} killed of {row['mutants'] - row['equivalent']}; "
            f"{row['equivalent']} equivalent, {len(row['survivors'])} survivor(s))" + ("" if row["goal_met"] else "  BELOW 90%")
        )
    if stale:
        print(f"stale entries in {EQUIVALENTS.name}: {stale}")
    return 0 if all(r["goal_met"] for r in result["modules"].values()) and not stale else 1


if __name__ == "__main__":
    sys.exit(main())
