"""Torch threads when test processes outnumber cores (decision 74: the suite sets one OpenMP/MKL thread per process).

The slow tier runs three workers on this machine's two cores, each starting torch (trainings, the tool's workers).
Each round starts PROCESSES copies of `aipc-env verify --json` at once (imports, NF4 checks, a tiny QLoRA run of
--steps steps: what a slow test's training process does), twice, alternated: the anchor with the thread variables
unset (torch's default: one thread per core) and the measured batch with OMP_NUM_THREADS=MKL_NUM_THREADS=1. A batch's
time is its wall clock until the last copy ends; the ratio of a round is measured / anchor; the median of ROUNDS
rounds, with the spread. Every copy must pass (a copy that learned nothing would be fast for the wrong reason).

Run: python benchmarks/bench_threads.py [--rounds N] [--processes P] [--steps S]   (writes results/threads.json)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from _common import THREAD_VARS, machine, spread, write_result  # noqa: E402


def _batch(processes: int, steps: int, threads: str | None, tmp: Path) -> float:
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARS}
    if threads is not None:
        env.update({"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads})
    env["PYTHONPATH"] = str(ROOT / "src")
    argv = [sys.executable, "-m", "aipc_env", "verify", "--json", "--steps", str(steps), "--env", sys.prefix]
    children = []
    start = time.perf_counter()
    for i in range(processes):
        home = tmp / f"p{i}"
        home.mkdir(exist_ok=True)
        dirs = {f"AIPC_ENV_{d}_DIR": str(home / d.lower()) for d in ("DATA", "STATE", "CACHE")}
        children.append(subprocess.Popen(argv, env={**env, **dirs}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outputs = [child.communicate() for child in children]
    seconds = time.perf_counter() - start
    for child, (out, err) in zip(children, outputs, strict=True):
        if child.returncode != 0 or not json.loads(out)["passed"]:
            raise SystemExit(f"a verify copy failed ({child.returncode}):\n{out[-2000:]}\n{err[-2000:]}")
    return seconds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--processes", type=int, default=(os.cpu_count() or 2) + 1)
    ap.add_argument("--steps", type=int, default=600)
    args = ap.parse_args()
    rounds = []
    with tempfile.TemporaryDirectory(prefix="aipc-bench-threads-") as tmp:
        _batch(args.processes, args.steps, "1", Path(tmp))  # the file cache warm, each copy's tiny base trained once
        for _ in range(args.rounds):
            anchor = _batch(args.processes, args.steps, None, Path(tmp))
            measured = _batch(args.processes, args.steps, "1", Path(tmp))
            rounds.append(
                {"default_threads_s": round(anchor, 2), "one_thread_s": round(measured, 2), "ratio": round(measured / anchor, 4)}
            )
            print(json.dumps(rounds[-1]), file=sys.stderr, flush=True)
    result = {
        "benchmark": f"{args.processes} concurrent `aipc-env verify --steps {args.steps}`: one thread each vs torch's default",
        "processes": args.processes,
        "steps": args.steps,
        "ratio_median": round(statistics.median(r["ratio"] for r in rounds), 4),
        "default_threads_s": spread([r["default_threads_s"] for r in rounds]),
        "one_thread_s": spread([r["one_thread_s"] for r in rounds]),
        "rounds": rounds,
        "machine": machine({"OMP_NUM_THREADS": "1 (measured) / unset (anchor)"}, pinned=False),
    }
    write_result("threads", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
