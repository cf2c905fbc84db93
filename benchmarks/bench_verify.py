"""Verify speed on this machine (issue 5: the whole verify, excluding imports, under 60 s on CPU), with the
per-step time of the tiny NF4 QLoRA run. Runs `aipc-env verify --json` once and reads its timings.
Run: python benchmarks/bench_verify.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import time


def main() -> int:
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "aipc_env", "verify", "--json"], capture_output=True, text=True)
    wall = time.perf_counter() - start
    report = json.loads(out.stdout)
    tiny = next(s for s in report["steps"] if s["id"] == "tiny-qlora")["metrics"]
    result = {
        "passed": report["passed"],
        "device": report["device"],
        "work_seconds_excluding_imports": report["work_seconds"],
        "import_seconds": report["import_seconds"],
        "wall_seconds_total": round(wall, 2),
        "target_work_seconds": 60,
        "ratio_to_target": round(report["work_seconds"] / 60, 3),
        "tiny_run_seconds_per_step": tiny["seconds_per_step"],
        "tiny_run_first_step_s": tiny["first_step_s"],
        "tiny_run_peak_rss_mb": tiny["peak_rss_mb"],
        "per_step_seconds": {s["id"]: s["seconds"] for s in report["steps"]},
    }
    print(json.dumps(result, indent=2))
    return 0 if report["passed"] and report["work_seconds"] < 60 else 1


if __name__ == "__main__":
    raise SystemExit(main())
