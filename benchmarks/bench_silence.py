"""The longest silence (issues 24, 54): the most seconds between two output lines of the commands a newcomer runs
first, each run ROUNDS times, alternated, with fresh state, cache and output folders (so the model builds, the cache
phase and model loads happen every time):
- `aipc-env train` (the built-in default: its tiny base build, cache, fit imports, fit steps, held-out check);
- `aipc-env verify`; `aipc-env distill all`;
- `aipc-env train config.yaml --model tiny` on the guide's dataset (two more samples: 8) with three held out
  (`data.heldout_count`):
  the tiny-model build, the cache phase, the fit and its steps (seconds each on a CPU), the judge phase;
- the training env build (`ensure_tool_env`, what a pipx-installed tool runs on first use) into a fresh prefix,
  torch from this machine's wheel folder (AIPC_ENV_TORCH_WHEELS) and uv's download cache as this machine has it.

Every gap is also counted against the step it fell in (the step of the line before it: `tiny base:` lines are the
tiny base build, `fit: still importing` the fit imports, ...), so the result holds the longest silence of each
step; each step of STEPS must be seen. Target: no silence over 10 s on this machine, in any step.
Run: python benchmarks/bench_silence.py [--rounds N] [--only NAME ...]; writes benchmarks/results/silence.json after
every command (`rounds`: the rounds started; each command's `n`: its runs), with the 1-minute load average after each command.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _common import RESULTS, machine, spread, write_result  # noqa: E402

TARGET_S = 10.0
ENV_BUILD = """\
import sys
from pathlib import Path

from aipc_env.trainenv.tool_env import ensure_tool_env

ensure_tool_env(log=lambda line: print(line, flush=True), prefix=Path(sys.argv[1]))
"""
COMMANDS = {
    "env-build": [],
    "tiny-model": ["train", "config.yaml", "--model", "tiny"],
    "train": ["train"],
    "distill": ["distill", "all"],
    "verify": ["verify"],
}
EXIT_CODES = {"tiny-model": (0, 1)}
"""A random tiny model does not learn the edit: its judge's verdict is exit 1, as the guide says."""
TINY_CONFIG = """\
schema_version: 1
engine: builtin
model: {path: models/Qwen-Image-Edit-2511, quantize: nf4}
data: {datasets: [my-dataset], target_size: [64, 64], batch_size: 2, num_workers: 0, heldout_count: 3, heldout_steps: 4}
train: {max_train_steps: 4, checkpointing_steps: 2}
output_dir: runs/first
device: cpu
"""
"""A user's config before the model's download (docs/getting-started.md, "Your data on a tiny model"), two samples
held out so the judge phase runs."""
STEPS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(pattern))
    for name, pattern in (
        ("env build", r"^(training env:|  \.\.\. |Using Python|Resolved |Prepared |Installed | [+-] )"),
        ("phase start", r"^\[aipc-env [^\]]*\] phase |^\[aipc-env\] phase "),
        ("launcher", r"^aipc-env: "),
        ("tiny-model build", r"^tiny-model:"),
        ("tiny base build", r"^tiny base:"),
        ("cache imports", r"^cache: (starting|still importing)"),
        ("cache", r"^cache:"),
        ("fit imports", r"^fit: (starting|still importing)"),
        ("fit model load", r"^fit: (still )?loading the transformer"),
        ("fit steps", r"^(fit: step|step \d+/\d+ loss)"),
        ("fit held-out check", r"^fit: held-out check"),
        ("judge", r"^judge:"),
        ("verify", r"^\[(\.\.\.\.| ok |FAIL|skip|warn)"),
        ("distill", r"^distill:"),
    )
)
"""Each long step and how to know a line is its own; a gap counts against the step of the line before it."""
REQUIRED = ("tiny base build", "cache", "fit imports", "fit steps", "judge", "verify", "env build")
"""The steps issue 54 names: the benchmark fails when a run did not show one."""


def step_of(line: str) -> str:
    return next((name for name, pattern in STEPS if pattern.match(line)), "other")


def _user_folder(folder: Path) -> None:
    sys.path.insert(0, str(HERE.parent / "docs"))
    from gen_outputs import _write_dataset  # the getting-started guide's own small dataset

    _write_dataset(folder / "my-dataset")
    for i in (6, 7):  # 8 samples: three held out leave the five a held-out split needs to train on
        for sub, ext in (("training_images", ".png"), ("training_images", ".txt"), ("control_images", ".png")):
            shutil.copyfile(folder / "my-dataset" / sub / f"mug_0{i - 6}{ext}", folder / "my-dataset" / sub / f"mug_0{i}{ext}")
    (folder / "config.yaml").write_text(TINY_CONFIG, encoding="utf-8")


def longest_gap(
    argv: list[str], env: dict[str, str], cwd: str | None = None, codes: tuple[int, ...] = (0,)
) -> tuple[float, str, float, dict[str, float]]:
    """(longest gap in seconds, the line that ended it, total seconds, the longest gap in each step) of one run,
    stdout and stderr merged."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True, cwd=cwd)
    last, worst, after, step = start, 0.0, "", "other"
    by_step: dict[str, float] = {}
    assert proc.stdout is not None
    for line in proc.stdout:
        now = time.perf_counter()
        if now - last > worst:
            worst, after = now - last, line.strip()[:160]
        by_step[step] = max(by_step.get(step, 0.0), now - last)
        step = step_of(line.rstrip("\n"))
        last = now
    code = proc.wait()
    if code not in codes:
        raise SystemExit(f"{argv} exited with {code}")
    return worst, after, time.perf_counter() - start, by_step


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
    steps: dict[str, list[float]] = {}
    loads: list[float] = []
    code = 1
    for done in range(1, args.rounds + 1):
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
                if name == "env-build":
                    argv = [sys.executable, "-c", ENV_BUILD, f"{tmp}/env"]
                gap, line, total, by_step = longest_gap(argv, env, cwd=tmp, codes=EXIT_CODES.get(name, (0,)))
            loads.append(os.getloadavg()[0])
            print(f"round {done}/{args.rounds} {name}: longest silence {gap:.1f} s of {total:.0f} s", file=sys.stderr)
            for step, seconds in by_step.items():
                steps.setdefault(step, []).append(seconds)
            gaps[name].append(gap)
            totals[name].append(total)
            if gap >= worst_line.get(name, (0.0, ""))[0]:
                worst_line[name] = (gap, line)
            code = _write(args.only, chosen, done, gaps, worst_line, totals, steps, loads)  # an interrupted run keeps them
    return code


def _write(
    only: list[str] | None,
    chosen: dict[str, list[str]],
    rounds: int,
    gaps: dict[str, list[float]],
    worst_line: dict[str, tuple[float, str]],
    totals: dict[str, list[float]],
    steps: dict[str, list[float]],
    loads: list[float],
) -> int:
    result = {
        "benchmark": "longest silence between output lines",
        "target_s": TARGET_S,
        "rounds": rounds,
        "longest_gap_s": {name: spread(values) for name, values in gaps.items() if values},
        "line_after_the_longest_gap": {name: line for name, (_, line) in worst_line.items()},
        "total_s": {name: spread(values) for name, values in totals.items() if values},
        "longest_gap_by_step_s": {step: spread(values) for step, values in sorted(steps.items())},
        "load_average_1min": spread(loads),
        "machine": machine(pinned=False),
    }
    previous = RESULTS / "silence.json"
    if only and previous.is_file():  # keep the commands not measured this time
        old = json.loads(previous.read_text())
        for key in ("longest_gap_s", "line_after_the_longest_gap", "total_s", "longest_gap_by_step_s"):
            result[key] = {**{k: v for k, v in old.get(key, {}).items() if k not in chosen and k not in steps}, **result[key]}
    write_result("silence", result)
    missing = [step for step in REQUIRED if step not in result["longest_gap_by_step_s"]]
    if missing:
        print(f"no line of these steps was seen: {missing}", file=sys.stderr)
    return 0 if not missing and all(max(values) <= TARGET_S for values in gaps.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
