"""What a Python process of the suite costs when it may keep the bytecode it compiles (decision 78: `nox -s tests`
sets PYTHONPYCACHEPREFIX and leaves out PYTHONDONTWRITEBYTECODE, which CI's machine sets).

Two processes, each measured both ways, alternated in every round: the anchor under PYTHONDONTWRITEBYTECODE=1 (every
module compiled from source each time), then with a bytecode folder warmed once before the rounds (what every
process after the first reads). The processes: a training phase's start (the engine module and the stack a phase
imports: diffusers' QwenImage edit pipeline, peft, bitsandbytes, accelerate) and a CLI call (`aipc-env --version`).
CPU seconds (user + system) of each child; the ratio of a round is kept / anchor; the median of ROUNDS rounds with
the spread.

Run: python benchmarks/bench_bytecode.py [--rounds N]   (writes benchmarks/results/bytecode.json)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from _common import machine, pinned, run_child, spread, write_result  # noqa: E402

PROCESSES = {
    "training phase start": (
        "import aipc_env.workers.train.engine, peft, bitsandbytes, accelerate; "
        "from diffusers import QwenImageEditPipeline, QwenImageTransformer2DModel"
    ),
    "cli call": "from aipc_env.cli import main; raise SystemExit(main(['--version']))",
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    result: dict[str, object] = {"benchmark": "a process keeping its bytecode vs compiling every module each start"}
    with tempfile.TemporaryDirectory(prefix="aipc-bench-bytecode-") as tmp:
        base = pinned(1)
        base["PYTHONPATH"] = str(ROOT / "src")
        base.pop("PYTHONPYCACHEPREFIX", None)
        compiling = {**base, "PYTHONDONTWRITEBYTECODE": "1"}
        keeping = {k: v for k, v in base.items() if k != "PYTHONDONTWRITEBYTECODE"}
        keeping["PYTHONPYCACHEPREFIX"] = tmp
        for name, code in PROCESSES.items():
            argv = [sys.executable, "-c", code]
            run_child(argv, env=keeping, cwd=ROOT, pin=False)  # writes the bytecode once
            rounds = []
            for _ in range(args.rounds):
                anchor = run_child(argv, env=compiling, cwd=ROOT, pin=False)
                kept = run_child(argv, env=keeping, cwd=ROOT, pin=False)
                rounds.append(
                    {
                        "compiling_cpu_s": round(anchor.cpu_seconds, 3),
                        "kept_cpu_s": round(kept.cpu_seconds, 3),
                        "ratio": round(kept.cpu_seconds / anchor.cpu_seconds, 4),
                    }
                )
            result[name] = {
                "ratio_median": round(statistics.median(r["ratio"] for r in rounds), 4),
                "compiling_cpu_s": spread([r["compiling_cpu_s"] for r in rounds]),
                "kept_cpu_s": spread([r["kept_cpu_s"] for r in rounds]),
                "rounds": rounds,
            }
    result["machine"] = machine(base, pinned=False)
    write_result("bytecode", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
