"""Core metadata (a wheel's `*.dist-info/METADATA`, or the PEP 658 `<file>.metadata` an index serves beside it):
the fields a lock's closure depends on, parsed by `packaging.metadata`, bounded, and validated (pure)."""

from __future__ import annotations

from dataclasses import dataclass

from packaging.metadata import parse_email
from packaging.requirements import InvalidRequirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion

from aipc_env.core.specs import parse_requirement, parse_specifier, parse_version

__all__ = ["MAX_METADATA_BYTES", "CoreMetadata", "MetadataError", "normal_requirement", "parse_core_metadata"]

MAX_METADATA_BYTES = 4 * 2**20
"""The largest METADATA read (numpy's is 60 KB with its long description; a file past this is not metadata)."""
MAX_REQUIRES = 2000


class MetadataError(ValueError):
    """Core metadata that cannot be used: says what is wrong, never a traceback."""


@dataclass(frozen=True)
class CoreMetadata:
    name: str
    version: str
    requires_dist: tuple[str, ...]
    requires_python: str | None

    @property
    def key(self) -> str:
        return canonicalize_name(self.name)

    def same_requirements(self, other: CoreMetadata) -> bool:
        return set(map(normal_requirement, self.requires_dist)) == set(map(normal_requirement, other.requires_dist)) and _spec(
            self.requires_python
        ) == _spec(other.requires_python)


def normal_requirement(line: str) -> str:
    """A requirement in one spelling (`Foo_Bar >= 1 ; extra=="x"` and `foo-bar>=1; extra == "x"` are equal)."""
    req = parse_requirement(line)
    extras = f"[{','.join(sorted(canonicalize_name(e) for e in req.extras))}]" if req.extras else ""
    return (
        canonicalize_name(req.name)
        + extras
        + str(parse_specifier(str(req.specifier)))
        + (f"; {req.marker}" if req.marker else "")
        + (f" @ {req.url}" if req.url else "")
    )


def _spec(text: str | None) -> SpecifierSet | None:
    return parse_specifier(text) if text else None


def parse_core_metadata(raw: bytes | str) -> CoreMetadata:
    """Name, Version, Requires-Dist and Requires-Python of a core metadata file; MetadataError when it is too large,
    not UTF-8, or a field is missing or malformed."""
    if len(raw) > MAX_METADATA_BYTES:
        raise MetadataError(f"metadata larger than {MAX_METADATA_BYTES // 2**20} MiB")
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MetadataError(f"metadata is not UTF-8 ({exc.reason} at byte {exc.start})") from None
    fields, _unparsed = parse_email(raw)
    name, version = fields.get("name"), fields.get("version")
    if not name or not version:
        raise MetadataError("metadata without Name or Version")
    try:
        parse_version(version)
    except InvalidVersion:
        raise MetadataError(f"Version {version[:60]!r} is not a PEP 440 version") from None
    requires = tuple(fields.get("requires_dist") or ())
    if len(requires) > MAX_REQUIRES:
        raise MetadataError(f"{len(requires)} Requires-Dist lines (at most {MAX_REQUIRES})")
    for line in requires:
        try:
            parse_requirement(line)
        except InvalidRequirement as exc:
            raise MetadataError(f"Requires-Dist {line[:80]!r} is not a PEP 508 requirement: {exc}") from None
    requires_python = fields.get("requires_python")
    if requires_python:
        try:
            parse_specifier(requires_python)
        except InvalidSpecifier:
            raise MetadataError(f"Requires-Python {requires_python[:60]!r} is not a version specifier") from None
    return CoreMetadata(name=name, version=version, requires_dist=requires, requires_python=requires_python or None)
