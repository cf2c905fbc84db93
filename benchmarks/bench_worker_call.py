"""What starting a worker from a command costs (issue 55: `compare`, `quantize` and `monitor` run their workers in
the training env instead of importing torch in process).

Each round runs, alternated, the anchor: the monitor worker started directly (`python -m aipc_env.workers.monitor
--duration D`, what the command's worker does), and the command as a user runs it (`python -m aipc_env monitor
--duration D --json`: parse, choose the env, start the worker with its interpreter, read its result back). The
ratio of a round is command / anchor; the median of ROUNDS rounds, with the spread. The difference is the
environment side's own cost: its interpreter's start, the env choice and the result's round trip.

Run: python benchmarks/bench_worker_call.py [--rounds N]   (writes benchmarks/results/worker_call.json)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(HERE))

from _common import machine, pinned, run_child, spread, write_result  # noqa: E402

DURATION = "0.3"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    rounds = []
    with tempfile.TemporaryDirectory(prefix="aipc-bench-worker-call-") as tmp:
        env = pinned(2)
        env.update(
            {
                "AIPC_ENV_DATA_DIR": f"{tmp}/data",
                "AIPC_ENV_STATE_DIR": f"{tmp}/state",
                "AIPC_ENV_CACHE_DIR": f"{tmp}/cache",
                "PYTHONPATH": str(ROOT / "src"),
            }
        )
        flags = ["--interval", "0.1", "--duration", DURATION, "--device", "none"]
        worker = [sys.executable, "-m", "aipc_env.workers.monitor", "--out", f"{tmp}/w.csv", *flags]
        command = [sys.executable, "-m", "aipc_env", "monitor", "--out", f"{tmp}/c.csv", *flags, "--json"]
        run_child(command, env=env, cwd=ROOT, pin=False)  # warm the file cache for both
        for _ in range(args.rounds):
            anchor = run_child(worker, env=env, cwd=ROOT, pin=False)
            measured = run_child(command, env=env, cwd=ROOT, pin=False)
            report = json.loads(measured.stdout)
            if report["samples"] < 2:
                raise SystemExit(f"the command's worker sampled {report['samples']} times")
            rounds.append(
                {
                    "worker_seconds": round(anchor.seconds, 3),
                    "command_seconds": round(measured.seconds, 3),
                    "ratio": round(measured.seconds / anchor.seconds, 4),
                }
            )
    ratio = statistics.median(r["ratio"] for r in rounds)
    result = {
        "benchmark": "aipc-env monitor (command starting its worker) vs the worker started directly",
        "ratio_median": round(ratio, 4),
        "worker_seconds": spread([r["worker_seconds"] for r in rounds]),
        "command_seconds": spread([r["command_seconds"] for r in rounds]),
        "rounds": rounds,
        "machine": machine(env, pinned=False),
    }
    write_result("worker_call", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
