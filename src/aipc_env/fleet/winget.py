"""The machine layer of a pair as a WinGet configuration (DSC 0.2), derived from the matrix, the doctor's thresholds
and environments/winget-packages.yaml (exact versions winget-pkgs lists). Checking a file is winget_check's job."""

from __future__ import annotations

from typing import Any

import yaml
from pydantic import RootModel

from aipc_env.core.templating import powershell_literal, render_marked, yaml_comment
from aipc_env.doctor.checks.gpu import MIN_WINDOWS_DRIVER_BUILD
from aipc_env.doctor.checks.system import CEILING_MIN, TDR_MIN_SECONDS
from aipc_env.fleet import template_text
from aipc_env.fleet.winget_check import WinGetCheckReport, WinGetIssue, check_file, validate_configuration
from aipc_env.fleet.winget_pins import WinGetPins, load_winget_pins
from aipc_env.matrix import Pair

__all__ = [
    "SCHEMA_URL",
    "WinGetCheckReport",
    "WinGetDocument",
    "WinGetIssue",
    "check_file",
    "render_yaml",
    "validate_configuration",
    "winget_configuration",
]

SCHEMA_URL = "https://aka.ms/configuration-dsc-schema/0.2"
BUILD_TOOLS = "Microsoft.VisualStudio.2022.BuildTools"
VC_WORKLOAD = "Microsoft.VisualStudio.Workload.VCTools"
MIN_WINDOWS_BUILD = 22000
"""Windows 11 (the doctor warns below it)."""
DRIVER_FLOOR = f"32.0.101.{MIN_WINDOWS_DRIVER_BUILD}"
REG_BASE = r"HKEY_LOCAL_MACHINE\SYSTEM\CurrentControlSet\Control"
TDR_SECONDS = max(60, TDR_MIN_SECONDS)
CEILING_PERCENT = max(75, CEILING_MIN)


ELEVATED = {"securityContext": "elevated"}
"""Machine-wide installs and HKLM writes need an elevated process (winget asks once, up front)."""


def _package(
    id_: str, package: str, description: str, *, version: str | None = None, depends: list[str] | None = None
) -> dict[str, Any]:
    settings: dict[str, Any] = {"id": package, "source": "winget"}
    if version:
        settings["version"] = version
    resource = {
        "resource": "Microsoft.WinGet.DSC/WinGetPackage",
        "id": id_,
        "directives": {"description": description, "allowPrerelease": True, **ELEVATED},
        "settings": settings,
    }
    if depends:
        resource["dependsOn"] = depends
    return resource


def _registry(id_: str, key: str, name: str, value: int, description: str) -> dict[str, Any]:
    return {
        "resource": "PSDscResources/Registry",
        "id": id_,
        "directives": {"description": description, "allowPrerelease": True, **ELEVATED},
        "settings": {
            "Key": key,
            "ValueName": name,
            "ValueData": [str(value)],
            "ValueType": "DWord",
            "Ensure": "Present",
            "Force": True,
        },
    }


def _script(name: str, **values: str) -> str:
    """A DSC Script resource's one-line PowerShell (templates/dsc-*.ps1), its values PowerShell literals."""
    return render_marked(template_text(name), name, {k: powershell_literal(v) for k, v in values.items()}).strip()


def _oneapi(pair: Pair, pins: WinGetPins) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(resource, assertion): the winget package that installs exactly the pair's oneAPI release, or, where
    winget-pkgs lists none, an assertion that the release is installed (the admin installs it another way)."""
    pin = pins.oneapi_for(pair.oneapi)
    what = f"Intel oneAPI {pair.oneapi}, the release whose runtime {pair.id} pins (torch {pair.newest_torch}+xpu)"
    if pin is not None:
        return _package(
            "oneapi",
            pin.id,
            f"{what}; {pin.id} {pin.version} as winget-pkgs lists it",
            version=pin.version,
            depends=["vs-cpp-workload"],
        ), None
    return None, {
        "resource": "PSDscResources/Script",
        "id": "oneapi-installed",
        "directives": {
            "description": f"{what}. NOT PROVISIONED BY WINGET: winget-pkgs lists no package "
            f"of oneAPI {pair.oneapi}; install it through the fleet's channel (Intel's offline "
            "installer) before applying this file",
            "allowPrerelease": True,
        },
        "settings": {
            "GetScript": _script("dsc-oneapi-get.ps1"),
            "TestScript": _script("dsc-oneapi-test.ps1", release=pair.oneapi),
            "SetScript": _script("dsc-oneapi-set.ps1", release=pair.oneapi),
        },
    }


class WinGetDocument(RootModel[dict[str, Any]]):
    """A WinGet configuration as data (what `fleet winget --json` prints): its format is WinGet's own
    (SCHEMA_URL, checked by winget_check against the official schema), not one of aipc-env's."""


def winget_configuration(pair: Pair, pins: WinGetPins | None = None) -> dict[str, Any]:
    """The pair's machine layer: OS and driver assertions, oneAPI of the pair's release (pinned exactly, or asserted
    where winget cannot install it), VS Build Tools with the C++ workload, Miniforge and Git pinned, and the
    registry items of runbook §2.3. Machine-wide changes run elevated."""
    pins = pins or load_winget_pins()
    driver = {
        "resource": "PSDscResources/Script",
        "id": "intel-gpu-driver",
        "directives": {
            "description": f"an Intel GPU with a driver at or above {DRIVER_FLOOR} (the doctor's "
            "floor); deploy the driver through the fleet's usual channel",
            "allowPrerelease": True,
        },
        "settings": {
            "GetScript": _script("dsc-driver-get.ps1"),
            "TestScript": _script("dsc-driver-test.ps1", floor=DRIVER_FLOOR),
            "SetScript": _script("dsc-driver-set.ps1"),
        },
    }
    oneapi, oneapi_assertion = _oneapi(pair, pins)
    miniforge, git = pins.packages["miniforge"], pins.packages["git"]
    resources = [
        _package("vs-build-tools", BUILD_TOOLS, "Visual Studio 2022 Build Tools (cl.exe for Triton-XPU kernels)"),
        {
            "resource": "Microsoft.VisualStudio.DSC/VSComponents",
            "id": "vs-cpp-workload",
            "dependsOn": ["vs-build-tools"],
            "directives": {"description": "the C++ workload (VCTools)", "allowPrerelease": True, **ELEVATED},
            "settings": {
                "productId": "Microsoft.VisualStudio.Product.BuildTools",
                "channelId": "VisualStudio.17.Release",
                "components": [VC_WORKLOAD],
                "includeRecommended": True,
            },
        },
        *([oneapi] if oneapi else []),
        _package(
            "miniforge", miniforge.id, f"Miniforge (conda) for the training env, {miniforge.version}", version=miniforge.version
        ),
        _package("git", git.id, f"Git (clones of aipc-env and qwen-image-finetune), {git.version}", version=git.version),
        _registry(
            "long-paths",
            REG_BASE + r"\FileSystem",
            "LongPathsEnabled",
            1,
            "long paths (model and cache paths exceed 260 characters)",
        ),
        _registry(
            "tdr-delay",
            REG_BASE + r"\GraphicsDrivers",
            "TdrDelay",
            TDR_SECONDS,
            f"GPU timeout {TDR_SECONDS} s (the doctor wants at least {TDR_MIN_SECONDS})",
        ),
        _registry(
            "gpu-memory-ceiling",
            REG_BASE + r"\GraphicsDrivers\MemoryManager",
            "SystemPartitionCommitLimitPercentage",
            CEILING_PERCENT,
            f"shared GPU memory ceiling {CEILING_PERCENT} % (the doctor wants at least {CEILING_MIN})",
        ),
    ]
    return {
        "properties": {
            "configurationVersion": "0.2.0",
            "assertions": [
                {
                    "resource": "Microsoft.Windows.Developer/OsVersion",
                    "id": "os-version",
                    "directives": {"description": f"Windows 11 (build {MIN_WINDOWS_BUILD} or later)", "allowPrerelease": True},
                    "settings": {"MinVersion": f"10.0.{MIN_WINDOWS_BUILD}"},
                },
                driver,
                *([oneapi_assertion] if oneapi_assertion else []),
            ],
            "resources": resources,
        }
    }


def render_yaml(config: dict[str, Any], pair: Pair, pins: WinGetPins | None = None) -> str:
    pins = pins or load_winget_pins()
    oneapi = pins.oneapi_for(pair.oneapi)
    c = yaml_comment  # values in comment lines: one line each, whatever they hold
    provision = (
        f"# oneAPI {c(pair.oneapi)}: {c(oneapi.id)} {c(oneapi.version)} (winget-pkgs, checked {c(str(pins.checked))}).\n"
        if oneapi
        else f"# oneAPI {c(pair.oneapi)} is NOT provisioned by this file: winget-pkgs lists no package of that "
        "release\n# (checked {checked}). Install it through the fleet's channel (Intel's offline installer); "
        "the\n# assertion 'oneapi-installed' fails until it is there. See docs/fleet.md.\n".format(checked=c(str(pins.checked)))
    )
    header = (
        f"# yaml-language-server: $schema={SCHEMA_URL}\n"
        f"# Generated by aipc-env (`aipc-env fleet winget --pair {c(pair.id)}`): the machine layer of "
        f"{c(pair.id)}.\n"
        + provision
        + "# Apply (elevated): winget configure --file <this file> --accept-configuration-agreements\n"
        "# Drift:  winget configure test --file <this file> --accept-configuration-agreements\n"
    )
    body: str = yaml.dump(config, Dumper=IndentedDumper, sort_keys=False, allow_unicode=True, width=110)
    return header + body


class IndentedDumper(yaml.SafeDumper):  # type: ignore[misc, unused-ignore]  # PyYAML has no type information here: SafeDumper is Any
    """Lists indented under their key (what yamllint and ansible-lint expect of the playbook folder)."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)  # PyYAML's Emitter.increase_indent returns nothing
