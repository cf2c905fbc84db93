"""Sample system and device memory during a run into a CSV and draw a plot at the end.

`python -m aipc_env.workers.monitor --out memory.csv` runs until SIGTERM/SIGINT, --duration, or --pid exits; the
launcher starts it beside training when the config says `monitor: true`. Device memory is read with torch's
mem_get_info (whole device, all processes) when torch and an XPU/CUDA device are present.
"""

from __future__ import annotations

import csv
import signal
import sys
import time
from pathlib import Path
from types import FrameType

from aipc_env.core.procs import pid_alive
from aipc_env.errors import ExitCode
from aipc_env.facts.memory import system_memory

__all__ = ["FIELDS", "DeviceMemory", "main", "run_monitor"]

FIELDS = ["time", "elapsed_s", "system_used_gb", "system_available_gb", "device_used_gb", "device_total_gb"]


class DeviceMemory:
    """Whole-device memory of the first XPU/CUDA device, or nothing."""

    def __init__(self, kind: str = "auto") -> None:
        self.backend = None
        if kind == "none":
            return
        try:
            import torch
        except ImportError:
            return
        xpu = getattr(torch, "xpu", None)
        if kind in ("auto", "xpu") and xpu is not None and xpu.is_available():
            self.backend = xpu
        elif kind in ("auto", "cuda") and torch.cuda.is_available():
            self.backend = torch.cuda

    unsupported: str | None = None
    """Why the device's free memory cannot be read (set at the first failure; device columns stay empty after)."""

    def read(self) -> tuple[float | None, float | None]:
        if self.backend is None or self.unsupported is not None:
            return None, None
        try:
            free, total = self.backend.mem_get_info(0)
        except (RuntimeError, AssertionError, NotImplementedError, ValueError, TypeError) as exc:
            # some Intel GPUs do not support querying free memory (pytorch/pytorch#189811): device memory unknown
            self.unsupported = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
            print(f"monitor: device memory not sampled: {self.unsupported}", file=sys.stderr)
            return None, None
        return (total - free) / 1e9, total / 1e9


def _plot(csv_path: Path, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with csv_path.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    if not rows:
        return
    t = [float(r["elapsed_s"]) for r in rows]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(t, [float(r["system_used_gb"]) for r in rows], label="system used (GB)")
    if rows[0]["device_used_gb"]:
        ax.plot(t, [float(r["device_used_gb"]) for r in rows], label="device used (GB)")
    ax.set_xlabel("seconds")
    ax.set_ylabel("GB (decimal)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)


class _Stop:
    flag = False


def run_monitor(
    out: Path,
    *,
    interval: float = 1.0,
    duration: float | None = None,
    pid: int | None = None,
    device: str = "auto",
    plot: bool = True,
) -> int:
    """Sample until stopped; returns the number of samples written."""

    def stop(_signum: int, _frame: FrameType | None) -> None:
        _Stop.flag = True

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stop)
    dev = DeviceMemory(device)
    out.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    count = 0
    with out.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(FIELDS)
        while not _Stop.flag:
            total, available = system_memory()
            used, dtotal = dev.read()
            writer.writerow(
                [
                    time.strftime("%Y-%m-%dT%H:%M:%S"),
                    f"{time.monotonic() - start:.2f}",
                    f"{(total - available) / 1e9:.3f}",
                    f"{available / 1e9:.3f}",
                    "" if used is None else f"{used:.3f}",
                    "" if dtotal is None else f"{dtotal:.3f}",
                ]
            )
            fh.flush()
            count += 1
            if duration is not None and time.monotonic() - start >= duration:
                break
            if pid is not None and not pid_alive(pid):
                break
            deadline = time.monotonic() + interval
            while not _Stop.flag and time.monotonic() < deadline:
                time.sleep(min(0.05, interval))
    if plot:
        _plot(out, out.with_suffix(".png"))
    return count


def main(argv: list[str] | None = None) -> int:
    """The monitor worker: beside a run (train/run.py) it says how many samples it wrote; for `aipc-env monitor`
    (commands/monitor.py, which checks the arguments) its report goes to --result."""
    from aipc_env.core.formats import write_model
    from aipc_env.launch.hops import MonitorRun, run_worker
    from aipc_env.train.results import MonitorReport

    args = MonitorRun.parse(argv)

    def body() -> int:
        out = Path(args.out)
        n = run_monitor(out, interval=args.interval, duration=args.duration, pid=args.pid, device=args.device)
        if args.result is None:
            print(f"monitor: {n} samples in {args.out}")
            return ExitCode.OK
        png = out.with_suffix(".png")
        write_model(args.result, MonitorReport(samples=n, csv=str(args.out), plot=str(png) if png.is_file() else None))
        return ExitCode.OK

    return run_worker("monitor", body, result=args.result)


if __name__ == "__main__":
    sys.exit(main())
