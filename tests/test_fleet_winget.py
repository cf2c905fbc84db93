"""The WinGet configuration of a pair: valid against the official schema and aipc-env's strict settings models,
derived from the matrix and the doctor's thresholds; broken files rejected with errors located by line."""

from __future__ import annotations

import json

import pytest
import yaml

from aipc_env.doctor.checks.gpu import MIN_WINDOWS_DRIVER_BUILD
from aipc_env.doctor.checks.system import CEILING_MIN, TDR_MIN_SECONDS
from tests.conftest import run_cli


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    path = tmp_path_factory.mktemp("winget") / "aipc.dsc.yaml"
    result = run_cli("fleet", "winget", "--pair", "xpu-2.12", "--out", str(path))
    assert result.returncode == 0, result.stderr
    return path


def test_generated_configuration_is_valid_and_follows_the_matrix_and_the_doctor(generated):
    import jsonschema

    from aipc_env.fleet.winget import _schema

    data = yaml.safe_load(generated.read_text())
    jsonschema.Draft202012Validator(_schema()).validate(data)  # the official schema, directly
    check = run_cli("fleet", "winget", "--check", str(generated), "--json")
    assert check.returncode == 0 and json.loads(check.stdout)["issues"] == []
    by_id = {r["id"]: r for r in data["properties"]["resources"] + data["properties"]["assertions"]}
    assert by_id["oneapi"]["settings"] == {"id": "Intel.OneAPI.BaseToolkit", "source": "winget", "version": "2025.3"}
    assert by_id["oneapi"]["dependsOn"] == ["vs-cpp-workload"] and by_id["vs-cpp-workload"]["dependsOn"] == \
        ["vs-build-tools"]
    assert "Microsoft.VisualStudio.Workload.VCTools" in by_id["vs-cpp-workload"]["settings"]["components"]
    assert by_id["miniforge"]["settings"]["id"] == "CondaForge.Miniforge3" and by_id["git"]["settings"]["id"] == "Git.Git"
    assert int(by_id["tdr-delay"]["settings"]["ValueData"][0]) >= TDR_MIN_SECONDS
    assert int(by_id["gpu-memory-ceiling"]["settings"]["ValueData"][0]) >= CEILING_MIN
    assert by_id["long-paths"]["settings"]["ValueData"] == ["1"]
    assert f"32.0.101.{MIN_WINDOWS_DRIVER_BUILD}" in by_id["intel-gpu-driver"]["settings"]["TestScript"]


BROKEN = [
    # (change in the generated text, expected key, expected message, text on the located line,
    #  whether the official schema alone passes the broken file)
    (("  resources:", "  resourcez:"), "properties.resourcez", "unknown key", "resourcez:", True),
    (("      settings:\n        id: Git.Git", "      setings:\n        id: Git.Git"),
     "properties.resources[4].setings", "unknown key", "setings:", True),
    (("        id: Git.Git\n        source: winget", "        id: Git.Git\n        source: winget\n"
      "        version: '2.47.0'\n        useLatest: true"), "properties.resources[4].settings", "useLatest",
     "settings:", True),
    (("Key: HKEY_LOCAL_MACHINE\\SYSTEM\\CurrentControlSet\\Control\\FileSystem", "Key: SYSTEM\\FileSystem"),
     "properties.resources[5].settings.Key", "hive", "Key: SYSTEM", True),
    (("      id: git\n", "      id: miniforge\n"), "properties.resources[4].id", "duplicate id 'miniforge'",
     "id: miniforge", True),
    (("        - vs-build-tools", "        - vs-buildtools"), "properties.resources[1].dependsOn[0]",
     "no resource has as id", "- vs-buildtools", True),
    (("configurationVersion: 0.2.0", "configurationVersion: 1.0.0"), "properties.configurationVersion", "'0.2.0'",
     "configurationVersion: 1.0.0", True),
    (("ValueType: DWord", "ValueType: Dword"), "properties.resources[5].settings.ValueType", "DWord",
     "ValueType: Dword", True),
    (("configurationVersion: 0.2.0", "configurationVersion: zero"), "properties.configurationVersion", "schema",
     "configurationVersion: zero", False),
]


@pytest.mark.parametrize("change,key,message,on_line,schema_passes", BROKEN, ids=[b[1] for b in BROKEN])
def test_broken_files_are_rejected_with_a_located_error(generated, tmp_path, change, key, message, on_line,
                                                        schema_passes):
    import jsonschema

    from aipc_env.fleet.winget import _schema

    old, new = change
    text = generated.read_text()
    assert old in text
    broken_text = text.replace(old, new, 1)
    broken = tmp_path / "broken.dsc.yaml"
    broken.write_text(broken_text)
    if schema_passes:  # the gap the strict models close
        assert not list(jsonschema.Draft202012Validator(_schema()).iter_errors(yaml.safe_load(broken_text)))
    result = run_cli("fleet", "winget", "--check", str(broken))
    assert result.returncode == 1, result.stdout
    line = next(ln for ln in result.stdout.splitlines() if f": {key}: " in ln)
    assert message in line, line
    number = int(line.split(":")[1])
    assert on_line in broken_text.splitlines()[number - 1], (number, line)


def test_a_dependency_cycle_and_an_empty_file():
    from aipc_env.fleet.winget import validate_configuration

    cfg = {"properties": {"configurationVersion": "0.2.0", "resources": [
        {"resource": "A/B", "id": "a", "dependsOn": ["b"]}, {"resource": "A/B", "id": "b", "dependsOn": ["a"]}]}}
    issues = validate_configuration(cfg)
    assert any("dependency cycle: a -> b -> a" in i.message for i in issues)
    assert [i.key for i in validate_configuration({})] == ["properties"]  # the schema accepts {}; the models do not


def test_not_yaml_is_an_input_error(tmp_path):
    bad = tmp_path / "x.dsc.yaml"
    bad.write_text("properties: [unclosed\n")
    result = run_cli("fleet", "winget", "--check", str(bad))
    assert result.returncode == 2 and "not valid YAML at line" in result.stderr
