"""Doctor speed (issues 2 and 26): `aipc-env doctor --json` (no device probe) vs `python -m torch.utils.collect_env`,
both in this interpreter's env, alternated in one run, on two machine shapes:

- bare: PATH holds only the system folders;
- runbook: shaped like the runbook's machines: a Miniforge-style root (`conda-meta/` records of conda, mamba and
  python; `bin/conda`, a Python entry point that starts a conda stand-in importing a stack like conda's, since
  the real conda cannot be installed from PyPI; `bin/mamba`, a native-like stand-in as mamba 2 is) and a venv
  holding the real conda-lock from PyPI, all on PATH. collect_env runs `conda list` there, as on a real machine.

Target (issue 26): doctor <= 0.25x collect_env on the runbook shape (median of the rounds), torch never imported
on the doctor's path. Run: python benchmarks/bench_doctor.py [--rounds N]; writes benchmarks/results/doctor.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _common import machine, pinned, run_child, spread, write_result  # noqa: E402

CACHE = HERE / ".cache" / "doctor-shape"
CONDA_LOCK = "conda-lock==4.0.3"
CONDA_VERSION, MAMBA_VERSION, PYTHON_VERSION = "25.9.1", "2.3.2", "3.12.12"
TARGET = 0.25

CONDA_STAND_IN = """#!{python}
# conda's entry point shape; the stand-in imports a stack like conda's own start-up before it answers.
import sys
import json, ssl, email.parser, urllib.request, logging, argparse, yaml, requests  # noqa: F401
if sys.argv[1:2] == ["--version"]:
    print("conda {version}")
"""


def _record(prefix: Path, name: str, version: str, build: str) -> None:
    meta = prefix / "conda-meta"
    meta.mkdir(parents=True, exist_ok=True)
    (meta / f"{name}-{version}-{build}.json").write_text(
        json.dumps(
            {
                "name": name,
                "version": version,
                "build": build,
                "build_number": 0,
                "subdir": "linux-64",
                "channel": "https://conda.anaconda.org/conda-forge",
                "files": [f"bin/{name}"],
            }
        )
    )


def runbook_shape() -> list[Path]:
    """Build (once, cached) the runbook machine's conda layout; the folders to put on PATH."""
    root, tools = CACHE / "miniforge3", CACHE / "conda-lock-venv"
    if not (tools / "bin" / "conda-lock").is_file():
        shutil.rmtree(tools, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(tools)], check=True)
        subprocess.run([str(tools / "bin" / "python"), "-m", "pip", "install", "-q", CONDA_LOCK], check=True)
    bindir = root / "bin"
    bindir.mkdir(parents=True, exist_ok=True)
    _record(root, "conda", CONDA_VERSION, "py312h7900ff3_0")
    _record(root, "mamba", MAMBA_VERSION, "h0f3c2d4_1")
    _record(root, "python", PYTHON_VERSION, "h9e4cc4f_0_cpython")
    conda = bindir / "conda"
    conda.write_text(CONDA_STAND_IN.format(python=tools / "bin" / "python", version=CONDA_VERSION))
    mamba = bindir / "mamba"
    mamba.write_text(f"#!/bin/sh\necho {MAMBA_VERSION}\n")
    for script in (conda, mamba):
        script.chmod(0o755)
    return [bindir, tools / "bin"]


def shape_env(extra_path: list[Path]) -> dict[str, str]:
    env = pinned(1)
    env["PATH"] = os.pathsep.join([str(p) for p in extra_path] + ["/usr/local/bin", "/usr/bin", "/bin"])
    for var in ("CONDA_EXE", "MAMBA_EXE", "CONDA_PREFIX", "VIRTUAL_ENV"):
        env.pop(var, None)
    if extra_path:
        env["CONDA_EXE"] = str(extra_path[0] / "conda")
    return env


def measure(env: dict[str, str], rounds: int) -> dict[str, object]:
    py = sys.executable
    doctor = [py, "-m", "aipc_env", "doctor", "--json"]
    collect = [py, "-m", "torch.utils.collect_env"]
    run_child(doctor, env, ok_codes=(0, 1))  # warm the file cache once for each side
    run_child(collect, env)
    d_times, c_times, ratios = [], [], []
    for _ in range(rounds):  # alternated: the two sides see the same machine state
        d = run_child(doctor, env, ok_codes=(0, 1)).seconds
        c = run_child(collect, env).seconds
        d_times.append(d)
        c_times.append(c)
        ratios.append(d / c)
    report = json.loads(run_child(doctor, env, ok_codes=(0, 1)).stdout)
    conda = (
        {t["name"]: {"version": t["version"], "source": t.get("version_source")} for t in report["facts"]["conda"]}
        if "facts" in report
        else {}
    )
    return {
        "doctor_s": spread(d_times),
        "collect_env_s": spread(c_times),
        "ratio_median": round(statistics.median(d_times) / statistics.median(c_times), 3),
        "ratio_per_round": spread(ratios),
        "conda_tools_seen": conda,
    }


def torch_imported(env: dict[str, str]) -> bool:
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from aipc_env.cli import main\n"
            "try:\n    main(['doctor', '--json'])\nexcept SystemExit:\n    pass\n"
            "print('torch' in sys.modules, file=sys.stderr)",
        ],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    return probe.stderr.strip().splitlines()[-1] == "True"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    if args.rounds < 5:
        parser.error("--rounds must be at least 5")
    shapes = {"bare": shape_env([]), "runbook": shape_env(runbook_shape())}
    result: dict[str, object] = {
        "benchmark": "aipc-env doctor --json vs python -m torch.utils.collect_env",
        "target_ratio_runbook": TARGET,
        "rounds": args.rounds,
        "alternated": True,
    }
    for name, env in shapes.items():
        result[name] = measure(env, args.rounds)
    result["torch_imported_by_doctor"] = torch_imported(shapes["runbook"])
    result["machine"] = machine(shapes["bare"], pinned=True)
    write_result("doctor", result)
    ok = result["runbook"]["ratio_median"] <= TARGET and not result["torch_imported_by_doctor"]  # type: ignore[index]
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
