"""Doctor speed: `aipc-env doctor` (no device probe) vs `python -m torch.utils.collect_env`, same env, one run.

Target (issue 2): doctor wall time <= 0.25x collect_env, and torch never imported on the doctor's path.
Run: python benchmarks/bench_doctor.py [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time


def _time(argv: list[str], repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        times.append(time.perf_counter() - start)
    return times


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    py = sys.executable
    # warm the file cache for both once
    _time([py, "-m", "aipc_env", "doctor", "--json"], 1)
    _time([py, "-m", "torch.utils.collect_env"], 1)
    doctor = _time([py, "-m", "aipc_env", "doctor", "--json"], args.repeat)
    collect = _time([py, "-m", "torch.utils.collect_env"], args.repeat)
    probe = subprocess.run([py, "-c", "import sys; from aipc_env.cli import main; main(['doctor','--json']);"
                            "print('torch' in sys.modules, file=sys.stderr)"],
                           capture_output=True, text=True, check=False)
    checks = len(json.loads(subprocess.run([py, "-m", "aipc_env", "doctor", "--json"], capture_output=True,
                                           text=True, check=False).stdout)["findings"])
    d, c = statistics.median(doctor), statistics.median(collect)
    result = {"doctor_median_s": round(d, 3), "collect_env_median_s": round(c, 3), "ratio": round(d / c, 3),
              "target_ratio": 0.25, "doctor_checks": checks,
              "torch_imported_by_doctor": probe.stderr.strip().splitlines()[-1] == "True", "repeat": args.repeat}
    print(json.dumps(result, indent=2))
    return 0 if result["ratio"] <= 0.25 and not result["torch_imported_by_doctor"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
