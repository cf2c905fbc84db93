"""The compatibility matrix (environments/matrix.yaml): pydantic models and loading."""

from __future__ import annotations

import re
from functools import cached_property
from pathlib import Path
from typing import ClassVar, Literal

from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version
from pydantic import ValidationError, field_validator, model_validator

from aipc_env.core.fileio import read_yaml
from aipc_env.core.formats import StrictModel, VersionedModel, validate_versioned
from aipc_env.core.gpus import GpuFamily
from aipc_env.core.platforms import Platform, marker_environment
from aipc_env.core.specs import (
    check_identifier,
    check_marker,
    check_project_name,
    check_specifier,
    check_version,
    evaluate_marker,
    parse_specifier,
    parse_version,
)
from aipc_env.errors import InputError
from aipc_env.paths import matrix_path

__all__ = ["KnownIssue", "Matrix", "Pair", "Pin", "TrainingStack", "load_matrix", "versions_equal"]


def versions_equal(a: str | None, b: str | None) -> bool:
    """Whether two version strings are the same PEP 440 version (falling back to text equality)."""
    try:
        return parse_version(a or "") == parse_version(b or "")
    except InvalidVersion:
        return a == b


class Pin(StrictModel):
    """One exact package pin of a pair, optionally limited to some platforms by a PEP 508 marker."""

    name: str
    version: str
    marker: str | None = None
    alternatives: list[str] = []

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_project_name(value)

    @field_validator("version")
    @classmethod
    def _version(cls, value: str) -> str:
        return check_version(value)

    @field_validator("alternatives")
    @classmethod
    def _alts(cls, value: list[str]) -> list[str]:
        return [check_version(v) for v in value]

    @field_validator("marker")
    @classmethod
    def _marker(cls, value: str | None) -> str | None:
        return check_marker(value)

    @property
    def key(self) -> str:
        return canonicalize_name(self.name)

    def accepted_versions(self) -> list[str]:
        return [self.version, *self.alternatives]

    def accepts(self, version: str) -> bool:
        try:
            got = parse_version(version)
        except InvalidVersion:
            return False
        return any(got == parse_version(v) for v in self.accepted_versions())

    def applies_to(self, platform: Platform) -> bool:
        return self.marker is None or evaluate_marker(self.marker, marker_environment(platform))


_ISSUE_ID = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+#[1-9][0-9]*$")


class KnownIssue(StrictModel):
    """A known bug of a pair's wheels on some GPU families and platforms, read from a public issue."""

    id: str
    """owner/repository#number of the public issue (pytorch/pytorch#197520)."""
    what: str
    gpu_families: list[GpuFamily]
    platforms: list[Platform]
    severity: Literal["critical", "major", "minor"]
    """critical: silent wrong results or data loss; major: a crash or a hang; minor: slower or noisier."""
    source: str
    """The issue's URL."""
    seen: str
    """What the source shows, quoted or closely paraphrased (versions, hardware, driver)."""
    unconfirmed: str | None = None
    """What this record assumes that the source does not show (inferred)."""
    workaround: str | None = None
    fixed_in: str | None = None
    """The first torch release without the bug; unset while the issue is open (every torch of the pair is hit)."""

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        if not _ISSUE_ID.match(value):
            raise ValueError(f"{value!r} is not owner/repository#number (pytorch/pytorch#197520)")
        return value

    @field_validator("source")
    @classmethod
    def _source(cls, value: str) -> str:
        if not value.startswith("https://"):
            raise ValueError(f"{value!r} is not an https URL of the issue")
        return value

    @field_validator("gpu_families", "platforms")
    @classmethod
    def _non_empty(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("name at least one")
        return value

    @field_validator("fixed_in")
    @classmethod
    def _fixed(cls, value: str | None) -> str | None:
        return None if value is None else check_version(value)

    @model_validator(mode="after")
    def _source_is_the_issue(self) -> KnownIssue:
        repo, number = self.id.split("#")
        if not re.search(rf"github\.com/{re.escape(repo)}/(?:issues|pull)/{number}(?:$|[/?#])", self.source):
            raise ValueError(f"source {self.source} is not the URL of {self.id}")
        return self

    def affects(self, torch: str) -> bool:
        """Whether a torch release has the bug: every release before fixed_in (all of them while it is open). A torch
        version that does not parse (read from a machine, a record) cannot be shown fixed: it counts as affected,
        and the warning names it as it was read."""
        if self.fixed_in is None:
            return True
        try:
            return parse_version(parse_version(torch).public) < parse_version(self.fixed_in)
        except InvalidVersion:
            return True

    def hits(self, platform: Platform, families: frozenset[str] | set[str], torch: str) -> bool:
        """Whether this machine (its platform and GPU families) running this torch meets the bug."""
        return platform in self.platforms and bool(set(self.gpu_families) & set(families)) and self.affects(torch)


class Pair(StrictModel):
    """One supported combination: a torch+xpu release and the oneAPI release whose runtime it pins."""

    id: str
    torch: list[str]
    oneapi: str
    python: str
    windows: Literal["full", "eager-only", "none"]
    triton: Pin
    triton_alternatives: list[str] = []
    bitsandbytes_min: str
    bitsandbytes_native: bool
    """Whether bitsandbytes' native XPU (SYCL) library loads against the SYCL runtime the pair pins: its XPU build
    needs the runtime of oneAPI >= 2025.1. It moves NF4 dequantize and gemv to SYCL; quantize and the optimizer
    updates stay on Triton either way (bitsandbytes 0.50.2 backends/xpu/ops.py:210-222), NF4 quantize has a
    pure-PyTorch fallback without Triton, Adam8bit's 8-bit update has none (environments/matrix.yaml says where)."""
    torchvision: dict[str, str] = {}
    """torch version -> its torchvision. Up to 0.29.1 each torchvision+xpu requires one exact torch; see
    torchvision_plain for the releases after that rule."""
    torchvision_plain: list[str] = []
    """torchvision releases published as one py3-none wheel without a +xpu build (0.29.2: requires torch>=2.14.0)."""
    triton_by_torch: dict[str, str] = {}
    """torch version -> its Triton version, where the pair's torch releases pin different ones (default:
    triton.version)."""
    torch_version_xpu: str | None = None
    sycl_major: int
    runtime_pins: list[Pin]
    source: str
    certainty: Literal["confirmed", "provisional"]
    notes: str | None = None
    known_issues: list[KnownIssue] = []
    """Known bugs of the pair's wheels (not part of what a lock is made from: row_hash leaves them out)."""

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        return check_identifier(value, "pair id")

    @field_validator("torch")
    @classmethod
    def _torch(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("at least one torch version is required")
        return [check_version(v) for v in value]

    @field_validator("bitsandbytes_min")
    @classmethod
    def _bnb(cls, value: str) -> str:
        return check_version(value)

    @field_validator("torchvision", "triton_by_torch")
    @classmethod
    def _per_torch(cls, value: dict[str, str]) -> dict[str, str]:
        return {check_version(k): check_version(v) for k, v in value.items()}

    @field_validator("torchvision_plain")
    @classmethod
    def _plain(cls, value: list[str]) -> list[str]:
        return [check_version(v) for v in value]

    @model_validator(mode="after")
    def _issue_ids(self) -> Pair:
        ids = [i.id for i in self.known_issues]
        twice = sorted({i for i in ids if ids.count(i) > 1})
        if twice:
            raise ValueError(f"known_issues: {', '.join(twice)} appears twice")
        return self

    def issues_hitting(
        self, platform: Platform, families: frozenset[str] | set[str], torch: str | None = None
    ) -> list[KnownIssue]:
        """The known issues a machine meets with this pair's torch (default: the newest, what a build installs)."""
        torch = torch or self.newest_torch
        return [i for i in self.known_issues if i.hits(platform, families, torch)]

    @model_validator(mode="after")
    def _per_torch_keys(self) -> Pair:
        for field in ("torchvision", "triton_by_torch"):
            unknown = sorted(set(getattr(self, field)) - set(self.torch))
            if unknown:
                raise ValueError(f"{field}: {', '.join(unknown)} is not one of the pair's torch versions {self.torch}")
        return self

    @field_validator("python")
    @classmethod
    def _python(cls, value: str) -> str:
        return check_specifier(value)

    @field_validator("oneapi")
    @classmethod
    def _oneapi(cls, value: str) -> str:
        parts = value.split(".")
        if len(parts) != 2 or not all(p.isdigit() for p in parts):
            raise ValueError(f"{value!r} is not a two-part oneAPI release such as '2025.3'")
        return value

    @property
    def newest_torch(self) -> str:
        return max(self.torch, key=Version)

    @property
    def newest_torch_version(self) -> Version:
        return Version(self.newest_torch)

    def torchvision_for(self, torch: str) -> str | None:
        return self.torchvision.get(torch)

    def torchvision_version(self, torch: str, build: str = "xpu") -> str | None:
        """The full version of torch's torchvision for a build (`0.24.0+xpu`; a plain release has no local part)."""
        version = self.torchvision_for(torch)
        if version is None:
            return None
        return version if version in self.torchvision_plain else f"{version}+{build}"

    @property
    def newest_torchvision(self) -> str | None:
        """The torchvision of the newest torch (what patch-requirements and the qflux env pin)."""
        return self.torchvision_for(self.newest_torch)

    def triton_for(self, torch: str) -> str:
        return self.triton_by_torch.get(torch, self.triton.version)

    @property
    def python_specifier(self) -> SpecifierSet:
        return parse_specifier(self.python)

    def triton_pin(self) -> Pin:
        return self.triton.model_copy(update={"alternatives": self.triton_alternatives})

    def pins_for(self, platform: Platform) -> list[Pin]:
        """Runtime pins that apply on a platform."""
        return [p for p in self.runtime_pins if p.applies_to(platform)]

    def supports(self, platform: Platform) -> bool:
        return platform != "win-64" or self.windows != "none"

    def compiles_kernels_on(self, platform: Platform) -> bool:
        """Whether Triton kernels (bitsandbytes quantize, 8-bit optimizer) can run on this platform."""
        return self.triton.applies_to(platform) and not (platform == "win-64" and self.windows != "full")


class TrainingStack(StrictModel):
    """What the training stack beside torch (the pip layer) needs of every env: its Python floor and, per model
    variant, the first diffusers that runs it."""

    python: str
    """The Python versions the pip layer resolves for (diffusers 0.42 and transformers 5 need >= 3.11)."""
    diffusers: dict[str, str]
    """Model variant (as the doctor names it) -> the first diffusers release whose pipeline runs it."""
    source: str

    @field_validator("python")
    @classmethod
    def _python(cls, value: str) -> str:
        return check_specifier(value)

    @field_validator("diffusers")
    @classmethod
    def _versions(cls, value: dict[str, str]) -> dict[str, str]:
        return {k: check_version(v) for k, v in value.items()}


class Matrix(VersionedModel):
    """environments/matrix.yaml: one row ("pair") per torch+xpu release."""

    FORMAT: ClassVar[str] = "compatibility matrix"
    FIX: ClassVar[str] = "see the comments at the top of environments/matrix.yaml"
    schema_version: Literal[1]
    markers: dict[str, str] = {}
    training_stack: TrainingStack
    pairs: list[Pair]

    def env_pythons(self, pair: Pair) -> SpecifierSet:
        """The Pythons an env of the pair can have: the pair's wheels' and the training stack's."""
        return pair.python_specifier & parse_specifier(self.training_stack.python)

    @model_validator(mode="after")
    def _unique_ids(self) -> Matrix:
        seen: set[str] = set()
        for pair in self.pairs:
            if pair.id in seen:
                raise ValueError(f"pair id {pair.id!r} appears twice")
            seen.add(pair.id)
        return self

    def torch_stack(self) -> frozenset[str]:
        """The packages a torch+xpu release brings and pins (torch, every pair's Triton and Intel runtime pins), as
        canonical names: the large, rarely changing part of an env (an image installs them in a layer of their own)."""
        names = (
            {"torch"} | {pair.triton.name for pair in self.pairs} | {pin.name for pair in self.pairs for pin in pair.runtime_pins}
        )
        return frozenset(canonicalize_name(name) for name in names)

    @cached_property
    def by_id(self) -> dict[str, Pair]:
        return {p.id: p for p in self.pairs}

    def get(self, pair_id: str) -> Pair:
        try:
            return self.by_id[pair_id]
        except KeyError:
            known = ", ".join(self.by_id)
            raise InputError(f"unknown pair {pair_id!r}", fix=f"use one of: {known}") from None

    def newest(self, platform: Platform) -> Pair:
        """The newest confirmed pair that fully supports a platform."""
        usable = [p for p in self.pairs if p.certainty == "confirmed" and p.compiles_kernels_on(platform)]
        return max(usable, key=lambda p: parse_version(p.newest_torch))

    def for_toolkit(self, oneapi_version: str) -> list[Pair]:
        """Pairs whose runtime matches an installed oneAPI toolkit release, newest first."""
        rows = [p for p in self.pairs if p.oneapi == oneapi_version]
        return sorted(rows, key=lambda p: parse_version(p.newest_torch), reverse=True)

    def for_torch(self, torch_version: str) -> Pair | None:
        public = parse_version(torch_version).public
        for pair in self.pairs:
            if any(parse_version(v).public == public for v in pair.torch):
                return pair
        return None


def _row_prefix(raw: object, loc: tuple[object, ...]) -> str:
    """Name a matrix row by its id in error messages ("pairs[3] (xpu-2.9)")."""
    if len(loc) >= 2 and loc[0] == "pairs" and isinstance(loc[1], int) and isinstance(raw, dict):
        rows = raw.get("pairs") or []
        if loc[1] < len(rows) and isinstance(rows[loc[1]], dict) and "id" in rows[loc[1]]:
            return f" (row id {rows[loc[1]]['id']})"
    return ""


def load_matrix(path: str | Path | None = None) -> Matrix:
    """Load and validate the matrix; a malformed file raises InputError naming the file, row and key."""
    path = Path(path) if path is not None else matrix_path()
    raw = read_yaml(path, "compatibility matrix")
    try:
        return validate_versioned(Matrix, raw, path)
    except InputError as err:
        loc = getattr(err, "first_loc", None)
        if loc is None and isinstance(raw, dict):
            try:
                Matrix.model_validate(raw)
            except ValidationError as exc:
                row = _row_prefix(raw, tuple(exc.errors()[0]["loc"]))
                if row:
                    err.message = err.message.replace("invalid file: ", f"invalid file{row}: ", 1)
            except Exception:  # noqa: BLE001, S110 - only naming the row; the error itself is already built
                pass
        raise
