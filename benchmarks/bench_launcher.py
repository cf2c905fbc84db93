"""Launcher overhead: everything before the engine's first line runs, oneAPI absent (issue 4: < 1 s).

Measures, in one run, wall time from starting `sh launch.sh` until the phase's first statement executes
(the phase writes time.time() as its first line), against a bare `python -c` start as the anchor.
Run: python benchmarks/bench_launcher.py [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from aipc_env.launch.plan import LaunchPlan, Phase, base_env  # noqa: E402
from aipc_env.launch.render import write_launcher  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        stamp = Path(tmp) / "first-line"
        body = f"import time; open({str(stamp)!r}, 'w').write(repr(time.time()))"
        plan = LaunchPlan(
            platform="linux-64",
            run_dir=str(Path(tmp) / "run"),
            python=sys.executable,
            env=base_env("linux-64", pythonpath=[str(ROOT / "src")], device=None, engine="builtin"),
            phases=[Phase(name="fit", argv=[sys.executable, "-c", body])],
            log_file=str(Path(tmp) / "run" / "train.log"),
        )
        script = write_launcher(plan)
        launcher, bare = [], []
        for _ in range(args.repeat):
            start = time.time()
            subprocess.run(["sh", str(script)], stdout=subprocess.DEVNULL, check=True)
            launcher.append(float(stamp.read_text()) - start)
            start = time.time()
            subprocess.run([sys.executable, "-c", body], check=True)
            bare.append(float(stamp.read_text()) - start)
    lo, b = statistics.median(launcher), statistics.median(bare)
    print(
        json.dumps(
            {
                "launcher_overhead_median_s": round(lo, 4),
                "bare_python_start_median_s": round(b, 4),
                "ratio_vs_bare": round(lo / b, 2),
                "target_s": 1.0,
                "repeat": args.repeat,
            },
            indent=2,
        )
    )
    return 0 if lo < 1.0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
