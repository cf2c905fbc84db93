"""Per-user state files (platformdirs): the built training env and the last verification."""

from __future__ import annotations

from pathlib import Path

from aipc_env.facts.model import VerifyRecord
from aipc_env.fileio import read_json, write_json
from aipc_env.models import StrictModel
from aipc_env.paths import state_dir

__all__ = ["EnvRecord", "read_env_record", "write_env_record", "read_verify_record", "write_verify_record"]

STATE_VERSION = 1


class EnvRecord(StrictModel):
    """Written by `aipc-env env` after a successful build; read by doctor, verify and train."""

    state_version: int = STATE_VERSION
    prefix: str
    python: str
    pair: str | None = None
    platform: str | None = None
    built_at: str
    lockfile: str | None = None


class _VerifyState(StrictModel):
    state_version: int = STATE_VERSION
    record: VerifyRecord


def _env_path() -> Path:
    return state_dir() / "env.json"


def _verify_path() -> Path:
    return state_dir() / "verify.json"


def read_env_record() -> EnvRecord | None:
    """The recorded env, or None when there is none or the file is unreadable (the doctor reports that)."""
    path = _env_path()
    if not path.is_file():
        return None
    try:
        return EnvRecord.model_validate(read_json(path))
    except Exception:  # noqa: BLE001 - a damaged state file must not stop the doctor
        return None


def write_env_record(record: EnvRecord) -> Path:
    path = _env_path()
    write_json(path, record.model_dump())
    return path


def read_verify_record() -> VerifyRecord | None:
    path = _verify_path()
    if not path.is_file():
        return None
    try:
        return _VerifyState.model_validate(read_json(path)).record
    except Exception:  # noqa: BLE001 - a damaged state file must not stop the doctor
        return None


def write_verify_record(record: VerifyRecord) -> Path:
    path = _verify_path()
    write_json(path, _VerifyState(record=record).model_dump())
    return path
