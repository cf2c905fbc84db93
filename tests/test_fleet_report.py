"""`aipc-env fleet report` over 1,000 generated doctor reports: failing checks grouped by check and fix, drift of
every provisioned fact against a golden machine, one row per machine id (the newest report; the others listed as
superseded), unreadable, newer and older reports labelled without stopping the rest, a CSV, and an HTML page
checked in a real headless Chromium, its sorting and filters included (a screenshot goes to test-artifacts/)."""

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
    result = run_cli(
        "fleet",
        "report",
        str(base / "reports"),
        "--golden",
        str(info["golden"]),
        "--out",
        str(out),
        "--csv",
        str(base / "report.csv"),
        "--json",
        timeout=300,
    )
    return base, info, result


def test_failures_grouped_and_drift_found(fleet):
    base, info, result = fleet
    assert result.returncode == 1, result.stderr[-2000:]
    report = json.loads(result.stdout)
    rows = {m["hostname"] or m["key"]: m for m in report["machines"]}
    assert len(report["machines"]) == COUNT + 2
    for name in info["drifted"]:
        assert "drifted" in rows[name]["state"] and [d["kind"] for d in rows[name]["drift"]] == ["env"]
        assert "bitsandbytes 0.49.1/0.50.2" in rows[name]["drift"][0]["detail"]
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
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
    ]
    page = (base / "report.html").as_uri()
    dom = subprocess.run([browser, *flags, "--dump-dom", page], capture_output=True, text=True, timeout=180)
    assert dom.returncode == 0, dom.stderr[-2000:]
    for name in info["drifted"]:
        assert f">{name}<" in dom.stdout  # every drifted machine is a row of the rendered page
    assert dom.stdout.count('data-state="drifted"') + dom.stdout.count('data-state="failing+drifted"') == len(info["drifted"])
    assert '<svg id="chart"' in dom.stdout and 'data-check="ram"' in dom.stdout
    artifacts = ROOT / "test-artifacts"
    artifacts.mkdir(exist_ok=True)
    shot = artifacts / "fleet-report.png"
    shot.unlink(missing_ok=True)
    subprocess.run([browser, *flags, f"--screenshot={shot}", "--window-size=1280,1000", page], capture_output=True, timeout=180)
    assert shot.is_file() and shot.stat().st_size > 10_000


def _edit(path, change) -> None:
    report = json.loads(path.read_text())
    change(report)
    path.write_text(json.dumps(report))


def test_one_row_per_machine_the_newest_wins(tmp_path):
    generate_reports(tmp_path / "r", 3)
    first = tmp_path / "r" / "AIPC-0001.json"
    for name, when, bnb in (
        ("old-1.json", "2026-11-01T08:00:00+00:00", "0.49.1"),
        ("old-2.json", "2026-11-15T08:00:00+00:00", "0.49.1"),
    ):
        (tmp_path / "r" / name).write_text(first.read_text())

        def stale(r, when=when, bnb=bnb):
            r["facts"]["collected_at"] = when
            r["facts"]["training_env"]["distributions"]["bitsandbytes"] = bnb

        _edit(tmp_path / "r" / name, stale)
    _edit(first, lambda r: r["facts"].__setitem__("collected_at", "2026-12-01T08:00:00+00:00"))
    golden = tmp_path / "golden.json"
    result = run_cli("fleet", "report", str(tmp_path / "r"), "--golden", str(golden), "--json")
    report = json.loads(result.stdout)
    machine_id = json.loads(first.read_text())["facts"]["machine"]["machine_id"]
    rows = [m for m in report["machines"] if m["key"] == machine_id]
    current = [m for m in rows if m["state"] != "superseded"]
    assert len(current) == 1 and current[0]["file"].endswith("AIPC-0001.json") and current[0]["state"] == "ok"
    old = sorted(m["file"].rsplit("/", 1)[-1] for m in rows if m["state"] == "superseded")
    assert old == ["old-1.json", "old-2.json"]
    assert all(m["superseded_by"].endswith("AIPC-0001.json") for m in rows if m["state"] == "superseded")
    assert report["counts"]["superseded"] == 2 and report["counts"].get("drifted", 0) == 0
    assert result.returncode == 0  # the stale drift does not count


@pytest.mark.parametrize(
    "kind, change, value",
    [
        ("driver", lambda f: f["gpus"][0].__setitem__("driver_version", "32.0.101.6000"), "32.0.101.6000"),
        ("oneapi", lambda f: f["oneapi"]["installs"][0].__setitem__("version", "2025.2"), "2025.2"),
        ("os", lambda f: f["os"].__setitem__("version", "10.0.22631"), "Windows 10.0.22631"),
        ("aipc-env", lambda f: f.__setitem__("aipc_env_version", "0.0.9"), "0.0.9"),
        ("env", lambda f: f["training_env"]["distributions"].__setitem__("peft", "0.1"), None),
    ],
)
def test_drift_of_each_provisioned_fact(tmp_path, kind, change, value):
    generate_reports(tmp_path / "r", 2)
    _edit(tmp_path / "r" / "AIPC-0000.json", lambda r: change(r["facts"]))
    report = json.loads(
        run_cli("fleet", "report", str(tmp_path / "r"), "--golden", str(tmp_path / "golden.json"), "--json").stdout
    )
    rows = {m["hostname"]: m for m in report["machines"]}
    assert [d["kind"] for d in rows["AIPC-0000"]["drift"]] == [kind]
    if value is not None:
        assert rows["AIPC-0000"]["drift"][0]["value"] == value
    assert rows["AIPC-0001"]["drift"] == [] and report["drift_counts"] == {kind: 1}


def test_pair_drift(tmp_path):
    generate_reports(tmp_path / "r", 2)
    _edit(tmp_path / "r" / "AIPC-0001.json", lambda r: r["resolution"].__setitem__("pair", "xpu-2.10"))
    report = json.loads(
        run_cli("fleet", "report", str(tmp_path / "r"), "--golden", str(tmp_path / "golden.json"), "--json").stdout
    )
    drift = {m["hostname"]: m["drift"] for m in report["machines"]}["AIPC-0001"]
    assert [(d["kind"], d["value"]) for d in drift] == [("pair", "xpu-2.10")]


def test_older_report_versions_are_labelled_with_the_upgrade(tmp_path):
    generate_reports(tmp_path / "r", 2)

    def legacy(r):
        r["report_schema_version"] = r.pop("schema_version")

    _edit(tmp_path / "r" / "AIPC-0000.json", legacy)
    _edit(tmp_path / "r" / "AIPC-0001.json", lambda r: r.__setitem__("schema_version", 0))
    result = run_cli("fleet", "report", str(tmp_path / "r"), "--json")
    states = {m["key"]: m for m in json.loads(result.stdout)["machines"]}
    for key in ("AIPC-0000", "AIPC-0001"):
        assert states[key]["state"] == "older" and "pipx upgrade aipc-env" in states[key]["problem"], states[key]
    text = run_cli("fleet", "report", str(tmp_path / "r"))
    assert "older:" in text.stdout and "invalid" not in text.stdout


def test_the_page_filters_and_sorts_in_the_browser(fleet, tmp_path):
    """The page's own script, run by Chromium: opened with a filter in its address, only those rows show; opened
    sorted by collection time, the rows come in that order; problems come first by default."""
    import re

    base, info, _ = fleet
    browser = _chromium()
    require_tool(None if browser else "chromium is missing (apt-get install chromium)")
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
    ]

    def dom(fragment: str) -> str:
        out = subprocess.run(
            [browser, *flags, "--dump-dom", (base / "report.html").as_uri() + fragment],
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert out.returncode == 0, out.stderr[-2000:]
        return out.stdout

    def visible(page: str) -> list[tuple[str, str]]:
        rows = re.findall(r'<tr data-state="([^"]+)" data-machine="([^"]+)"[^>]*?(style="display: none;")?>', page)
        return [(state, machine) for state, machine, hidden in rows if not hidden]

    default = visible(dom(""))
    states = [s for s, _ in default]
    assert states.index("ok") > max(i for i, s in enumerate(states) if s != "ok" and s != "superseded")
    drifted = visible(dom("#drift=env"))
    assert sorted(m for _, m in drifted) == sorted(m for s, m in default if "drifted" in s)
    assert len(drifted) == len(info["drifted"])
    hostnames = {m["key"]: m["hostname"] or "" for m in json.loads(fleet[2].stdout)["machines"]}
    page = dom("#sort=hostname-desc")
    names = [hostnames[m] for _, m in visible(page)]
    assert names == sorted(names, reverse=True) and names[0] == "AIPC-0999", names[:5]
    assert 'aria-sort="descending"' in page
