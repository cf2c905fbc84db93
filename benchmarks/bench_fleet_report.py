"""`aipc-env fleet report` over 1,000 generated doctor reports (issue 14: <= 5 s here), with the HTML page and the
CSV written and a golden machine compared; median of ROUNDS runs, each a fresh process (imports included).

Run: python benchmarks/bench_fleet_report.py [--rounds N] [--count N]   (writes benchmarks/results/fleet-report.json)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from _common import machine, run_child, spread, write_result  # noqa: E402

from tests.support.reports import generate_reports  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--count", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        info = generate_reports(base / "reports", args.count)
        argv = [sys.executable, "-m", "aipc_env", "fleet", "report", str(base / "reports"), "--golden",
                str(info["golden"]), "--out", str(base / "r.html"), "--csv", str(base / "r.csv")]
        times = [run_child(argv, pin=False, ok_codes=(0, 1)).seconds for _ in range(args.rounds)]
        size = sum(p.stat().st_size for p in (base / "reports").iterdir())
    result = {"benchmark": "fleet report over generated doctor reports", "reports": args.count,
              "report_bytes_total": size, "seconds": spread(times), "target_seconds": 5.0,
              "rounds": args.rounds, "machine": machine(pinned=False)}
    write_result("fleet-report", result)
    return 0 if result["seconds"]["median"] <= 5.0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
