"""Checking an offline bundle before anything is installed from it: no links, the manifest's signature (with a
trusted key), every path inside the bundle, every file listed with its sha256 and nothing else. Reads only."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from aipc_env.errors import AipcError, ExitCode, InputError
from aipc_env.fleet.bundle import MANIFEST, SIGNATURE, WHEELS, BundleManifest
from aipc_env.fleet.sign import PublicKey, verify_file
from aipc_env.formats import load_versioned
from aipc_env.lock.artifacts import file_sha256

__all__ = ["BundleTampered", "verify_bundle"]


class BundleTampered(AipcError):
    exit_code = ExitCode.PROBLEMS


def _safe_relative(rel: str) -> bool:
    parts = rel.split("/")
    return bool(rel) and not rel.startswith("/") and "\\" not in rel and ":" not in rel and \
        all(part not in ("", ".", "..") for part in parts)


def _not_plain(bundle: Path) -> list[str]:
    found = []
    for dirpath, dirnames, filenames in os.walk(bundle):
        for name in dirnames + filenames:
            mode = os.lstat(os.path.join(dirpath, name)).st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):  # a link, FIFO, socket or device
                kind = "link" if stat.S_ISLNK(mode) else "FIFO" if stat.S_ISFIFO(mode) else "special file"
                found.append(f"{Path(dirpath, name).relative_to(bundle).as_posix()}: {kind}")
    return sorted(found)  # the directory's order is the file system's: name them the same way every time


def verify_bundle(bundle: Path, trust: PublicKey | None = None, warn=print) -> BundleManifest:
    """The manifest, after proving: no link anywhere in the bundle; the manifest's signature verifies with the
    trusted key (required when one is given; without one an unsigned bundle is warned about); every path is
    relative and inside the bundle; every file it lists is there with its sha256, and nothing else is."""
    if not (bundle / MANIFEST).is_file():
        raise InputError(f"not an aipc-env bundle (no {MANIFEST})", path=bundle,
                         fix="pass the folder made by `aipc-env fleet bundle`")
    links = _not_plain(bundle)
    if links:
        raise BundleTampered(f"the bundle holds links or special files ({', '.join(links[:5])}): a bundle is regular "
                             "files and folders only", path=bundle,
                             fix="get an intact copy of the bundle; nothing was installed")
    signature = bundle / SIGNATURE
    if trust is not None:
        verify_file(bundle / MANIFEST, trust, signature)
    elif signature.is_file():
        warn("warning: the bundle is signed, but no trust key is set (--trust or AIPC_ENV_BUNDLE_TRUST): its "
             "signature was not checked")
    else:
        warn("warning: the bundle is not signed, and no trust key is set: anyone who can write the bundle could have "
             "changed it (files and manifest alike)")
    manifest = load_versioned(BundleManifest, bundle / MANIFEST)
    problems = [f"{rel}: not a path inside the bundle" for rel in manifest.files if not _safe_relative(rel)]
    for rel, sha in manifest.files.items():
        if not _safe_relative(rel):
            continue
        path = bundle / rel
        if not path.is_file():
            problems.append(f"{rel}: missing")
        elif file_sha256(path) != sha:
            problems.append(f"{rel}: sha256 differs from the manifest")
    ignore = {MANIFEST, SIGNATURE}
    for path in sorted(bundle.rglob("*")):
        rel = path.relative_to(bundle).as_posix()
        if path.is_file() and rel not in manifest.files and rel not in ignore:
            problems.append(f"{rel}: not in the manifest")
    for rel in (manifest.lockfile, manifest.requirements, f"{WHEELS}/{manifest.aipc_env_wheel}"):
        if rel not in manifest.files:
            problems.append(f"{rel}: named by the manifest but not one of its files")
    if problems:
        shown = "; ".join(problems[:5]) + (f" (+{len(problems) - 5} more)" if len(problems) > 5 else "")
        raise BundleTampered(f"the bundle does not match its manifest: {shown}", path=bundle,
                             fix="get an intact copy of the bundle; nothing was installed")
    return manifest
