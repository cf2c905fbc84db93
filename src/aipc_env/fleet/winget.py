"""The machine layer of a pair as a WinGet configuration (DSC 0.2), derived from the matrix and the doctor's
thresholds, and its validation: the official JSON Schema first, then strict models of the settings that matter
(the schema accepts `{}`, misspelled keys and any settings), every error located by line in the file."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, ClassVar, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from aipc_env.doctor.checks.gpu import MIN_WINDOWS_DRIVER_BUILD
from aipc_env.doctor.checks.system import CEILING_MIN, TDR_MIN_SECONDS
from aipc_env.formats import StrictModel, VersionedModel
from aipc_env.matrix import Pair

__all__ = [
    "ONEAPI_PACKAGE",
    "SCHEMA_URL",
    "WinGetCheckReport",
    "WinGetIssue",
    "check_file",
    "render_yaml",
    "validate_configuration",
    "winget_configuration",
]

SCHEMA_URL = "https://aka.ms/configuration-dsc-schema/0.2"
ONEAPI_PACKAGE = "Intel.OneAPI.BaseToolkit"
BUILD_TOOLS = "Microsoft.VisualStudio.2022.BuildTools"
VC_WORKLOAD = "Microsoft.VisualStudio.Workload.VCTools"
MIN_WINDOWS_BUILD = 22000
"""Windows 11 (the doctor warns below it)."""
DRIVER_FLOOR = f"32.0.101.{MIN_WINDOWS_DRIVER_BUILD}"
REG_BASE = r"HKEY_LOCAL_MACHINE\SYSTEM\CurrentControlSet\Control"
TDR_SECONDS = max(60, TDR_MIN_SECONDS)
CEILING_PERCENT = max(75, CEILING_MIN)


def _package(id_: str, package: str, description: str, *, version: str | None = None,
             depends: list[str] | None = None) -> dict:
    settings: dict[str, Any] = {"id": package, "source": "winget"}
    if version:
        settings["version"] = version
    resource = {"resource": "Microsoft.WinGet.DSC/WinGetPackage", "id": id_,
                "directives": {"description": description, "allowPrerelease": True}, "settings": settings}
    if depends:
        resource["dependsOn"] = depends
    return resource


def _registry(id_: str, key: str, name: str, value: int, description: str) -> dict:
    return {"resource": "PSDscResources/Registry", "id": id_,
            "directives": {"description": description, "allowPrerelease": True},
            "settings": {"Key": key, "ValueName": name, "ValueData": [str(value)], "ValueType": "DWord",
                         "Ensure": "Present", "Force": True}}


DRIVER_TEST = (
    "$floor = [version]'{floor}'; $ok = $false; "
    "Get-CimInstance Win32_VideoController | Where-Object {{ $_.PNPDeviceID -like '*VEN_8086*' }} | "
    "ForEach-Object {{ if ([version]$_.DriverVersion -ge $floor) {{ $ok = $true }} }}; $ok"
)


def winget_configuration(pair: Pair) -> dict:
    """The pair's machine layer: OS and driver assertions, oneAPI of the pair's release, VS Build Tools with the
    C++ workload, Miniforge, Git, and the registry items of runbook §2.3."""
    driver = {"resource": "PSDscResources/Script", "id": "intel-gpu-driver",
              "directives": {"description": f"an Intel GPU with a driver at or above {DRIVER_FLOOR} (the doctor's "
                             "floor); deploy the driver through the fleet's usual channel", "allowPrerelease": True},
              "settings": {"GetScript": "@{ Result = (Get-CimInstance Win32_VideoController | "
                                        "Where-Object { $_.PNPDeviceID -like '*VEN_8086*' }).DriverVersion }",
                           "TestScript": DRIVER_TEST.format(floor=DRIVER_FLOOR),
                           "SetScript": "throw 'update the Intel graphics driver through the fleet channel'"}}
    return {"properties": {
        "configurationVersion": "0.2.0",
        "assertions": [
            {"resource": "Microsoft.Windows.Developer/OsVersion", "id": "os-version",
             "directives": {"description": f"Windows 11 (build {MIN_WINDOWS_BUILD} or later)", "allowPrerelease": True},
             "settings": {"MinVersion": f"10.0.{MIN_WINDOWS_BUILD}"}},
            driver,
        ],
        "resources": [
            _package("vs-build-tools", BUILD_TOOLS, "Visual Studio 2022 Build Tools (cl.exe for Triton-XPU kernels)"),
            {"resource": "Microsoft.VisualStudio.DSC/VSComponents", "id": "vs-cpp-workload",
             "dependsOn": ["vs-build-tools"],
             "directives": {"description": "the C++ workload (VCTools)", "allowPrerelease": True},
             "settings": {"productId": "Microsoft.VisualStudio.Product.BuildTools",
                          "channelId": "VisualStudio.17.Release", "components": [VC_WORKLOAD],
                          "includeRecommended": True}},
            _package("oneapi", ONEAPI_PACKAGE, f"Intel oneAPI Base Toolkit {pair.oneapi}, the release whose runtime "
                     f"{pair.id} pins (torch {pair.newest_torch}+xpu)", version=pair.oneapi,
                     depends=["vs-cpp-workload"]),
            _package("miniforge", "CondaForge.Miniforge3", "Miniforge (conda) for the training env"),
            _package("git", "Git.Git", "Git (clones of aipc-env and qwen-image-finetune)"),
            _registry("long-paths", REG_BASE + r"\FileSystem", "LongPathsEnabled", 1,
                      "long paths (model and cache paths exceed 260 characters)"),
            _registry("tdr-delay", REG_BASE + r"\GraphicsDrivers", "TdrDelay", TDR_SECONDS,
                      f"GPU timeout {TDR_SECONDS} s (the doctor wants at least {TDR_MIN_SECONDS})"),
            _registry("gpu-memory-ceiling", REG_BASE + r"\GraphicsDrivers\MemoryManager",
                      "SystemPartitionCommitLimitPercentage", CEILING_PERCENT,
                      f"shared GPU memory ceiling {CEILING_PERCENT} % (the doctor wants at least {CEILING_MIN})"),
        ],
    }}


def render_yaml(config: dict, pair: Pair) -> str:
    header = (f"# yaml-language-server: $schema={SCHEMA_URL}\n"
              f"# Generated by aipc-env (`aipc-env fleet winget --pair {pair.id}`): the machine layer of {pair.id}.\n"
              "# Apply: winget configure --file <this file> --accept-configuration-agreements\n"
              "# Drift:  winget configure test --file <this file> --accept-configuration-agreements\n")
    return header + yaml.dump(config, Dumper=_IndentedDumper, sort_keys=False, allow_unicode=True, width=110)


class _IndentedDumper(yaml.SafeDumper):
    """Lists indented under their key (what yamllint and ansible-lint expect of the playbook folder)."""

    def increase_indent(self, flow: bool = False, indentless: bool = False):
        return super().increase_indent(flow, False)


# --------------------------------------------------------------------------- strict models



class WinGetPackageSettings(StrictModel):
    id: str = Field(min_length=1)
    source: Literal["winget", "msstore"] = "winget"
    version: str | None = None
    useLatest: bool | None = None
    ensure: Literal["Present", "Absent"] = "Present"

    @model_validator(mode="after")
    def _version_or_latest(self) -> WinGetPackageSettings:
        if self.version and self.useLatest:
            raise ValueError("version and useLatest together: winget silently takes useLatest; keep one")
        return self


class VSComponentsSettings(StrictModel):
    productId: str = Field(pattern=r"^Microsoft\.VisualStudio\.Product\.")
    channelId: str = Field(pattern=r"^VisualStudio\.\d+\.")
    components: list[str] = Field(min_length=1)
    includeRecommended: bool = False
    vsConfigFile: str | None = None


class RegistrySettings(StrictModel):
    Key: str
    ValueName: str = Field(min_length=1)
    ValueData: list[str] = Field(min_length=1)
    ValueType: Literal["String", "Binary", "DWord", "QWord", "MultiString", "ExpandString"]
    Ensure: Literal["Present", "Absent"] = "Present"
    Force: bool = False
    Hex: bool = False

    @field_validator("Key")
    @classmethod
    def _hive(cls, value: str) -> str:
        if not re.match(r"^(HKEY_LOCAL_MACHINE|HKEY_CURRENT_USER|HKEY_CLASSES_ROOT|HKEY_USERS|HKEY_CURRENT_CONFIG)"
                        r"\\", value):
            raise ValueError("must start with a hive, e.g. HKEY_LOCAL_MACHINE\\SYSTEM\\...")
        return value

    @model_validator(mode="after")
    def _dword(self) -> RegistrySettings:
        if self.ValueType in ("DWord", "QWord") and not all(v.isdigit() for v in self.ValueData):
            raise ValueError(f"a {self.ValueType} value must be a whole number")
        return self


class OsVersionSettings(StrictModel):
    MinVersion: str = Field(pattern=r"^\d+\.\d+\.\d+(\.\d+)?$")


class ScriptSettings(StrictModel):
    GetScript: str
    TestScript: str
    SetScript: str


class Directives(BaseModel):
    model_config = ConfigDict(extra="allow")
    description: str | None = Field(None, max_length=512)
    allowPrerelease: bool | None = None
    module: str | None = None


class Resource(StrictModel):
    resource: str = Field(pattern=r"^[A-Za-z0-9_.\-]+/[A-Za-z0-9_.\-]+$")
    id: str = Field(min_length=1, max_length=128)
    dependsOn: list[str] | None = None
    directives: Directives = Directives()
    settings: dict[str, Any] = {}


SETTINGS: dict[str, type[BaseModel]] = {
    "Microsoft.WinGet.DSC/WinGetPackage": WinGetPackageSettings,
    "Microsoft.VisualStudio.DSC/VSComponents": VSComponentsSettings,
    "PSDscResources/Registry": RegistrySettings,
    "Microsoft.Windows.Developer/OsVersion": OsVersionSettings,
    "PSDscResources/Script": ScriptSettings,
}


class Properties(StrictModel):
    configurationVersion: Literal["0.2.0"]
    assertions: list[Resource] = []
    resources: list[Resource] = Field(min_length=1)
    parameters: list[Resource] = []


class Configuration(StrictModel):
    properties: Properties


# --------------------------------------------------------------------------- validation with locations


class WinGetIssue(BaseModel):
    key: str
    line: int | None
    message: str

    def render(self, path: str) -> str:
        return f"{path}:{self.line or '?'}: {self.key}: {self.message}"


class WinGetCheckReport(VersionedModel):
    """`aipc-env fleet winget --check FILE --json`."""

    FORMAT: ClassVar[str] = "WinGet configuration check"
    schema_version: Literal[1] = 1
    file: str
    issues: list[WinGetIssue]


def _lines(text: str) -> dict[tuple, int]:
    """YAML node paths (keys and list indexes) to 1-based line numbers."""
    found: dict[tuple, int] = {}

    try:
        root = yaml.compose(text)
    except (yaml.YAMLError, RecursionError):
        return found
    stack = [(root, ())] if root is not None else []
    while stack:  # iterative: a hostile file may nest or chain deeper than Python's recursion limit
        node, path = stack.pop()
        found.setdefault(path, node.start_mark.line + 1)  # a key's own line wins over its value's
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                found[path + (key.value,)] = key.start_mark.line + 1
                stack.append((value, path + (key.value,)))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((item, path + (i,)) for i, item in enumerate(node.value))
    return found


def _key(path: tuple) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (("." if out else "") + str(part))
    return out or "(top level)"


def _line(lines: dict[tuple, int], path: tuple) -> int | None:
    while path and path not in lines:
        path = path[:-1]
    return lines.get(path)


def _schema() -> dict:
    from importlib import resources

    return json.loads(resources.files("aipc_env.environments").joinpath(
        "schemas/winget-configuration.schema.0.2.json").read_text(encoding="utf-8"))


def validate_configuration(data: Any, text: str = "") -> list[WinGetIssue]:
    """Every problem of a configuration: the official schema's, then the strict models', then the graph's."""
    import jsonschema

    lines = _lines(text)
    issues: list[WinGetIssue] = []
    validator = jsonschema.Draft202012Validator(_schema())
    for err in sorted(validator.iter_errors(data), key=lambda e: list(map(str, e.absolute_path))):
        path = tuple(err.absolute_path)
        issues.append(WinGetIssue(key=_key(path), line=_line(lines, path), message=f"schema: {err.message}"))
    if issues:
        return issues
    try:
        config = Configuration.model_validate(data)
    except ValidationError as exc:
        for err in exc.errors():
            path = tuple(err["loc"])
            msg = "unknown key; check its spelling" if err["type"] == "extra_forbidden" else \
                str(err["msg"]).removeprefix("Value error, ")
            issues.append(WinGetIssue(key=_key(path), line=_line(lines, path), message=msg))
        return issues
    groups = (("assertions", config.properties.assertions), ("resources", config.properties.resources))
    seen: dict[str, tuple] = {}
    for group, items in groups:
        for i, r in enumerate(items):
            path = ("properties", group, i)
            if r.id in seen:
                issues.append(WinGetIssue(key=_key(path + ("id",)), line=_line(lines, path + ("id",)),
                                          message=f"duplicate id {r.id!r} (also at {_key(seen[r.id])})"))
            seen.setdefault(r.id, path)
            model = SETTINGS.get(r.resource)
            if model is not None:
                try:
                    model.model_validate(r.settings)
                except ValidationError as exc:
                    for err in exc.errors():
                        sub = path + ("settings", *err["loc"])
                        msg = "unknown setting; check its spelling" if err["type"] == "extra_forbidden" else \
                            str(err["msg"]).removeprefix("Value error, ")
                        issues.append(WinGetIssue(key=_key(sub), line=_line(lines, sub), message=msg))
    ids = set(seen)
    graph: dict[str, list[str]] = {}
    for group, items in groups:
        for i, r in enumerate(items):
            graph[r.id] = list(r.dependsOn or [])
            for j, dep in enumerate(r.dependsOn or []):
                if dep not in ids:
                    path = ("properties", group, i, "dependsOn", j)
                    issues.append(WinGetIssue(key=_key(path), line=_line(lines, path),
                                              message=f"depends on {dep!r}, which no resource has as id"))
    cycle = _cycle(graph)
    if cycle:
        where = seen[cycle[0]]
        issues.append(WinGetIssue(key=_key(where + ("dependsOn",)), line=_line(lines, where + ("dependsOn",)),
                                  message=f"dependency cycle: {' -> '.join(cycle)}"))
    return issues


def _cycle(graph: dict[str, list[str]]) -> list[str] | None:
    """The first dependency cycle found by a depth-first walk, as ids ending where they began; iterative, so a
    chain of thousands of dependsOn is no RecursionError."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    for start in graph:
        if state.get(start):
            continue
        path: list[str] = [start]
        todo: list[list[str]] = [list(graph.get(start, []))]
        state[start] = 1
        while path:
            if not todo[-1]:
                state[path.pop()] = 2
                todo.pop()
                continue
            dep = todo[-1].pop(0)
            if state.get(dep) == 1:
                return path[path.index(dep):] + [dep]
            if dep in graph and not state.get(dep):
                state[dep] = 1
                path.append(dep)
                todo.append(list(graph.get(dep, [])))
    return None


def check_file(path: Path) -> list[WinGetIssue]:
    """Validate a (hand-edited) configuration file; a file that is not YAML is an input error."""
    from aipc_env.fileio import parse_yaml, read_text

    text = read_text(path, "WinGet configuration")
    return validate_configuration(parse_yaml(text, path, "WinGet configuration"), text)
