"""`aipc-env fleet report` over 1,000 generated doctor reports: failing checks grouped by check and fix, drift
against a golden machine, unreadable and newer reports listed without stopping the rest, a CSV, and an HTML page
checked in a real headless Chromium (a screenshot goes to test-artifacts/)."""

from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess

import pytest

from tests.conftest import ROOT, require_tool, run_cli
from tests.support.reports import generate_reports

COUNT = 1000


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    base = tmp_path_factory.mktemp("fleet-report")
    info = generate_reports(base / "reports", COUNT)
    (base / "reports" / "broken.json").write_text("{not json")
    newer = json.loads((base / "reports" / "AIPC-0000.json").read_text())
    newer["schema_version"] = 9
    (base / "reports" / "from-the-future.json").write_text(json.dumps(newer))
    out = base / "report.html"
    result = run_cli("fleet", "report", str(base / "reports"), "--golden", str(info["golden"]), "--out", str(out),
                     "--csv", str(base / "report.csv"), "--json", timeout=300)
    return base, info, result


def test_failures_grouped_and_drift_found(fleet):
    base, info, result = fleet
    assert result.returncode == 1, result.stderr[-2000:]
    report = json.loads(result.stdout)
    rows = {m["hostname"] or m["key"]: m for m in report["machines"]}
    assert len(report["machines"]) == COUNT + 2
    for name in info["drifted"]:
        assert "drifted" in rows[name]["state"] and "bitsandbytes 0.49.1/0.50.2" in rows[name]["drift"][0]
    for name in info["failing"]:
        assert rows[name]["state"].startswith("failing") and rows[name]["failed"] == ["ram"]
    ram = next(g for g in report["groups"] if g["check"] == "ram")
    assert ram["status"] == "fail" and len(ram["machines"]) == len(info["failing"]) and "32 GB" in ram["fix"]
    assert rows["broken"]["state"] == "unreadable" and rows["from-the-future"]["state"] == "newer"
    assert "newer aipc-env" in rows["from-the-future"]["problem"]
    ok = [m for m in report["machines"] if m["state"] == "ok"]
    assert len(ok) == COUNT - len(set(info["drifted"]) | set(info["failing"]))
    lines = list(csv.DictReader(io.StringIO((base / "report.csv").read_text())))
    assert len(lines) == COUNT + 2 and {"machine", "state", "failed_checks", "drift"} <= set(lines[0])


def test_machines_are_keyed_by_their_identity(tmp_path):
    info = generate_reports(tmp_path / "r", 3)
    (tmp_path / "r" / "AIPC-0001.json").rename(tmp_path / "r" / "renamed.json")
    report = json.loads(run_cli("fleet", "report", str(tmp_path / "r"), "--json").stdout)
    keys = {m["key"] for m in report["machines"]}
    assert "00000000-0000-0000-0000-000000000002" in keys  # the machine id, whatever the file is called
    assert info["golden"].is_file()


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def test_the_html_page_in_a_headless_browser(fleet, tmp_path):
    base, info, _ = fleet
    browser = _chromium()
    require_tool(None if browser else "chromium is missing (apt-get install chromium)")
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}"]
    page = (base / "report.html").as_uri()
    dom = subprocess.run([browser, *flags, "--dump-dom", page], capture_output=True, text=True, timeout=180)
    assert dom.returncode == 0, dom.stderr[-2000:]
    for name in info["drifted"]:
        assert f">{name}<" in dom.stdout  # every drifted machine is a row of the rendered page
    assert dom.stdout.count('data-state="drifted"') + dom.stdout.count('data-state="failing+drifted"') == \
        len(info["drifted"])
    assert '<svg id="chart"' in dom.stdout and 'data-check="ram"' in dom.stdout
    artifacts = ROOT / "test-artifacts"
    artifacts.mkdir(exist_ok=True)
    shot = artifacts / "fleet-report.png"
    shot.unlink(missing_ok=True)
    subprocess.run([browser, *flags, f"--screenshot={shot}", "--window-size=1280,1000", page], capture_output=True,
                   timeout=180)
    assert shot.is_file() and shot.stat().st_size > 10_000
