"""Per-file times of the test suite (issue 35): reads the JUnit XML files pytest wrote (`--junitxml`) for the fast
and the slow tier and writes benchmarks/results/suite.json: each tier's wall time (given, as measured around the
pytest run), each test file's summed test time, slowest first, and its CPU seconds where the run recorded them.

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


def _file_of(case: ET.Element) -> str:
    module = case.get("classname", "").split(".")
    return "/".join(module[:2]) + ".py" if len(module) >= 2 else case.get("file", "?")


def _costliest_first(sums: dict[str, float]) -> dict[str, float]:
    return dict(sorted(((k, round(v, 1)) for k, v in sums.items()), key=lambda kv: -kv[1]))


def file_times(junit: Path) -> dict[str, float]:
    times: dict[str, float] = defaultdict(float)
    for case in ET.parse(junit).getroot().iter("testcase"):
        times[_file_of(case)] += float(case.get("time") or 0)
    return _costliest_first(times)


def file_cpu(junit: Path) -> dict[str, float]:
    """Each test file's CPU seconds (the `cpu_s` property tests/conftest.py records per test: the test process's and
    its waited-for children's), most costly first; empty for a run that recorded none."""
    cpu: dict[str, float] = defaultdict(float)
    for case in ET.parse(junit).getroot().iter("testcase"):
        for prop in case.iter("property"):
            if prop.get("name") == "cpu_s":
                cpu[_file_of(case)] += float(prop.get("value") or 0)
    return _costliest_first(cpu)


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
        cpu = file_cpu(Path(junit))
        run["tiers"][name] = {
            "wall_s": float(wall),
            "worker_s": round(sum(files.values()), 1),  # type: ignore[index]
            "files": files,
            **({"cpu_s": round(sum(cpu.values()), 1), "cpu_files": cpu} if cpu else {}),
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
