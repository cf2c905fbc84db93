"""Fill a wheelhouse with the exact wheels a lock names: from a local folder, a file:// URL or a download, each
checked against the lock's sha256 (a mismatch is a named error and nothing is kept), cached by hash."""

from __future__ import annotations

import os
import shutil
import tempfile
import urllib.request
from pathlib import Path
from urllib.parse import unquote, urlparse

from aipc_env.container.render import Artifact, file_sha256
from aipc_env.errors import AipcError, ExitCode, InputError

__all__ = ["fill_wheelhouse", "HashMismatch"]


class HashMismatch(AipcError):
    exit_code = ExitCode.PROBLEMS


def _source(artifact: Artifact, lock_dir: Path, find_links: list[Path]) -> tuple[str, Path | None]:
    """(description, local path or None to download)."""
    for folder in find_links:
        candidate = folder / artifact.filename
        if candidate.is_file():
            return str(candidate), candidate
    if artifact.path:
        p = Path(artifact.path)
        return artifact.path, p if p.is_absolute() else lock_dir / p
    if artifact.url and artifact.url.startswith("file:"):
        return artifact.url, Path(unquote(urlparse(artifact.url).path))
    if artifact.url:
        return artifact.url, None
    raise InputError(f"{artifact.name}: the lock gives neither a URL nor a path for {artifact.filename}")


def _download(url: str, target: Path) -> None:
    with urllib.request.urlopen(url, timeout=120) as response, target.open("wb") as fh:  # noqa: S310 - lock URLs
        shutil.copyfileobj(response, fh, 1 << 20)


def fill_wheelhouse(artifacts: list[Artifact], wheelhouse: Path, *, lock_dir: Path, cache: Path,
                    find_links: list[Path] = (), log=print) -> list[Path]:
    """Put every artifact into `wheelhouse`, verified; returns the files. Cached copies (by sha256) are reused."""
    wheelhouse.mkdir(parents=True, exist_ok=True)
    cache.mkdir(parents=True, exist_ok=True)
    out = []
    for a in artifacts:
        target = wheelhouse / a.filename
        cached = cache / a.sha256[:2] / a.sha256 / a.filename
        if not cached.is_file() or file_sha256(cached) != a.sha256:
            where, local = _source(a, lock_dir, list(find_links))
            cached.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp_name = tempfile.mkstemp(dir=cached.parent, suffix=".part")
            os.close(fd)
            tmp = Path(tmp_name)
            try:
                if local is not None:
                    if not local.is_file():
                        raise InputError(f"{a.name}: {where} does not exist", fix="check the lock's paths or the "
                                         "wheel folder (--find-links)")
                    shutil.copyfile(local, tmp)
                else:
                    log(f"downloading {a.filename}")
                    _download(a.url or "", tmp)
                got = file_sha256(tmp)
                if got != a.sha256:
                    raise HashMismatch(f"{a.filename} does not match the lock: the lock says sha256 {a.sha256}, the "
                                       f"file from {where} has {got}", fix="re-lock, or restore the wheel the lock "
                                       "was made from; nothing was built")
                os.replace(tmp, cached)
            finally:
                tmp.unlink(missing_ok=True)
        if not target.is_file() or file_sha256(target) != a.sha256:
            shutil.copyfile(cached, target)
        out.append(target)
    return out
