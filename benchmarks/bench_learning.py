"""What the held-out learning check adds to the built-in default run (issue 41: at most 20% of the run's wall time).

Each round runs the whole default, `python -m aipc_env train` without a config, as a user does (launcher, cache
phase, fit phase under accelerate), with the tiny base already trained (the first run on a machine trains it once,
about 10 s; that is the model's build, measured apart as `first_run_seconds`). The fit phase prints how long its
held-out check took; the ratio of a round is check / (run - check): the run without the check is the anchor, and
both come from the same run. Median of ROUNDS rounds, with the spread.

`--tiny-base FOLDER` starts from a tiny base already built (a `tiny-edit-base-*` folder of a per-user cache, checked
against its record like any cached base): on a busy machine the base's build takes longer than the rounds.

Run: python benchmarks/bench_learning.py [--rounds N] [--tiny-base FOLDER]   (writes benchmarks/results/learning-check.json)
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(HERE))

from _common import machine, pinned, run_child, spread, write_result  # noqa: E402

CHECK = re.compile(r"fit: held-out check done in ([0-9.]+) s")
VERDICT = re.compile(r"aipc-env: held-out distance to the targets .*")
BOUND = 0.2


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tiny-base", type=Path, help="a built tiny-edit-base-* folder to start from")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="aipc-bench-learning-") as tmp:
        if args.tiny_base:
            shutil.copytree(args.tiny_base, Path(tmp) / "cache" / "builtin" / args.tiny_base.name)
        env = pinned(2)
        env.update(
            {
                "AIPC_ENV_DATA_DIR": f"{tmp}/data",
                "AIPC_ENV_STATE_DIR": f"{tmp}/state",
                "AIPC_ENV_CACHE_DIR": f"{tmp}/cache",
                "PYTHONPATH": str(ROOT / "src"),
            }
        )
        argv = [sys.executable, "-m", "aipc_env", "train", "--env", str(Path(sys.executable).parent.parent)]
        first = run_child(argv, env=env, cwd=ROOT, pin=False)
        rounds = []
        for _ in range(args.rounds):
            child = run_child(argv, env=env, cwd=ROOT, pin=False)
            found = CHECK.search(child.stdout)
            if not found:
                raise SystemExit(f"no held-out check line in the run's output:\n{child.stdout[-2000:]}")
            check = float(found.group(1))
            rounds.append(
                {
                    "run_seconds": round(child.seconds, 3),
                    "check_seconds": check,
                    "ratio": round(check / (child.seconds - check), 4),
                    "verdict": VERDICT.search(child.stdout).group(0),
                }
            )  # type: ignore[union-attr]
    ratio = statistics.median(r["ratio"] for r in rounds)
    result = {
        "benchmark": "held-out learning check vs the rest of the built-in default run (same run)",
        "ratio_median": round(ratio, 4),
        "bound": BOUND,
        "within_bound": ratio <= BOUND,
        "check_seconds": spread([r["check_seconds"] for r in rounds]),
        "run_seconds": spread([r["run_seconds"] for r in rounds]),
        "first_run_seconds": round(first.seconds, 3),
        "tiny_base_given": bool(args.tiny_base),
        "rounds": rounds,
        "machine": machine(env, pinned=False),
    }
    write_result("learning-check", result)
    return 0 if ratio <= BOUND else 1


if __name__ == "__main__":
    sys.exit(main())
