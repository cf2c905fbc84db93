"""`aipc-env doctor` end to end, as a subprocess: this machine, saved facts, bad input."""

from __future__ import annotations

import json

from aipc_env.doctor import REPORT_SCHEMA_VERSION
from tests.conftest import MACHINES, run_cli


def test_on_this_machine_says_no_intel_gpu_and_exits_1(tmp_path):
    result = run_cli("doctor", "--work-dir", str(tmp_path))
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert "no Intel GPU" in result.stdout
    assert "Doctor found problems" in result.stdout


def test_json_report_round_trips_through_facts(tmp_path):
    result = run_cli("doctor", "--json", "--save-facts", str(tmp_path / "facts.json"))
    report = json.loads(result.stdout)
    assert report["schema_version"] == REPORT_SCHEMA_VERSION
    assert {"facts", "findings", "summary", "resolution"} <= set(report)
    again = run_cli("doctor", "--json", "--facts", str(tmp_path / "facts.json"))
    assert [f["status"] for f in json.loads(again.stdout)["findings"]] == [f["status"] for f in report["findings"]]
    # a whole report is accepted as facts too (fleet admins collect reports)
    (tmp_path / "report.json").write_text(result.stdout)
    assert run_cli("doctor", "--facts", str(tmp_path / "report.json")).returncode == 1


def test_good_machine_exits_0_and_check_selection():
    good = str(MACHINES / "win11_core_ultra_32gb.json")
    result = run_cli("doctor", "--facts", good)
    assert result.returncode == 0 and "No issues found" in result.stdout
    only = run_cli("doctor", "--facts", str(MACHINES / "win11_16gb.json"), "--check", "ram", "--json")
    findings = json.loads(only.stdout)["findings"]
    assert [f["id"] for f in findings] == ["ram"] and only.returncode == 1
    listing = run_cli("doctor", "--list-checks")
    assert listing.returncode == 0 and "runtime-mix" in listing.stdout


def test_bad_input_exits_2_without_traceback(tmp_path):
    bad = tmp_path / "facts.json"
    bad.write_text('{"schema_version": 1, "collected_at": "x", "os": {"system": "Windows"}, "memory": {"total_bytes": "lots"}}')
    result = run_cli("doctor", "--facts", str(bad))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert str(bad) in result.stderr and "memory.total_bytes" in result.stderr
    bad.write_text("{not json")
    result = run_cli("doctor", "--facts", str(bad))
    assert result.returncode == 2 and "not valid JSON at line 1" in result.stderr
    bad.write_text('{"schema_version": 7}')
    assert "not supported" in run_cli("doctor", "--facts", str(bad)).stderr
    unknown = run_cli("doctor", "--check", "nope")
    assert unknown.returncode == 2 and "unknown check" in unknown.stderr
    usage = run_cli("doctor", "--bogus-flag")
    assert usage.returncode == 2


def test_doctor_never_imports_torch():
    code = (
        "import sys; from aipc_env.cli import main; rc = main(['doctor', '--json']); "
        "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH', file=sys.stderr)"
    )
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "NO-TORCH" in result.stderr


def test_device_probe_runs_torch_in_a_subprocess():
    result = run_cli("doctor", "--probe-device", "--json", "--check", "device-probe", "--check", "bnb-backend")
    report = json.loads(result.stdout)
    probe = report["facts"]["device_probe"]
    assert probe["ran"] and probe["torch_version"].endswith("+cpu") and probe["xpu_available"] is False
    by_id = {f["id"]: f for f in report["findings"]}
    assert by_id["device-probe"]["status"] == "fail" and "not an XPU build" in by_id["device-probe"]["seen"]
    assert by_id["bnb-backend"]["status"] == "ok" and "cpu-native" in by_id["bnb-backend"]["seen"]


def test_output_paths_of_the_wrong_kind_are_input_errors(tmp_path):
    result = run_cli("doctor", "--save-facts", str(tmp_path))
    assert result.returncode == 2 and "is a folder" in result.stderr and "Traceback" not in result.stderr
    (tmp_path / "afile").write_text("x")
    result = run_cli("doctor", "--save-facts", str(tmp_path / "afile" / "facts.json"))
    assert result.returncode == 2 and "is a file, not a folder" in result.stderr


def test_facts_of_the_wrong_shape(tmp_path):
    for text in ('{"facts": 5}', "[1, 2]", '"just a string"', '{"schema_version": 1}'):
        (tmp_path / "f.json").write_text(text)
        result = run_cli("doctor", "--facts", str(tmp_path / "f.json"))
        assert result.returncode == 2 and str(tmp_path / "f.json") in result.stderr, text
        assert "internal error" not in result.stderr and "Traceback" not in result.stderr


def test_stdout_to_a_full_device_is_a_clear_error():
    import os
    import subprocess
    import sys

    if not os.path.exists("/dev/full"):
        return
    with open("/dev/full", "w") as full:
        result = subprocess.run(
            [sys.executable, "-m", "aipc_env", "matrix", "--json"], stdout=full, stderr=subprocess.PIPE, text=True, timeout=60
        )
    assert result.returncode == 2 and "cannot write the output" in result.stderr
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr


def test_list_checks_json_has_a_model():
    result = run_cli("doctor", "--list-checks", "--json")
    data = json.loads(result.stdout)
    assert data["schema_version"] == 1 and {"id", "category", "title"} <= set(data["checks"][0])
