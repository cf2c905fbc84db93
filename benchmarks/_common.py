"""Helpers shared by the benchmarks: pinned threads, child processes with peak RSS, medians with spread, and a
JSON result with the machine's details in benchmarks/results/."""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "TORCH_NUM_THREADS")


def pinned(threads: int = 1) -> dict[str, str]:
    """The environment of a pinned child: `threads` threads for every math library."""
    env = dict(os.environ)
    for var in THREAD_VARS:
        env[var] = str(threads)
    return env


def taskset() -> list[str]:
    """Pin children to one CPU where taskset exists (less noise from the scheduler moving them)."""
    return ["taskset", "-c", "0"] if shutil.which("taskset") and sys.platform.startswith("linux") else []


@dataclass
class Child:
    seconds: float
    peak_rss_mb: float
    stdout: str
    cpu_seconds: float = 0.0
    """user + system CPU of the child (and of the children it waited for), where wait4 reports it"""


def run_child(
    argv: list[str],
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    pin: bool = True,
    ok_codes: tuple[int, ...] = (0,),
) -> Child:
    """Run a child to completion; its wall time, peak RSS (MiB) and stdout. A failure stops the benchmark."""
    import tempfile

    with tempfile.TemporaryFile() as out_f, tempfile.TemporaryFile() as err_f:
        start = time.perf_counter()
        proc = subprocess.Popen((taskset() if pin else []) + argv, stdout=out_f, stderr=err_f, env=env, cwd=cwd)
        rss = cpu = 0.0
        if hasattr(os, "wait4"):  # reap it ourselves to read this child's own peak RSS and CPU
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            rss, cpu = usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime
        else:  # pragma: no cover - Windows
            proc.wait()
        seconds = time.perf_counter() - start
        out_f.seek(0)
        err_f.seek(0)
        out, err = out_f.read().decode("utf-8", "replace"), err_f.read().decode("utf-8", "replace")
    if proc.returncode not in ok_codes:
        raise SystemExit(f"{argv} failed ({proc.returncode}):\n{out[-2000:]}\n{err[-2000:]}")
    return Child(seconds, rss, out, cpu)


def spread(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "median": round(statistics.median(ordered), 5),
        "min": round(ordered[0], 5),
        "max": round(ordered[-1], 5),
        "n": len(ordered),
    }


def machine(env: dict[str, str] | None = None, *, pinned: bool) -> dict[str, object]:
    """The machine's details; `pinned` says whether the children ran under taskset (run_child's pin=)."""
    brand = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                brand = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    versions = {}
    for name in ("torch", "bitsandbytes", "diffusers", "peft", "nox", "uv"):
        try:
            from importlib.metadata import version

            versions[name] = version(name)
        except Exception:  # noqa: BLE001 - informative only
            versions[name] = None
    return {
        "cpu": brand,
        "logical_cores": os.cpu_count(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "threads": (env or {}).get("OMP_NUM_THREADS"),
        "pinned_cpu": bool(pinned and taskset()),
        "packages": versions,
        "measured_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    }


def write_result(name: str, result: dict) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    print(f"wrote {path}")
    return path
