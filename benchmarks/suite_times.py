"""Per-file times of the test suite (issue 35): reads the JUnit XML files pytest wrote (`--junitxml`) for the fast
and the slow tier and writes benchmarks/results/suite.json: each tier's wall time (given, as measured around the
pytest run) and each test file's summed test time, slowest first.

    python benchmarks/suite_times.py --label before FAST.xml:WALL_S SLOW.xml:WALL_S

A second label adds to the same file, so `before` and `after` sit side by side with their ratio. The times are of
this machine (2 cores, two xdist workers, one file per worker at a time); the file sums are worker time, so a tier's
wall time is about half their total when both workers stay busy."""

from __future__ import annotations

import argparse
import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS, machine


def file_times(junit: Path) -> dict[str, float]:
    times: dict[str, float] = defaultdict(float)
    for case in ET.parse(junit).getroot().iter("testcase"):
        module = case.get("classname", "").split(".")
        name = "/".join(module[:2]) + ".py" if len(module) >= 2 else case.get("file", "?")
        times[name] += float(case.get("time") or 0)
    return dict(sorted(((k, round(v, 1)) for k, v in times.items()), key=lambda kv: -kv[1]))


def slowest_tests(junit: Path, count: int = 15) -> dict[str, float]:
    """The tier's slowest tests (setup included, as JUnit counts it): what a split of a long file across workers
    (tests/conftest.py WORKER_GROUPS) is decided from."""
    times = {
        f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name', '?')}": float(case.get("time") or 0)
        for case in ET.parse(junit).getroot().iter("testcase")
    }
    return dict(sorted(((k, round(v, 1)) for k, v in times.items()), key=lambda kv: -kv[1])[:count])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--label", required=True)
    parser.add_argument("--note", default="")
    parser.add_argument("tiers", nargs="+", help="JUNIT.xml:WALL_SECONDS, fast tier first")
    args = parser.parse_args()
    path = RESULTS / "suite.json"
    result = json.loads(path.read_text()) if path.is_file() else {"runs": {}}
    run: dict[str, object] = {"note": args.note, "tiers": {}}
    for name, spec in zip(("fast", "slow"), args.tiers):
        junit, wall = spec.rsplit(":", 1)
        files = file_times(Path(junit))
        run["tiers"][name] = {
            "wall_s": float(wall),
            "worker_s": round(sum(files.values()), 1),  # type: ignore[index]
            "files": files,
            "slowest_tests": slowest_tests(Path(junit)),
        }
    run["wall_s"] = round(sum(t["wall_s"] for t in run["tiers"].values()), 1)  # type: ignore[attr-defined]
    result["runs"][args.label] = run
    result["machine"] = machine(pinned=False)
    runs = result["runs"]
    if "before" in runs and "after" in runs:
        result["after_over_before"] = round(runs["after"]["wall_s"] / runs["before"]["wall_s"], 3)
    RESULTS.mkdir(exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{path}: {args.label} {run['wall_s']} s")


if __name__ == "__main__":
    main()
