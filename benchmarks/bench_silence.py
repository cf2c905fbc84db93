"""The longest silence (issue 24): the most seconds between two output lines of the commands a newcomer runs first,
`aipc-env train` (the built-in default), `aipc-env verify`, `aipc-env distill all` and `aipc-env train config.yaml
--model tiny` (a small dataset on the tiny model built by the run: its tiny-model, cache and fit phases), each run
ROUNDS times, alternated, with a fresh output folder (so the model build, the cache phase and model loads happen
every time).

Target: no silence over 10 s on this machine. Run: python benchmarks/bench_silence.py [--rounds N]; writes
benchmarks/results/silence.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _common import RESULTS, machine, spread, write_result  # noqa: E402

TARGET_S = 10.0
COMMANDS = {
    "train": ["train"],
    "verify": ["verify"],
    "distill": ["distill", "all"],
    "tiny-model": ["train", "config.yaml", "--model", "tiny"],
}
TINY_CONFIG = """\
schema_version: 1
engine: builtin
model: {path: models/Qwen-Image-Edit-2511, quantize: nf4}
data: {datasets: [my-dataset], target_size: [64, 64], batch_size: 2, num_workers: 0}
train: {max_train_steps: 4, checkpointing_steps: 2}
output_dir: runs/first
device: cpu
"""
"""A user's config before the model's download (docs/getting-started.md, "Your data on a tiny model")."""


def _user_folder(folder: Path) -> None:
    sys.path.insert(0, str(HERE.parent / "docs"))
    from gen_outputs import _write_dataset  # the getting-started guide's own small dataset

    _write_dataset(folder / "my-dataset")
    (folder / "config.yaml").write_text(TINY_CONFIG, encoding="utf-8")


def longest_gap(argv: list[str], env: dict[str, str], cwd: str | None = None) -> tuple[float, str, float]:
    """(longest gap in seconds, the line that ended it, total seconds) of one run, stdout and stderr merged."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True, cwd=cwd)
    last, worst, after = start, 0.0, ""
    assert proc.stdout is not None
    for line in proc.stdout:
        now = time.perf_counter()
        if now - last > worst:
            worst, after = now - last, line.strip()[:160]
        last = now
    code = proc.wait()
    if code != 0:
        raise SystemExit(f"{argv} exited with {code}")
    return worst, after, time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--only",
        choices=sorted(COMMANDS),
        action="append",
        help="measure only these commands; the others keep their last results in the file",
    )
    args = parser.parse_args()
    chosen = {name: command for name, command in COMMANDS.items() if not args.only or name in args.only}
    gaps: dict[str, list[float]] = {name: [] for name in chosen}
    worst_line: dict[str, tuple[float, str]] = {}
    totals: dict[str, list[float]] = {name: [] for name in chosen}
    for _ in range(args.rounds):
        for name, command in chosen.items():  # alternated
            with tempfile.TemporaryDirectory() as tmp:
                env = dict(
                    os.environ,
                    AIPC_ENV_STATE_DIR=f"{tmp}/state",
                    AIPC_ENV_CACHE_DIR=f"{tmp}/cache",
                    AIPC_ENV_DATA_DIR=f"{tmp}/data",
                    PYTHONUNBUFFERED="1",
                )
                if name == "tiny-model":
                    _user_folder(Path(tmp))
                argv = [sys.executable, "-m", "aipc_env", *command, "--env", sys.prefix]
                gap, line, total = longest_gap(argv, env, cwd=tmp)
            gaps[name].append(gap)
            totals[name].append(total)
            if gap >= worst_line.get(name, (0.0, ""))[0]:
                worst_line[name] = (gap, line)
    result = {
        "benchmark": "longest silence between output lines",
        "target_s": TARGET_S,
        "rounds": args.rounds,
        "longest_gap_s": {name: spread(values) for name, values in gaps.items()},
        "line_after_the_longest_gap": {name: line for name, (_, line) in worst_line.items()},
        "total_s": {name: spread(values) for name, values in totals.items()},
        "machine": machine(pinned=False),
    }
    previous = RESULTS / "silence.json"
    if args.only and previous.is_file():  # keep the commands not measured this time
        old = json.loads(previous.read_text())
        for key in ("longest_gap_s", "line_after_the_longest_gap", "total_s"):
            result[key] = {**{k: v for k, v in old.get(key, {}).items() if k not in chosen}, **result[key]}
    write_result("silence", result)
    return 0 if all(max(values) <= TARGET_S for values in gaps.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
