"""The newcomer's commands, warm (issue 13), side by side in one run, alternated ROUNDS times:
- `nox -s doctor` vs `python -m torch.utils.collect_env` in the training env: median ratio <= 0.5;
- `nox -s train` (the built-in default) vs `python -m aipc_env train` run directly in the same env: <= 1.3.

The nox venvs live in a temporary --envdir; the first (cold) run of each session installs and is reported apart.
Where the PyTorch CPU index is unreachable, set AIPC_ENV_TORCH_WHEELS (a folder with the CPU torch wheel).
Run: python benchmarks/bench_nox.py [--rounds N]   (needs nox[uv]; writes benchmarks/results/nox.json)
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from _common import machine, run_child, spread, write_result  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        env = dict(
            os.environ,
            AIPC_ENV_STATE_DIR=str(base / "state"),
            AIPC_ENV_CACHE_DIR=str(base / "cache"),
            AIPC_ENV_DATA_DIR=str(base / "data"),
        )
        nox = [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "--envdir", str(base / "nox")]
        cold_doctor = run_child(nox + ["-s", "doctor"], env, pin=False, ok_codes=(0, 1))
        cold_train = run_child(nox + ["-s", "train"], env, pin=False)
        train_python = str(base / "nox" / "train" / ("Scripts/python.exe" if os.name == "nt" else "bin/python"))
        doctor, collect, nox_train, direct_train = [], [], [], []
        for _ in range(args.rounds):
            doctor.append(run_child(nox + ["-s", "doctor", "--", "--json"], env, pin=False, ok_codes=(0, 1)).seconds)
            collect.append(run_child([train_python, "-m", "torch.utils.collect_env"], env, pin=False).seconds)
            nox_train.append(run_child(nox + ["-s", "train"], env, pin=False).seconds)
            direct_train.append(run_child([train_python, "-m", "aipc_env", "train"], env, pin=False).seconds)
    doctor_ratio = statistics.median(doctor) / statistics.median(collect)
    train_ratio = statistics.median(nox_train) / statistics.median(direct_train)
    result = {
        "benchmark": "warm nox sessions vs their anchors",
        "nox_doctor_s": spread(doctor),
        "collect_env_s": spread(collect),
        "doctor_ratio_median": round(doctor_ratio, 3),
        "doctor_target": 0.5,
        "nox_train_s": spread(nox_train),
        "direct_train_s": spread(direct_train),
        "train_ratio_median": round(train_ratio, 3),
        "train_target": 1.3,
        "cold_first_run_s": {"doctor": round(cold_doctor.seconds, 1), "train": round(cold_train.seconds, 1)},
        "doctor_exit_code_note": "the doctor exits 1 on a machine without an Intel GPU; that is its verdict",
        "rounds": args.rounds,
        "torch_wheels": os.environ.get("AIPC_ENV_TORCH_WHEELS"),
        "machine": machine(pinned=False),
    }
    write_result("nox", result)
    return 0 if doctor_ratio <= 0.5 and train_ratio <= 1.3 else 1


if __name__ == "__main__":
    raise SystemExit(main())
