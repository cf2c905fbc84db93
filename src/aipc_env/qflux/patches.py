"""The runbook's step-5 adaptation of a qwen-image-finetune clone, read from the data files in `edits/`: files to
create (`edits/created/`), anchored replacements (`edits/replace/<id>.old` -> `<id>.new`, each anchor upstream
text that must occur exactly as often as `edits.yaml` states, checked before anything is written), and the
torch.cuda call rewrites. The replacement text carries `aipc-env` in a comment where it adds behaviour.

Written against upstream 460ba1a; another commit either still matches every anchor (and is adapted the same way)
or is refused with the anchor and file named. Reading only; no clone is touched here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field, field_validator

from aipc_env.core.formats import StrictModel, VersionedModel

__all__ = [
    "CALL_REWRITES",
    "CREATED",
    "EDITS_DIR",
    "HELPERS_MODULE",
    "HELPER_NAMES",
    "PATCHES",
    "SRC",
    "CallRewrite",
    "Create",
    "EditSet",
    "Replace",
    "helper_import",
    "import_anchor",
    "load_edits",
]

SRC = "src/qflux"
HELPERS_MODULE = f"{SRC}/utils/device_utils.py"
EDITS_DIR = Path(__file__).resolve().parent / "edits"
HELPER_NAMES = (
    "device_empty_cache",
    "device_synchronize",
    "device_manual_seed_all",
    "device_context",
    "device_available",
    "device_capability",
)

_ID = r"^[a-z0-9][a-z0-9-]*$"
_CLONE_PATH = r"^[A-Za-z0-9_][A-Za-z0-9_./-]*$"


def _inside_clone(value: str) -> str:
    if ".." in value.split("/"):
        raise ValueError(f"{value!r} leaves the clone")
    return value


@dataclass(frozen=True)
class Create:
    """A new file (its whole content)."""

    path: str
    content: str
    why: str


@dataclass(frozen=True)
class Replace:
    """Replace `old` by `new` in `path`; `old` must occur exactly `count` times in the pristine file."""

    id: str
    path: str
    old: str
    new: str
    why: str
    count: int = 1


@dataclass(frozen=True)
class CallRewrite:
    """A torch.cuda call rewritten to a device helper in every file of the package (comments included, so no
    `torch.cuda.` is left outside the helpers module); the helper import is added to each file that uses it."""

    pattern: str
    helper: str
    replacement: str


class CreatedEntry(StrictModel):
    path: str = Field(pattern=_CLONE_PATH)
    file: str = Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
    why: str

    _path = field_validator("path")(_inside_clone)


class ReplaceEntry(StrictModel):
    id: str = Field(pattern=_ID)
    path: str = Field(pattern=_CLONE_PATH)
    count: int = Field(default=1, ge=1)
    why: str

    _path = field_validator("path")(_inside_clone)


class RewriteEntry(StrictModel):
    pattern: str
    helper: str
    replacement: str

    @field_validator("helper")
    @classmethod
    def _known_helper(cls, value: str) -> str:
        if value not in HELPER_NAMES:
            raise ValueError(f"{value!r} is not a helper of {HELPERS_MODULE}")
        return value


class EditSet(VersionedModel):
    """`edits/edits.yaml`: the index of the step-5 edits."""

    FORMAT: ClassVar[str] = "qflux edit set"
    schema_version: Literal[1] = 1
    created: list[CreatedEntry]
    replace: list[ReplaceEntry]
    call_rewrites: list[RewriteEntry]


def _read(path: Path) -> str:
    return path.read_bytes().decode("utf-8")  # exact bytes: no newline translation


@cache
def load_edits(folder: Path = EDITS_DIR) -> tuple[tuple[Create, ...], tuple[Replace, ...], tuple[CallRewrite, ...]]:
    """The edits of `folder` (default: the shipped ones), every referenced file read."""
    from aipc_env.core.formats import load_versioned

    index = load_versioned(EditSet, folder / "edits.yaml")
    ids = [r.id for r in index.replace]
    if len(ids) != len(set(ids)):
        raise ValueError(f"{folder / 'edits.yaml'}: duplicate replace ids")
    created = tuple(Create(c.path, _read(folder / "created" / c.file), c.why) for c in index.created)
    patches = tuple(
        Replace(
            r.id, r.path, _read(folder / "replace" / f"{r.id}.old"), _read(folder / "replace" / f"{r.id}.new"), r.why, r.count
        )
        for r in index.replace
    )
    rewrites = tuple(CallRewrite(c.pattern, c.helper, c.replacement) for c in index.call_rewrites)
    return created, patches, rewrites


CREATED, PATCHES, CALL_REWRITES = load_edits()


def helper_import(names: list[str]) -> str:
    return f"from qflux.utils.device_utils import {', '.join(sorted(names))}  # aipc-env\n"


_IMPORT_LINE = re.compile(r"^(import torch\b.*|from torch\b.*import.*)$", re.MULTILINE)


def import_anchor(text: str) -> int | None:
    """Where the helpers import goes: after the first top-level `import torch...` line (None if there is none)."""
    m = _IMPORT_LINE.search(text)
    return None if m is None else m.end() + 1
