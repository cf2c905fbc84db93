"""What a training env is to aipc-env: a prefix, its interpreter and where the choice of it came from. The one rule
for an env's interpreter (conda env or venv, Windows or POSIX) lives here."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from aipc_env.facts.model import EnvSource
from aipc_env.trainenv.record import EnvRecord

__all__ = ["SOURCE_WORDS", "EnvChoice", "EnvSource", "default_env_prefix", "env_python", "prefix_to_build"]

SOURCE_WORDS: dict[str, str] = {
    "flag": "given with --env",
    "qflux": "the clone's qflux env, built by aipc-env",
    "state": "built by `aipc-env env`",
    "used": "the env the last `aipc-env train`/`verify`/`distill` ran in",
    "conda": "the active conda env",
    "tool": "aipc-env's own training env, built on first use (this interpreter has no torch)",
    "current": "this interpreter; no training env is built or recorded",
}


def env_python(prefix: Path, *, windows: bool | None = None) -> Path:
    """The interpreter of an env prefix: the one that exists (a conda env keeps python.exe at its root on Windows, a
    venv in Scripts/), else where a venv made there puts it (the env is about to be built)."""
    prefix = Path(prefix)
    for rel in ("python.exe", "Scripts/python.exe", "bin/python3", "bin/python"):
        candidate = prefix / rel
        if candidate.is_file():
            return candidate
    windows = sys.platform == "win32" if windows is None else windows
    return prefix / ("Scripts/python.exe" if windows else "bin/python")


@dataclass(frozen=True)
class EnvChoice:
    prefix: Path
    python: Path
    source: EnvSource
    record: EnvRecord | None = None
    """The built-env record, when the chosen env is one aipc-env built."""

    @property
    def is_current(self) -> bool:
        return self.source == "current"

    def describe(self) -> str:
        """Which env, why, and how to point elsewhere (for people)."""
        return f"{self.prefix} ({SOURCE_WORDS[self.source]}; use --env PREFIX for another)"


def default_env_prefix(name: str, *, source: Path | None = None) -> Path:
    """<data dir>/envs/<name>: where aipc-env builds an env of its own (a pair's, the tool's `train`). The name may
    come from a file (a bundle's manifest, `source`): one that is not a plain file name is refused, so the env stays
    in that folder."""
    from aipc_env.core.specs import check_file_name
    from aipc_env.errors import InputError
    from aipc_env.paths import data_dir

    try:
        check_file_name(name, what="env name")
    except ValueError as exc:
        raise InputError(str(exc), path=source, key="pair", fix="pass --prefix, or use a bundle made by aipc-env") from None
    return data_dir() / "envs" / name


def prefix_to_build(flag: Path | None, recorded: EnvChoice | None, pair: str) -> Path:
    """Where `aipc-env env` builds a pair's env: --prefix; else the env it built before, when that one is for the
    same pair (rebuilt in place); else <data dir>/envs/<pair>."""
    if flag is not None:
        return Path(flag).absolute()
    if recorded is not None and recorded.record is not None and recorded.record.pair == pair:
        return recorded.prefix
    return default_env_prefix(pair)
