"""Checking an offline bundle before anything is installed from it: the manifest's signature (with a trusted key), then
bundle_files' one check of the files (no links, every path inside the bundle, every file listed with its sha256 and
nothing else) and the files the manifest names by role. Reads only."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from aipc_env.core.formats import load_versioned
from aipc_env.errors import AipcError, ExitCode, InputError
from aipc_env.fleet.bundle import WHEELS, BundleManifest
from aipc_env.fleet.bundle_files import MANIFEST, SIGNATURE, file_problems, not_plain, summary
from aipc_env.fleet.sign import PublicKey, verify_file

__all__ = ["BundleTampered", "verify_bundle"]


class BundleTampered(AipcError):
    exit_code = ExitCode.PROBLEMS


def verify_bundle(bundle: Path, trust: PublicKey | None = None, warn: Callable[[str], None] = print) -> BundleManifest:
    """The manifest, after proving: no link anywhere in the bundle; the manifest's signature verifies with the
    trusted key (required when one is given; without one an unsigned bundle is warned about); every path is
    relative and inside the bundle; every file it lists is there with its sha256, and nothing else is."""
    if not (bundle / MANIFEST).is_file():
        raise InputError(
            f"not an aipc-env bundle (no {MANIFEST})", path=bundle, fix="pass the folder made by `aipc-env fleet bundle`"
        )
    links = not_plain(str(bundle))
    if links:
        raise BundleTampered(
            f"the bundle holds links or special files ({', '.join(links[:5])}): a bundle is regular files and folders only",
            path=bundle,
            fix="get an intact copy of the bundle; nothing was installed",
        )
    signature = bundle / SIGNATURE
    if trust is not None:
        verify_file(bundle / MANIFEST, trust, signature)
    elif signature.is_file():
        warn(
            "warning: the bundle is signed, but no trust key is set (--trust or AIPC_ENV_BUNDLE_TRUST): its "
            "signature was not checked"
        )
    else:
        warn(
            "warning: the bundle is not signed, and no trust key is set: anyone who can write the bundle could have "
            "changed it (files and manifest alike)"
        )
    manifest = load_versioned(BundleManifest, bundle / MANIFEST)
    problems = file_problems(str(bundle), manifest.files)
    for rel in (manifest.lockfile, manifest.requirements, f"{WHEELS}/{manifest.aipc_env_wheel}"):
        if rel not in manifest.files:
            problems.append(f"{rel}: named by the manifest but not one of its files")
    if problems:
        raise BundleTampered(
            f"the bundle does not match its manifest: {summary(problems)}",
            path=bundle,
            fix="get an intact copy of the bundle; nothing was installed",
        )
    return manifest
