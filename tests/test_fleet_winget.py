"""The WinGet configuration of a pair: valid against the official schema and the real modules' properties, derived
from the matrix, the doctor's thresholds and the versions winget-pkgs lists (recorded manifests); Microsoft's own
configurations accepted; broken files rejected with errors located by line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from aipc_env.doctor.checks.gpu import MIN_WINDOWS_DRIVER_BUILD
from aipc_env.doctor.checks.system import CEILING_MIN, TDR_MIN_SECONDS
from tests.conftest import ROOT, run_cli

FIXTURES = Path(__file__).parent / "fixtures"
REAL = sorted((FIXTURES / "winget" / "real").glob("*.winget"))


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    path = tmp_path_factory.mktemp("winget") / "aipc.dsc.yaml"
    result = run_cli("fleet", "winget", "--pair", "xpu-2.13", "--out", str(path))
    assert result.returncode == 0, result.stderr
    return path


def test_generated_configuration_is_valid_and_follows_the_matrix_and_the_doctor(generated):
    import jsonschema

    from aipc_env.fleet.winget_check import schema

    data = yaml.safe_load(generated.read_text())
    jsonschema.Draft202012Validator(schema()).validate(data)  # the official schema, directly
    check = run_cli("fleet", "winget", "--check", str(generated), "--json")
    assert check.returncode == 0 and json.loads(check.stdout)["issues"] == []
    by_id = {r["id"]: r for r in data["properties"]["resources"] + data["properties"]["assertions"]}
    # xpu-2.13's oneAPI 2026.0 is in winget-pkgs only as Intel.OneAPI.Toolkit 2026.0.0.193 (a new id)
    assert by_id["oneapi"]["settings"] == {"id": "Intel.OneAPI.Toolkit", "source": "winget", "version": "2026.0.0.193"}
    assert by_id["oneapi"]["dependsOn"] == ["vs-cpp-workload"] and by_id["vs-cpp-workload"]["dependsOn"] == ["vs-build-tools"]
    assert "Microsoft.VisualStudio.Workload.VCTools" in by_id["vs-cpp-workload"]["settings"]["components"]
    assert by_id["miniforge"]["settings"]["id"] == "CondaForge.Miniforge3" and by_id["git"]["settings"]["id"] == "Git.Git"
    assert int(by_id["tdr-delay"]["settings"]["ValueData"][0]) >= TDR_MIN_SECONDS
    assert int(by_id["gpu-memory-ceiling"]["settings"]["ValueData"][0]) >= CEILING_MIN
    assert by_id["long-paths"]["settings"]["ValueData"] == ["1"]
    assert f"32.0.101.{MIN_WINDOWS_DRIVER_BUILD}" in by_id["intel-gpu-driver"]["settings"]["TestScript"]


BROKEN = [
    # (change in the generated text, expected key, expected message, text on the located line,
    #  whether the official schema alone passes the broken file)
    (("  resources:", "  resourcez:"), "properties.resourcez", "no such property", "resourcez:", True),
    (
        ("      settings:\n        id: Git.Git", "      setings:\n        id: Git.Git"),
        "properties.resources[4].setings",
        "no such property",
        "setings:",
        True,
    ),
    (
        ("        id: Git.Git\n", "        id: Git.Git\n        versoin: '2.55.0'\n"),
        "properties.resources[4].settings.versoin",
        "no such property",
        "versoin:",
        True,
    ),
    (
        ("        id: Git.Git\n", "        installMode: Quiet\n"),
        "properties.resources[4].settings.installMode",
        "'Default', 'Silent' or 'Interactive'",
        "installMode: Quiet",
        True,
    ),
    (("        id: Git.Git\n", ""), "properties.resources[4].settings.Id", "required by the module", "settings:", True),
    (
        ("Key: HKEY_LOCAL_MACHINE\\SYSTEM\\CurrentControlSet\\Control\\FileSystem", "Key: SYSTEM\\FileSystem"),
        "properties.resources[5].settings.Key",
        "hive",
        "Key: SYSTEM",
        True,
    ),
    (
        ("ValueType: DWord", "ValueType: DWordd"),
        "properties.resources[5].settings.ValueType",
        "'DWord'",
        "ValueType: DWordd",
        True,
    ),
    (("        - '1'\n", "        - 'one'\n"), "properties.resources[5].settings", "whole number", "settings:", True),
    (
        ("      id: git\n", "      id: miniforge\n"),
        "properties.resources[4].id",
        "duplicate id 'miniforge'",
        "id: miniforge",
        True,
    ),
    (
        ("        - vs-build-tools", "        - vs-buildtools"),
        "properties.resources[1].dependsOn[0]",
        "no resource has as id",
        "- vs-buildtools",
        True,
    ),
    (
        ("configurationVersion: 0.2.0", "configurationVersion: 1.0.0"),
        "properties.configurationVersion",
        "pattern",
        "configurationVersion: 1.0.0",
        True,
    ),
    (
        ("securityContext: elevated", "securityContext: root"),
        "securityContext",
        "'current', 'elevated' or 'restricted'",
        "securityContext: root",
        True,
    ),
    (
        ("configurationVersion: 0.2.0", "configurationVersion: zero"),
        "properties.configurationVersion",
        "schema",
        "configurationVersion: zero",
        False,
    ),
]


@pytest.mark.parametrize("change,key,message,on_line,schema_passes", BROKEN, ids=[b[1] for b in BROKEN])
def test_broken_files_are_rejected_with_a_located_error(generated, tmp_path, change, key, message, on_line, schema_passes):
    import jsonschema

    from aipc_env.fleet.winget_check import schema

    old, new = change
    text = generated.read_text()
    assert old in text
    broken_text = text.replace(old, new, 1)
    broken = tmp_path / "broken.dsc.yaml"
    broken.write_text(broken_text)
    if schema_passes:  # the gap the strict models close
        assert not list(jsonschema.Draft202012Validator(schema()).iter_errors(yaml.safe_load(broken_text)))
    result = run_cli("fleet", "winget", "--check", str(broken))
    assert result.returncode == 1, result.stdout
    line = next(
        ln for ln in result.stdout.splitlines() if f": {key}: " in ln or (key == "securityContext" and ".securityContext: " in ln)
    )
    assert ": error: " in line, line
    assert message in line, line
    number = int(line.split(":")[1])
    assert on_line in broken_text.splitlines()[number - 1], (number, line)


def test_a_dependency_cycle_and_an_empty_file():
    from aipc_env.fleet.winget import validate_configuration

    cfg = {
        "properties": {
            "configurationVersion": "0.2.0",
            "resources": [{"resource": "A/B", "id": "a", "dependsOn": ["b"]}, {"resource": "A/B", "id": "b", "dependsOn": ["a"]}],
        }
    }
    issues = validate_configuration(cfg)
    assert any("dependency cycle: a -> b -> a" in i.message for i in issues)
    assert [i.key for i in validate_configuration({})] == ["properties"]  # the schema accepts {}; the models do not
    cfg = {
        "properties": {
            "configurationVersion": "0.2.0",
            "resources": [{"resource": "A/B", "settings": {}}, {"resource": "A/B", "settings": {}}],
        }
    }
    assert [i.severity for i in validate_configuration(cfg)] == ["warning", "warning"]  # ids are optional


def test_not_yaml_is_an_input_error(tmp_path):
    bad = tmp_path / "x.dsc.yaml"
    bad.write_text("properties: [unclosed\n")
    result = run_cli("fleet", "winget", "--check", str(bad))
    assert result.returncode == 2 and "not valid YAML at line" in result.stderr


def _recorded_winget_pkgs() -> dict[str, tuple[str, str]]:
    """manifest path -> (PackageIdentifier, PackageVersion) of the recorded winget-pkgs version manifests."""
    found = {}
    base = FIXTURES / "winget-pkgs"
    for path in base.rglob("*.yaml"):
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        found[path.relative_to(base).as_posix()] = (data["PackageIdentifier"], str(data["PackageVersion"]))
    return found


def test_every_pinned_version_is_one_winget_pkgs_lists():
    """No WinGetPackage version in any generated configuration is missing from winget-pkgs: each (id, version)
    is the identity of a recorded winget-pkgs version manifest at the path the data file names."""
    from aipc_env.fleet.winget import winget_configuration
    from aipc_env.fleet.winget_pins import load_winget_pins
    from aipc_env.matrix import load_matrix

    recorded = _recorded_winget_pkgs()
    pins = load_winget_pins()
    for pin in [*pins.packages.values(), *pins.oneapi.values()]:
        assert recorded.get(pin.manifest_path()) == (pin.id, pin.version), pin
    listed = set(recorded.values())
    pinned = 0
    for pair in load_matrix().pairs:
        for r in winget_configuration(pair)["properties"]["resources"]:
            settings = r["settings"]
            if r["resource"] == "Microsoft.WinGet.DSC/WinGetPackage" and "version" in settings:
                assert (settings["id"], settings["version"]) in listed, (pair.id, settings)
                pinned += 1
    assert pinned >= 2 * len(load_matrix().pairs)  # Miniforge and Git everywhere, oneAPI where winget has it


def test_a_release_winget_cannot_install_is_asserted_and_said_plainly(tmp_path):
    out = tmp_path / "xpu-2.12.dsc.yaml"
    assert run_cli("fleet", "winget", "--pair", "xpu-2.12", "--out", str(out)).returncode == 0
    text = out.read_text()
    data = yaml.safe_load(text)
    assert "oneAPI 2025.3 is NOT provisioned by this file" in text
    assert not any(r["settings"].get("id", "").startswith("Intel.OneAPI") for r in data["properties"]["resources"])
    assertion = next(a for a in data["properties"]["assertions"] if a["id"] == "oneapi-installed")
    assert "(Join-Path (Join-Path $root 'compiler') '2025.3')" in assertion["settings"]["TestScript"]
    fleet_doc = (ROOT / "docs" / "fleet.md").read_text(encoding="utf-8")
    assert "not provisioned by winget" in fleet_doc


def test_machine_wide_changes_run_elevated(generated):
    data = yaml.safe_load(generated.read_text())
    for r in data["properties"]["resources"]:
        hklm = r["resource"] == "PSDscResources/Registry" and r["settings"]["Key"].startswith("HKEY_LOCAL_MACHINE")
        if r["resource"] in ("Microsoft.WinGet.DSC/WinGetPackage", "Microsoft.VisualStudio.DSC/VSComponents") or hklm:
            assert r["directives"].get("securityContext") == "elevated", r["id"]


@pytest.mark.parametrize("path", REAL, ids=[p.name for p in REAL])
def test_microsofts_own_configurations_pass(path):
    result = run_cli("fleet", "winget", "--check", str(path), "--json")
    assert result.returncode == 0, result.stdout
    issues = json.loads(result.stdout)["issues"]
    assert all(i["severity"] == "warning" for i in issues)
    assert all("Microsoft.Windows.Settings/WindowsSettings" in i["message"] for i in issues)  # not modelled


def test_forms_real_modules_accept(tmp_path):
    """Case-insensitive property names and enum values, the registry drive form, Dword, a scalar ValueData, the
    WinGetPackage and VSComponents properties beyond the basic ones, resources without an id."""
    text = """properties:
  configurationVersion: 0.2.0
  resources:
    - resource: Microsoft.WinGet.DSC/WinGetPackage
      directives: {securityContext: elevated}
      settings: {Id: Git.Git, Source: winget, installMode: silent, matchOption: Equals, Ensure: present}
    - resource: microsoft.visualstudio.dsc/vscomponents
      settings: {productId: Microsoft.VisualStudio.Product.BuildTools, channelId: VisualStudio.17.Release,
                 components: [Microsoft.VisualStudio.Workload.VCTools], includeOptional: true,
                 allowUnsignedExtensions: false}
    - resource: PSDscResources/Registry
      settings: {Key: 'HKLM:\\SYSTEM\\CurrentControlSet\\Control\\GraphicsDrivers', ValueName: TdrDelay,
                 ValueData: '60', ValueType: Dword, Force: true}
    - resource: PSDscResources/Registry
      settings: {key: 'HKCU:\\Software\\x', valuename: '', valuedata: 'a', ensure: Absent}
"""
    path = tmp_path / "admin.dsc.yaml"
    path.write_text(text)
    result = run_cli("fleet", "winget", "--check", str(path), "--json")
    assert result.returncode == 0 and json.loads(result.stdout)["issues"] == [], result.stdout


def test_version_with_use_latest_is_a_warning(tmp_path):
    path = tmp_path / "x.dsc.yaml"
    path.write_text(
        "properties:\n  configurationVersion: 0.2.0\n  resources:\n"
        "    - resource: Microsoft.WinGet.DSC/WinGetPackage\n"
        "      settings: {id: Git.Git, version: '2.55.0', useLatest: true}\n"
    )
    result = run_cli("fleet", "winget", "--check", str(path))
    assert result.returncode == 0 and ": warning: " in result.stdout and "UseLatest" in result.stdout
