"""The fleet report in process, on recorded doctor reports (fixtures/reports/) changed one fact at a time: each drift
kind on its own with its exact text, the states and their order, the newest report per machine (ties broken by
the path), unreadable, newer and older reports, and the golden report's refusal. Expected values are literals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aipc_env.errors import InputError
from aipc_env.fleet.report import build_fleet_report, env_hash

REPORTS = Path(__file__).parent / "fixtures" / "reports"
GOOD = json.loads((REPORTS / "win11_core_ultra_32gb.report.json").read_text(encoding="utf-8"))
SIXTEEN = json.loads((REPORTS / "win11_16gb.report.json").read_text(encoding="utf-8"))
GOLDEN_ENV = "0b9d3f1f782eb227"  # sha256sum of its sorted name==version lines, first 16 hex digits


def _write(folder: Path, name: str, report: dict, machine_id: str | None = None, **facts) -> Path:
    report = json.loads(json.dumps(report))
    report["facts"]["machine"] = {"hostname": name, "machine_id": machine_id, "source": "test"}
    for dotted, value in facts.items():
        obj = report
        *parents, last = dotted.split("__")
        for part in parents:
            obj = obj[int(part)] if part.isdigit() else obj[part]
        obj[last] = value
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    path.write_text(json.dumps(report), encoding="utf-8")
    return path


@pytest.fixture
def golden(tmp_path) -> Path:
    return _write(tmp_path, "golden", GOOD)


def test_the_recorded_env_hash():
    assert env_hash(GOOD["facts"]["training_env"]["distributions"]) == GOLDEN_ENV
    assert env_hash({"a": "1", "b": "2"}) == env_hash({"b": "2", "a": "1"}) != env_hash({"a": "1", "b": "3"})


def _bnb(version: str) -> dict:
    return {**GOOD["facts"]["training_env"]["distributions"], "bitsandbytes": version}


@pytest.mark.parametrize(
    ("facts", "described"),
    [
        ({"facts__gpus__0__driver_version": "31.0.101.5590"}, "driver 31.0.101.5590 (golden 32.0.101.6874)"),
        ({"facts__gpus__0__driver_version": None}, "driver none (golden 32.0.101.6874)"),
        ({"facts__oneapi__installs__0__version": "2025.2"}, "oneapi 2025.2 (golden 2025.3)"),
        ({"facts__os__version": "10.0.22631"}, "os Windows 10.0.22631 (golden Windows 10.0.26100)"),
        ({"facts__aipc_env_version": "0.0.9"}, "aipc-env 0.0.9 (golden 0.1.0)"),
        ({"resolution__pair": "xpu-2.12"}, "pair xpu-2.12 (golden xpu-2.11)"),
        (
            {"facts__training_env__distributions": _bnb("0.49.1")},
            f"env {env_hash(_bnb('0.49.1'))} (golden {GOLDEN_ENV}): 1 package(s) differ: bitsandbytes 0.49.1/0.50.2",
        ),
    ],
)
def test_each_drift_kind_alone(tmp_path, golden, facts, described):
    _write(tmp_path / "r", "pc", GOOD, **facts)
    report = build_fleet_report([tmp_path / "r"], golden)
    (row,) = report.machines
    assert (row.state, [d.describe() for d in row.drift]) == ("drifted", [described])
    assert report.counts == {"drifted": 1} and report.drift_counts == {described.split()[0]: 1}


def test_a_machine_without_a_golden_is_never_drifted(tmp_path):
    _write(tmp_path / "r", "pc", GOOD, facts__aipc_env_version="0.0.9")
    (row,) = build_fleet_report([tmp_path / "r"]).machines
    assert (row.state, row.drift) == ("ok", [])


def test_env_drift_lists_six_packages_then_an_ellipsis(tmp_path, golden):
    dists = dict(GOOD["facts"]["training_env"]["distributions"])
    changed = sorted(dists)[:7]
    for name in changed:
        dists[name] = "0.0.1"
    _write(tmp_path / "r", "pc", GOOD, facts__training_env__distributions=dists)
    (row,) = build_fleet_report([tmp_path / "r"], golden).machines
    (entry,) = row.drift
    assert entry.detail == (
        "7 package(s) differ: "
        + ", ".join(f"{n} 0.0.1/{GOOD['facts']['training_env']['distributions'][n]}" for n in changed[:6])
        + " ..."
    )
    del dists[changed[0]]
    dists = {n: v for n, v in dists.items() if n not in changed[1:]} | {
        n: GOOD["facts"]["training_env"]["distributions"][n] for n in changed[1:6]
    }
    _write(tmp_path / "r", "pc", GOOD, facts__training_env__distributions=dists)
    (row,) = build_fleet_report([tmp_path / "r"], golden).machines
    was = GOOD["facts"]["training_env"]["distributions"]
    assert row.drift[0].detail == (f"2 package(s) differ: {changed[0]} -/{was[changed[0]]}, {changed[6]} -/{was[changed[6]]}")


def test_states_counts_groups_and_their_order(tmp_path, golden):
    r = tmp_path / "r"
    _write(r, "b-ok", GOOD)
    _write(r, "a-ok", GOOD)
    _write(r, "c-failing", SIXTEEN)
    _write(r, "d-both", SIXTEEN, facts__aipc_env_version="0.0.9")
    _write(r, "e-drifted", GOOD, resolution__pair="xpu-2.12")
    (r / "f-broken.json").write_text("{not json")
    newer = json.loads(json.dumps(GOOD))
    newer["schema_version"] = 99
    (r / "g-newer.json").write_text(json.dumps(newer))
    older = json.loads(json.dumps(GOOD))
    del older["schema_version"]
    older["report_schema_version"] = 1
    (r / "h-older.json").write_text(json.dumps(older))
    (r / "i-other.json").write_text(json.dumps({"hello": 1}))
    report = build_fleet_report([r], golden)
    assert [(m.key, m.state) for m in report.machines] == [
        ("d-both", "failing+drifted"),
        ("c-failing", "failing"),
        ("e-drifted", "drifted"),
        ("h-older", "older"),
        ("g-newer", "newer"),
        ("f-broken", "unreadable"),
        ("i-other", "unreadable"),
        ("a-ok", "ok"),
        ("b-ok", "ok"),
    ]
    problems = {m.key: m.problem for m in report.machines if m.problem}
    assert problems["g-newer"] == "written by a newer aipc-env (report schema_version 99); update aipc-env"
    assert problems["h-older"] == (
        "written by an older aipc-env (report format 1, this one reads 1): pipx upgrade "
        "aipc-env on that machine, then collect again: aipc-env doctor --json"
    )
    assert problems["i-other"] == "not an aipc-env doctor --json report"
    assert problems["f-broken"].startswith("not a readable JSON file: ")
    assert report.counts == {"failing+drifted": 1, "failing": 1, "drifted": 1, "older": 1, "newer": 1, "unreadable": 2, "ok": 2}
    assert [(g.check, g.status, g.fix, g.machines) for g in report.groups] == [
        ("ram", "fail", "use a machine with 32 GB or more", ["c-failing", "d-both"])
    ]
    assert report.problems and (report.golden_pair, report.golden_env_hash) == ("xpu-2.11", GOLDEN_ENV)


def test_the_newest_report_per_machine_wins_and_ties_go_to_the_later_path(tmp_path):
    r = tmp_path / "r"
    _write(r / "1", "pc", GOOD, machine_id="m-1", facts__collected_at="2026-11-20T10:00:00+00:00")
    _write(r / "2", "pc", SIXTEEN, machine_id="m-1", facts__collected_at="2026-11-20T09:00:00+00:00")
    _write(r / "3", "pc", GOOD, machine_id="m-2", facts__collected_at="2026-11-20T09:00:00")  # naive: read as UTC
    _write(r / "4", "pc", SIXTEEN, machine_id="m-2", facts__collected_at="2026-11-20T09:00:00+00:00")
    _write(r / "5", "pc", SIXTEEN, machine_id="m-3", facts__collected_at="not a time")
    _write(r / "6", "pc", GOOD, machine_id="m-3", facts__collected_at="2000-01-01T00:00:00+00:00")
    report = build_fleet_report([r])
    rows = [(m.key, m.state, Path(m.file).parent.name) for m in report.machines]
    assert rows == [
        ("m-2", "failing", "4"),
        ("m-1", "ok", "1"),
        ("m-3", "ok", "6"),
        ("m-1", "superseded", "2"),
        ("m-2", "superseded", "3"),
        ("m-3", "superseded", "5"),
    ]
    assert report.machines[3].problem == f"superseded by the newer report {r / '1' / 'pc.json'}"
    assert report.counts == {"failing": 1, "ok": 2, "superseded": 3}


def test_superseded_reports_of_one_machine_oldest_undated_first(tmp_path):
    r = tmp_path / "r"
    _write(r / "1", "pc", GOOD, machine_id="m", facts__collected_at="2026-11-20T10:00:00+00:00")
    _write(r / "2", "pc", GOOD, machine_id="m", facts__collected_at="2026-11-19T10:00:00+00:00")
    _write(r / "3", "pc", GOOD, machine_id="m", facts__collected_at="")
    report = build_fleet_report([r])
    assert [(m.state, Path(m.file).parent.name) for m in report.machines] == [
        ("ok", "1"),
        ("superseded", "3"),
        ("superseded", "2"),
    ]
    assert report.golden is None and report.drift_counts == {}


def test_drift_is_counted_per_machine(tmp_path, golden):
    r = tmp_path / "r"
    for name in ("pc-1", "pc-2"):
        _write(r, name, GOOD, facts__aipc_env_version="0.0.9")
    _write(r, "pc-3", GOOD, resolution__pair="xpu-2.12")
    report = build_fleet_report([r], golden)
    assert report.drift_counts == {"aipc-env": 2, "pair": 1} and report.golden == str(golden)


def test_a_package_only_the_machine_has_is_env_drift(tmp_path, golden):
    dists = {**GOOD["facts"]["training_env"]["distributions"], "extra-pkg": "1.0"}
    _write(tmp_path / "r", "pc", GOOD, facts__training_env__distributions=dists)
    (row,) = build_fleet_report([tmp_path / "r"], golden).machines
    assert [(d.kind, d.detail) for d in row.drift] == [("env", "1 package(s) differ: extra-pkg 1.0/-")]


def test_an_empty_hostname_falls_back_to_the_file_name(tmp_path):
    path = _write(tmp_path / "r", "pc-file", GOOD)
    report = json.loads(path.read_text())
    report["facts"]["machine"] = {"hostname": "", "machine_id": None, "source": "test"}
    path.write_text(json.dumps(report))
    (row,) = build_fleet_report([tmp_path / "r"]).machines
    assert (row.key, row.hostname) == ("pc-file", "")


def test_a_bad_golden_or_path_is_refused_naming_it(tmp_path):
    bad = tmp_path / "golden.json"
    bad.write_text("{not json")
    with pytest.raises(InputError) as caught:
        build_fleet_report([tmp_path], bad)
    assert (caught.value.key, caught.value.path) == ("--golden", str(bad))
    assert caught.value.message.startswith("the golden report is unreadable: not a readable JSON file: ")
    with pytest.raises(InputError) as caught:
        build_fleet_report([tmp_path / "nope"])
    assert (caught.value.message, caught.value.path) == ("no such file or folder", str(tmp_path / "nope"))


def test_the_golden_inside_the_folder_is_not_a_machine(tmp_path):
    golden = _write(tmp_path / "r", "golden", GOOD)
    _write(tmp_path / "r", "pc", GOOD)
    report = build_fleet_report([tmp_path / "r"], golden)
    assert [(m.key, m.state) for m in report.machines] == [("pc", "ok")]


def _with_findings(report: dict, **statuses: tuple[str, str]) -> dict:
    report = json.loads(json.dumps(report))
    for finding in report["findings"]:
        if finding["id"] in statuses:
            finding["status"], finding["fix"] = statuses[finding["id"]]
            finding["why"] = finding["why"] or "because"
    return report


def test_warnings_crashes_and_their_groups(tmp_path):
    r = tmp_path / "r"
    _write(r, "pc-1", _with_findings(GOOD, tdr=("warn", "raise TdrDelay"), cpu=("crash", "report this")), machine_id="m-1")
    _write(r, "pc-2", _with_findings(GOOD, tdr=("warn", "raise TdrDelay"), os=("fail", "use Windows 11")))
    report = build_fleet_report([r])
    rows = {m.key: (m.state, m.hostname, m.machine_id, m.failed, m.warned) for m in report.machines}
    assert rows == {"m-1": ("failing", "pc-1", "m-1", ["cpu"], ["tdr"]), "pc-2": ("failing", "pc-2", None, ["os"], ["tdr"])}
    assert [(g.check, g.status, g.fix, g.machines) for g in report.groups] == [
        ("cpu", "crash", "report this", ["pc-1"]),
        ("os", "fail", "use Windows 11", ["pc-2"]),
        ("tdr", "warn", "raise TdrDelay", ["pc-1", "pc-2"]),
    ]


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (
            b"{not json",
            "not a readable JSON file: not valid JSON at line 1, column 2: Expecting property name enclosed in double quotes",
        ),
        (
            b'{"a": "caf\xe9"}',
            "not a readable JSON file: doctor report is not UTF-8 text (invalid continuation byte at "
            "byte 10; it looks like a Windows ANSI code page (cp1252))",
        ),
        (b'{"findings": []}', "not an aipc-env doctor --json report"),
        (b'{"facts": {}}', "not an aipc-env doctor --json report"),
        (b'[{"findings": [], "facts": {}}]', "not an aipc-env doctor --json report"),
    ],
)
def test_unreadable_reports_say_why(tmp_path, content, problem):
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "x.json").write_bytes(content)
    (row,) = build_fleet_report([tmp_path / "r"]).machines
    assert (row.key, row.state, row.problem, row.file) == ("x", "unreadable", problem, str(tmp_path / "r" / "x.json"))


def test_a_report_nested_too_deep_is_named(tmp_path):
    (tmp_path / "r").mkdir()
    deep = '{"findings": [], "facts": {}, "x": ' + "[" * 70 + "]" * 70 + "}"
    (tmp_path / "r" / "x.json").write_text(deep)
    (row,) = build_fleet_report([tmp_path / "r"]).machines
    assert (row.state, row.problem) == ("unreadable", "not a readable JSON file: doctor report is nested deeper than 64 levels")


def test_reading_in_worker_processes_gives_what_reading_in_order_gives(tmp_path):
    """The parallel path (from 2000 reports on) lowered to 2 files here: same rows, same order, bad ones included."""
    from aipc_env.fleet.report import _summarize, _summarize_all

    files = [_write(tmp_path / "r", f"pc-{i}", GOOD if i % 2 else SIXTEEN) for i in range(5)]
    (tmp_path / "r" / "bad.json").write_text("{not json")
    files.append(tmp_path / "r" / "bad.json")
    serial = [_summarize(p) for p in files]
    assert _summarize_all(files, parallel_from=2) == serial
    assert [getattr(x, "key", None) for x in serial] == ["pc-0", "pc-1", "pc-2", "pc-3", "pc-4", "bad"]


@pytest.mark.parametrize(
    ("change", "state", "problem"),
    [
        (
            {"findings__0__status": "maybe"},
            "unreadable",
            "invalid report: findings.0.status: Input should be 'ok', 'warn', 'fail', 'skip' or 'crash'",
        ),
        ({"schema_version": "1"}, "unreadable", "invalid report: schema_version: Input should be 1"),
        (
            {"schema_version": 1, "report_schema_version": 1, "findings__0__status": "maybe"},
            "unreadable",
            "invalid report: findings.0.status: Input should be 'ok', 'warn', 'fail', 'skip' or 'crash'",
        ),
        (
            {"schema_version": 0},
            "older",
            "written by an older aipc-env (report format 0, this one reads 1): pipx upgrade "
            "aipc-env on that machine, then collect again: aipc-env doctor --json",
        ),
    ],
)
def test_invalid_and_older_reports(tmp_path, change, state, problem):
    _write(tmp_path / "r", "x", GOOD, **change)
    (row,) = build_fleet_report([tmp_path / "r"]).machines
    assert (row.state, row.problem) == (state, problem)


def test_identity_machine_id_then_hostname_then_file_name(tmp_path):
    r = tmp_path / "r"
    _write(r, "host-only", GOOD)
    nobody = json.loads(json.dumps(GOOD))
    nobody["facts"]["machine"] = None
    (r / "nameless.json").write_text(json.dumps(nobody))
    _write(r, "both", GOOD, machine_id="id-1")
    assert sorted((m.key, m.hostname, m.machine_id) for m in build_fleet_report([r]).machines) == [
        ("host-only", "host-only", None),
        ("id-1", "both", "id-1"),
        ("nameless", None, None),
    ]


def test_provisioned_facts_of_intel_gpus_releases_and_envs(tmp_path):
    r = tmp_path / "r"
    gpus = [
        {"name": "Intel(R) Arc(TM) A770", "vendor_id": None, "driver_version": "32.0.101.1"},
        {"name": "NVIDIA RTX", "vendor_id": "10de", "driver_version": "560.1"},
        {"name": "Display", "vendor_id": "8086", "driver_version": "31.0.101.9"},
    ]
    installs = [dict(GOOD["facts"]["oneapi"]["installs"][0], version=v) for v in ("2025.3", "2025.0")]
    _write(
        r,
        "pc",
        GOOD,
        facts__gpus=gpus,
        facts__oneapi__installs=installs,
        resolution__pair=None,
        facts__training_env__error="python crashed",
    )
    (row,) = build_fleet_report([r]).machines
    assert {k: row.facts[k] for k in ("driver", "oneapi", "pair", "env")} == {
        "driver": "31.0.101.9, 32.0.101.1",
        "oneapi": "2025.0, 2025.3",
        "pair": "xpu-2.11",
        "env": None,
    }
    _write(r, "pc", GOOD, resolution__pair=None, facts__training_env=None)
    (row,) = build_fleet_report([r]).machines
    assert (row.facts["pair"], row.facts["env"]) == (None, None)


def test_a_golden_without_oneapi_and_six_differing_packages(tmp_path):
    golden = _write(tmp_path, "golden", GOOD, facts__oneapi__installs=[])
    dists = dict(GOOD["facts"]["training_env"]["distributions"])
    changed = sorted(dists)[:6]
    dists.update(dict.fromkeys(changed, "0.0.1"))
    _write(tmp_path / "r", "pc", GOOD, facts__training_env__distributions=dists)
    (row,) = build_fleet_report([tmp_path / "r"], golden).machines
    assert row.drift[0].describe() == "oneapi 2025.3 (golden none)"
    assert not row.drift[1].detail.endswith("...") and row.drift[1].detail.startswith("6 package(s) differ: ")


def test_folders_and_files_are_all_read_and_a_namesake_of_the_golden_is_a_machine(tmp_path):
    golden = _write(tmp_path, "golden", GOOD)
    _write(tmp_path / "a", "golden", GOOD, machine_id="namesake")  # another machine whose file has the same name
    _write(tmp_path / "b", "pc-b", GOOD)
    single = _write(tmp_path / "c", "pc-c", GOOD)
    report = build_fleet_report([tmp_path / "a", tmp_path / "b", single], golden)
    assert sorted(m.key for m in report.machines) == ["namesake", "pc-b", "pc-c"]
    with pytest.raises(InputError) as caught:
        build_fleet_report([tmp_path / "missing"])
    assert caught.value.fix == "pass folders of `aipc-env doctor --json` reports"


def test_a_naive_time_is_read_as_utc_whatever_the_local_zone(tmp_path, monkeypatch):
    import time

    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        r = tmp_path / "r"
        _write(r / "1", "pc", GOOD, machine_id="m", facts__collected_at="2026-11-20T09:00:00")  # 09:00 UTC
        _write(r / "2", "pc", SIXTEEN, machine_id="m", facts__collected_at="2026-11-20T05:00:00+00:00")
        newest = build_fleet_report([r]).machines[0]
        assert (newest.state, Path(newest.file).parent.name) == ("ok", "1")
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


SMALL_FLEET = Path(__file__).parent / "fixtures" / "fleet-report-small.json"


def _small_fleet(base: Path) -> tuple[list[Path], Path]:
    golden = _write(base, "golden", GOOD)
    r = base / "reports"
    _write(r / "old", "pc-1", SIXTEEN, machine_id="m-1", facts__collected_at="2026-11-19T09:00:00+00:00")
    _write(
        r / "new",
        "pc-1",
        _with_findings(GOOD, tdr=("warn", "raise TdrDelay")),
        machine_id="m-1",
        facts__collected_at="2026-11-20T09:00:00+00:00",
        resolution__pair="xpu-2.12",
    )
    _write(
        r / "new",
        "pc-2",
        _with_findings(SIXTEEN, tdr=("warn", "raise TdrDelay"), cpu=("warn", "use a Core Ultra")),
        facts__aipc_env_version="0.0.9",
    )
    _write(r / "new", "pc-3", _with_findings(GOOD, tdr=("warn", "raise TdrDelay")), facts__collected_at=None)
    _write(r / "old", "pc-3", GOOD, facts__collected_at="2026-11-01T00:00:00+00:00")
    (r / "new" / "broken.json").write_text("[1, 2")
    return [r], golden


def _relative(value, base: str):
    return json.loads(json.dumps(value).replace(base, "<base>"))


def test_a_small_fleet_whole(tmp_path):
    """The whole report of a small fleet (superseded reports, a collected_at missing, drift, failures and warnings
    in groups of different sizes) against the one recorded and reviewed in fixtures/fleet-report-small.json."""
    paths, golden = _small_fleet(tmp_path)
    report = _relative(build_fleet_report(paths, golden).model_dump(mode="json"), str(tmp_path))
    assert report == json.loads(SMALL_FLEET.read_text(encoding="utf-8"))
