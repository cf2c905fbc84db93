"""`aipc-env fleet report` over 10,000 generated doctor reports (issue 22: the page for 10,000 reports in under
10 s here): each round a fresh process (imports included) reads every report, compares it with a golden machine
and writes the HTML page and the CSV; then headless Chromium loads the page and runs its script (filtering and the
row counter). Median of ROUNDS rounds.

Run: python benchmarks/bench_fleet_report.py [--rounds N] [--count N]   (writes benchmarks/results/fleet-report.json)
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from _common import machine, run_child, spread, write_result  # noqa: E402

from tests.support.reports import generate_reports  # noqa: E402

TARGET_SECONDS = 10.0


def _browser_seconds(page: Path, profile: Path) -> float | None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        return None
    start = time.perf_counter()
    subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            "--dump-dom",
            page.as_uri() + "#drift=env",
        ],
        capture_output=True,
        check=True,
        timeout=300,
    )
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--count", type=int, default=10_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        info = generate_reports(base / "reports", args.count)
        argv = [
            sys.executable,
            "-m",
            "aipc_env",
            "fleet",
            "report",
            str(base / "reports"),
            "--golden",
            str(info["golden"]),
            "--out",
            str(base / "r.html"),
            "--csv",
            str(base / "r.csv"),
        ]
        report, browser, total = [], [], []
        for _ in range(args.rounds):
            seconds = run_child(argv, pin=False, ok_codes=(0, 1)).seconds
            shown = _browser_seconds(base / "r.html", base / "profile")
            report.append(seconds)
            if shown is not None:
                browser.append(shown)
            total.append(seconds + (shown or 0.0))
        size = sum(p.stat().st_size for p in (base / "reports").iterdir())
        page_bytes = (base / "r.html").stat().st_size
    result = {
        "benchmark": "fleet report over generated doctor reports, then the page in headless Chromium",
        "reports": args.count,
        "report_bytes_total": size,
        "page_bytes": page_bytes,
        "report_seconds": spread(report),
        "browser_seconds": spread(browser) if browser else None,
        "seconds": spread(total),
        "target_seconds": TARGET_SECONDS,
        "rounds": args.rounds,
        "machine": machine(pinned=False),
    }
    write_result("fleet-report", result)
    return 0 if result["seconds"]["median"] <= TARGET_SECONDS else 1


if __name__ == "__main__":
    raise SystemExit(main())
