"""`fleet winget --check`: a WinGet configuration (DSC 0.2) judged the way winget and the DSC modules judge it.

1. The official JSON Schema (loose: it accepts `{}` and any settings).
2. The document's own shape: `configurationVersion`, resources with `resource` and optional `id`, `dependsOn`
   naming ids that exist, no cycles, no duplicate ids.
3. The settings of the resources aipc-env knows, with the full property sets of the real modules
   (Microsoft.WinGet.DSC, Microsoft.VisualStudio.DSC, PSDscResources, Microsoft.Windows.Developer). Property names
   and enum values match case-insensitively, as PowerShell matches them; a property the module does not have, a
   missing mandatory one, or a value it cannot convert is an error.
4. Resources aipc-env does not model are a warning, never an error: an admin's file carries many.

Every finding is located by line. Errors are what the real modules would reject; warnings are what they accept but
probably do not do what the author meant (a version together with useLatest: winget silently takes useLatest).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import ErrorDetails

from aipc_env.core.fileio import loads_json
from aipc_env.core.formats import VersionedModel

__all__ = ["KNOWN_RESOURCES", "WinGetCheckReport", "WinGetIssue", "check_file", "validate_configuration"]


def _enum(*values: str) -> Any:  # a type form (Annotated[Literal[...], ...]) for pydantic, built at run time
    """An enum a PowerShell DSC property takes: any case in, the canonical spelling out."""
    canonical = {v.lower(): v for v in values}

    def convert(value: Any) -> Any:
        return canonical.get(value.lower(), value) if isinstance(value, str) else value

    return Annotated[Literal[values], BeforeValidator(convert)]


def _ps_bool(value: Any) -> Any:
    """PowerShell converts 'true'/'false' (any case) and $true/$false to [bool]."""
    if isinstance(value, str) and value.strip().lower().lstrip("$") in ("true", "false"):
        return value.strip().lower().lstrip("$") == "true"
    return value


PsBool = Annotated[bool, BeforeValidator(_ps_bool)]
Ensure = _enum("Present", "Absent")


class DscSettings(BaseModel):
    """A DSC resource's properties: unknown ones are errors (the module would refuse them)."""

    model_config = ConfigDict(extra="forbid")

    @classmethod
    def canonical_keys(cls, raw: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
        """Rename keys to the model's spelling, matching case-insensitively; returns (settings, clashes)."""
        names = {name.lower(): name for name in cls.model_fields}
        out: dict[str, Any] = {}
        clashes = []
        for key, value in raw.items():
            name = names.get(str(key).lower(), key)
            if name in out:
                clashes.append(str(key))
            out[name] = value
        return out, clashes


class WinGetPackage(DscSettings):
    """Microsoft.WinGet.DSC/WinGetPackage (winget-cli src/PowerShell/Microsoft.WinGet.DSC)."""

    Id: str = Field(min_length=1)
    Source: str | None = None
    Version: str | None = None
    Ensure: Ensure = "Present"  # type: ignore[valid-type]  # a Literal built at run time from the official schema's enum
    MatchOption: _enum(  # type: ignore[valid-type]  # a Literal built at run time from the official schema's enum
        "Equals",
        "EqualsCaseInsensitive",
        "StartsWithCaseInsensitive",
        "ContainsCaseInsensitive",
    ) = "EqualsCaseInsensitive"
    UseLatest: PsBool = False
    InstallMode: _enum("Default", "Silent", "Interactive") = "Silent"  # type: ignore[valid-type]  # a Literal built at run time from the official schema's enum

    def warnings(self) -> list[tuple[str, str]]:
        if self.Version and self.UseLatest:
            return [("UseLatest", "Version and UseLatest together: the module takes UseLatest and ignores the version; keep one")]
        return []


class VSComponents(DscSettings):
    """Microsoft.VisualStudio.DSC/VSComponents."""

    productId: str = Field(pattern=r"(?i)^Microsoft\.VisualStudio\.Product\.")
    channelId: str = Field(pattern=r"(?i)^VisualStudio\.\d+\.")
    vsConfigFile: str | None = None
    components: list[str] | None = None
    includeRecommended: PsBool = False
    includeOptional: PsBool = False
    allowUnsignedExtensions: PsBool = False

    @model_validator(mode="after")
    def _something_to_install(self) -> VSComponents:
        if not self.components and not self.vsConfigFile:
            raise ValueError("neither components nor vsConfigFile: nothing to install")
        return self


_HIVE = re.compile(
    r"(?i)^(HKEY_LOCAL_MACHINE|HKEY_CURRENT_USER|HKEY_CLASSES_ROOT|HKEY_USERS|HKEY_CURRENT_CONFIG|"
    r"HKLM:|HKCU:|HKCR:|HKU:|HKCC:)(\\|\Z)"
)


class Registry(DscSettings):
    """PSDscResources/Registry: the key in the hive (HKEY_LOCAL_MACHINE\\...) or drive (HKLM:\\...) form."""

    Key: str
    ValueName: str
    ValueData: str | list[str] | None = None
    ValueType: _enum(  # type: ignore[valid-type]  # a Literal built at run time from the official schema's enum
        "String",
        "Binary",
        "DWord",
        "QWord",
        "MultiString",
        "ExpandString",
    ) = "String"
    Ensure: Ensure = "Present"  # type: ignore[valid-type]  # a Literal built at run time from the official schema's enum
    Hex: PsBool = False
    Force: PsBool = False

    @field_validator("Key")
    @classmethod
    def _hive(cls, value: str) -> str:
        if not _HIVE.match(value):
            raise ValueError("must start with a hive (HKEY_LOCAL_MACHINE\\...) or a drive (HKLM:\\...)")
        return value

    @field_validator("ValueData", mode="before")
    @classmethod
    def _scalars(cls, value: Any) -> Any:
        return str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value

    @model_validator(mode="after")
    def _numbers(self) -> Registry:
        data = [self.ValueData] if isinstance(self.ValueData, str) else (self.ValueData or [])
        if self.ValueType in ("DWord", "QWord"):
            pattern = r"^(0x)?[0-9a-fA-F]+$" if self.Hex else r"^\d+$"
            if len(data) > 1 or not all(re.fullmatch(pattern, v.strip()) for v in data):
                raise ValueError(f"a {self.ValueType} value is one whole number" + (" in hex" if self.Hex else ""))
        return self


class OsVersion(DscSettings):
    """Microsoft.Windows.Developer/OsVersion."""

    MinVersion: str = Field(pattern=r"^\d+\.\d+(\.\d+){0,2}$")


class DeveloperMode(DscSettings):
    """Microsoft.Windows.Developer/DeveloperMode."""

    Ensure: Ensure = "Present"  # type: ignore[valid-type]  # a Literal built at run time from the official schema's enum


class Script(DscSettings):
    """PSDscResources/Script."""

    GetScript: str
    TestScript: str
    SetScript: str
    Credential: Any = None


KNOWN_RESOURCES: dict[str, type[DscSettings]] = {
    "microsoft.winget.dsc/wingetpackage": WinGetPackage,
    "microsoft.visualstudio.dsc/vscomponents": VSComponents,
    "psdscresources/registry": Registry,
    "microsoft.windows.developer/osversion": OsVersion,
    "microsoft.windows.developer/developermode": DeveloperMode,
    "psdscresources/script": Script,
}
"""The resources aipc-env writes or meets in admins' files, by module/name in lower case (DSC matches names
case-insensitively)."""


class Directives(BaseModel):
    model_config = ConfigDict(extra="allow")
    description: str | None = None
    allowPrerelease: PsBool | None = None
    module: str | None = None
    securityContext: _enum("current", "elevated", "restricted") | None = None  # type: ignore[valid-type]  # a Literal built at run time from the official schema's enum


class Resource(BaseModel):
    """One resource or assertion: `id` is optional (only a resource another names in dependsOn needs one)."""

    model_config = ConfigDict(extra="forbid")
    resource: str = Field(pattern=r"^[A-Za-z0-9_.\-]+/[A-Za-z0-9_.\-]+$")
    id: str | None = Field(None, min_length=1)
    dependsOn: list[str] | None = None
    directives: Directives = Directives()
    settings: dict[str, Any] = {}


class Properties(BaseModel):
    model_config = ConfigDict(extra="forbid")
    configurationVersion: str = Field(pattern=r"^0\.[12]\.\d+$")
    assertions: list[Resource] = []
    resources: list[Resource] = []
    parameters: list[Resource] = []

    @model_validator(mode="after")
    def _something(self) -> Properties:
        if not self.resources and not self.assertions:
            raise ValueError("no resources and no assertions: the configuration does nothing")
        return self


class Configuration(BaseModel):
    model_config = ConfigDict(extra="forbid")
    properties: Properties


class WinGetIssue(BaseModel):
    key: str
    line: int | None
    message: str
    severity: Literal["error", "warning"] = "error"

    def render(self, path: str) -> str:
        return f"{path}:{self.line or '?'}: {self.severity}: {self.key}: {self.message}"


class WinGetCheckReport(VersionedModel):
    """`aipc-env fleet winget --check FILE --json`."""

    FORMAT: ClassVar[str] = "WinGet configuration check"
    schema_version: Literal[2] = 2
    SCHEMA_VERSION: ClassVar[int] = 2
    file: str
    issues: list[WinGetIssue]

    @property
    def errors(self) -> list[WinGetIssue]:
        return [i for i in self.issues if i.severity == "error"]


# --------------------------------------------------------------------------- locations

_NodePath = tuple[str | int, ...]
"""Keys and list indexes from the document's root to a node."""


def _lines(text: str) -> dict[_NodePath, int]:
    """YAML node paths (keys and list indexes) to 1-based line numbers."""
    found: dict[_NodePath, int] = {}
    try:
        root = yaml.compose(text)
    except (yaml.YAMLError, RecursionError):
        return found
    stack: list[tuple[Any, _NodePath]] = [(root, ())] if root is not None else []  # PyYAML's nodes (no type information)
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


def _key(path: _NodePath) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (("." if out else "") + str(part))
    return out or "(top level)"


def _line(lines: dict[_NodePath, int], path: _NodePath) -> int | None:
    while path and path not in lines:
        path = path[:-1]
    return lines.get(path)


def schema() -> dict[str, Any]:
    from importlib import resources

    document: dict[str, Any] = loads_json(
        resources.files("aipc_env.environments")
        .joinpath("schemas/winget-configuration.schema.0.2.json")
        .read_text(encoding="utf-8")
    )
    return document


# --------------------------------------------------------------------------- validation


def _message(err: ErrorDetails) -> str:
    if err["type"] == "extra_forbidden":
        return "the module has no such property; check its spelling"
    if err["type"] == "missing":
        return "required by the module"
    return str(err["msg"]).removeprefix("Value error, ")


def validate_configuration(data: Any, text: str = "") -> list[WinGetIssue]:
    """Every finding: the official schema's, the document's, each known resource's settings, then the graph's."""
    import jsonschema

    lines = _lines(text)
    issues: list[WinGetIssue] = []

    def add(path: _NodePath, message: str, severity: Literal["error", "warning"] = "error") -> None:
        issues.append(WinGetIssue(key=_key(path), line=_line(lines, path), message=message, severity=severity))

    validator = jsonschema.Draft202012Validator(schema())
    for err in sorted(validator.iter_errors(data), key=lambda e: list(map(str, e.absolute_path))):
        add(tuple(err.absolute_path), f"schema: {err.message}")
    if issues:
        return issues
    try:
        config = Configuration.model_validate(data)
    except ValidationError as exc:
        for err in exc.errors():
            add(tuple(err["loc"]), _message(err))
        return issues
    groups = (("assertions", config.properties.assertions), ("resources", config.properties.resources))
    seen: dict[str, _NodePath] = {}
    for group, items in groups:
        for i, r in enumerate(items):
            path = ("properties", group, i)
            if r.id is not None:
                if r.id in seen:
                    add(path + ("id",), f"duplicate id {r.id!r} (also at {_key(seen[r.id])})")
                seen.setdefault(r.id, path)
            model = KNOWN_RESOURCES.get(r.resource.lower())
            if model is None:
                add(
                    path + ("resource",),
                    f"{r.resource}: a resource aipc-env does not model; its settings are "
                    "not checked here (winget checks them when it runs)",
                    "warning",
                )
                continue
            settings, clashes = model.canonical_keys(r.settings)
            for key in clashes:
                add(path + ("settings", key), "the same property twice (property names ignore case)")
            try:
                checked = model.model_validate(settings)
            except ValidationError as exc:
                spelled = {k.lower(): k for k in r.settings}
                for err in exc.errors():
                    loc = tuple(spelled.get(str(p).lower(), p) if isinstance(p, str) else p for p in err["loc"])
                    add(path + ("settings", *loc), _message(err))
                continue
            for key, message in getattr(checked, "warnings", lambda: [])():
                original = next((k for k in r.settings if k.lower() == key.lower()), key)
                add(path + ("settings", original), message, "warning")
    graph: dict[str, list[str]] = {}
    for group, items in groups:
        for i, r in enumerate(items):
            if r.id is not None:
                graph[r.id] = list(r.dependsOn or [])
            for j, dep in enumerate(r.dependsOn or []):
                if dep not in seen:
                    add(("properties", group, i, "dependsOn", j), f"depends on {dep!r}, which no resource has as id")
    cycle = _cycle(graph)
    if cycle:
        where = seen[cycle[0]]
        add(where + ("dependsOn",), f"dependency cycle: {' -> '.join(cycle)}")
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
                return path[path.index(dep) :] + [dep]
            if dep in graph and not state.get(dep):
                state[dep] = 1
                path.append(dep)
                todo.append(list(graph.get(dep, [])))
    return None


def check_file(path: Path) -> list[WinGetIssue]:
    """Validate a (hand-edited or an admin's own) configuration file; a file that is not YAML is an input error."""
    from aipc_env.core.fileio import parse_yaml, read_text

    text = read_text(path, "WinGet configuration")
    return validate_configuration(parse_yaml(text, path, "WinGet configuration"), text)
