"""Per-user state files (platformdirs): the env `aipc-env env` built, the env the last run used, the last
verification. Strict and versioned; a damaged or newer file is a named error."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal

from aipc_env.core.formats import VersionedModel, load_versioned, write_model
from aipc_env.facts.model import VerifyRecord
from aipc_env.paths import state_dir

__all__ = [
    "EnvRecord",
    "UsedEnvRecord",
    "VerifyState",
    "env_record_path",
    "read_env_record",
    "read_used_env",
    "read_verify_record",
    "used_env_path",
    "verify_record_path",
    "write_env_record",
    "write_used_env",
    "write_verify_record",
]


class EnvRecord(VersionedModel):
    """Written by `aipc-env env` after a successful build; read by doctor, verify and train."""

    FORMAT: ClassVar[str] = "built-env record"
    LEGACY_KEYS: ClassVar[dict[str, str]] = {"state_version": "schema_version"}
    FIX: ClassVar[str] = "rebuild the env (nox -s env) or delete the file"
    schema_version: Literal[1] = 1
    prefix: str
    python: str
    pair: str | None = None
    platform: str | None = None
    built_at: str
    lockfile: str | None = None
    accepted_metadata_drift: list[str] = []
    """Where the XPU wheels' real METADATA differed from what the lock stands on, and the build went on anyway
    (`env --accept-metadata-drift`)."""


class UsedEnvRecord(VersionedModel):
    """The env the last `train` or `verify` ran in (when it was not the built one): the doctor inspects it."""

    FORMAT: ClassVar[str] = "last-used-env record"
    FIX: ClassVar[str] = "delete the file; the next `aipc-env train` writes it again"
    schema_version: Literal[1] = 1
    prefix: str
    python: str
    command: Literal["train", "verify", "distill"]
    when: str


class VerifyState(VersionedModel):
    FORMAT: ClassVar[str] = "verification record"
    LEGACY_KEYS: ClassVar[dict[str, str]] = {"state_version": "schema_version"}
    FIX: ClassVar[str] = "run `aipc-env verify` again"
    schema_version: Literal[1] = 1
    record: VerifyRecord


def env_record_path() -> Path:
    return state_dir() / "env.json"


def used_env_path() -> Path:
    return state_dir() / "last-env.json"


def verify_record_path() -> Path:
    return state_dir() / "verify.json"


def read_env_record() -> EnvRecord | None:
    """The recorded env, or None when there is none. A damaged file raises InputError naming it."""
    path = env_record_path()
    return load_versioned(EnvRecord, path) if path.is_file() else None


def write_env_record(record: EnvRecord) -> Path:
    return write_model(env_record_path(), record)


def read_used_env() -> UsedEnvRecord | None:
    path = used_env_path()
    return load_versioned(UsedEnvRecord, path) if path.is_file() else None


def write_used_env(record: UsedEnvRecord) -> Path:
    return write_model(used_env_path(), record)


def read_verify_record() -> VerifyRecord | None:
    path = verify_record_path()
    return load_versioned(VerifyState, path).record if path.is_file() else None


def write_verify_record(record: VerifyRecord) -> Path:
    return write_model(verify_record_path(), VerifyState(record=record))
