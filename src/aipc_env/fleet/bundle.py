"""Offline bundles: everything one platform needs to build a pair's training env with no network — the lock,
every wheel it names (hash-checked), the conda layer's packages where a conda lock exists, aipc-env itself as a
wheel, the WinGet configuration (Windows), bootstrap scripts, and a manifest with the sha256 of every file.
`aipc-env env --bundle DIR` installs from it, after proving every file matches the manifest
(aipc_env.fleet.bundle_check)."""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import ClassVar, Literal

from aipc_env.core.formats import VersionedModel, timestamp, write_model
from aipc_env.core.interrupts import checkpoint
from aipc_env.core.platforms import Platform
from aipc_env.core.templating import render_marked
from aipc_env.errors import InputError
from aipc_env.fleet import bundle_files, template_text
from aipc_env.fleet.bundle_files import MANIFEST, SIGNATURE, VERIFIER
from aipc_env.fleet.sign import SecretKey, sign_file
from aipc_env.lock.artifacts import (
    Artifact,
    check_holds_aipc_env,
    file_sha256,
    fill_wheelhouse,
    hashed_requirements,
    select_artifacts,
)
from aipc_env.lock.lockfile import conda_lock_path, read_pylock
from aipc_env.matrix import Pair

__all__ = ["MANIFEST", "SIGNATURE", "BundleManifest", "build_bundle"]

WHEELS = "wheels"


class BundleManifest(VersionedModel):
    """<bundle>/bundle-manifest.json: what the bundle is for, and the sha256 of every other file in it."""

    FORMAT: ClassVar[str] = "bundle manifest"
    FIX: ClassVar[str] = "rebuild the bundle: aipc-env fleet bundle"
    schema_version: Literal[1] = 1
    pair: str
    platform: Platform
    python: str
    lockfile: str
    """The pylock, relative to the bundle."""
    requirements: str
    """The hashed requirements of the lock's wheels for this platform and Python."""
    aipc_env_wheel: str
    created_at: str
    files: dict[str, str]
    """Path relative to the bundle (forward slashes) -> sha256."""


def _conda_packages(
    lock_dir: Path, platform: Platform, out: Path, cache: Path, python: str, log: Callable[[str], None] = print
) -> list[Path]:
    """The conda layer's packages (url + sha256 from conda-lock.yml), when the pair has a conda lock that holds the
    bundle's Python (a layer of another Python would not be the interpreter the bundle's wheels are for)."""
    from aipc_env.lock.conda_layer import layer_for

    path, why = layer_for(lock_dir, platform, python)
    if path is None:
        if conda_lock_path(lock_dir).is_file():
            log(f"no conda packages: {why}")
        return []
    from aipc_env.core.fileio import read_yaml

    raw = read_yaml(path, "conda-lock file")
    artifacts = []
    for pkg in (raw or {}).get("package", []):
        if pkg.get("platform") != platform or pkg.get("manager") != "conda":
            continue
        url = str(pkg["url"])
        sha = str((pkg.get("hash") or {}).get("sha256") or "")
        if not sha:
            raise InputError(f"{pkg.get('name')}: no sha256 in the conda lock", path=path)
        artifacts.append(Artifact(str(pkg["name"]), str(pkg.get("version")), url.rsplit("/", 1)[-1], url, None, sha))
    return fill_wheelhouse(artifacts, out, lock_dir=lock_dir, cache=cache)


def build_bundle(
    pair: Pair,
    platform: Platform,
    lockfile: Path,
    out: Path,
    *,
    python: str,
    aipc_wheel: Path,
    winget_yaml: str | None,
    cache: Path,
    find_links: Sequence[Path] = (),
    log: Callable[[str], None] = print,
    sign_key: SecretKey | None = None,
) -> BundleManifest:
    """Write the bundle into `out` (a new or empty folder), built beside it and renamed into place: a failed or
    interrupted build leaves nothing behind. With `sign_key` the manifest gets a minisign signature."""
    from aipc_env.core.fileio import atomic_dir

    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise InputError("the bundle folder is not empty", path=out, fix="choose a new folder")
    with atomic_dir(out) as tmp:
        manifest = _build_into(
            tmp,
            pair,
            platform,
            lockfile,
            python=python,
            aipc_wheel=aipc_wheel,
            winget_yaml=winget_yaml,
            cache=cache,
            find_links=find_links,
            log=log,
        )
        if sign_key is not None:
            sign_file(
                tmp / MANIFEST,
                sign_key,
                f"aipc-env bundle {pair.id} {platform} {manifest.created_at}",
                untrusted_comment=f"aipc-env bundle signature (key {sign_key.key_id[::-1].hex().upper()})",
            )
        return manifest


def _build_into(
    out: Path,
    pair: Pair,
    platform: Platform,
    lockfile: Path,
    *,
    python: str,
    aipc_wheel: Path,
    winget_yaml: str | None,
    cache: Path,
    find_links: Sequence[Path],
    log: Callable[[str], None],
) -> BundleManifest:
    lock = read_pylock(lockfile, platform)
    check_holds_aipc_env(lock, python, lockfile, platform, aipc_wheel)
    artifacts = select_artifacts(lock, python, lockfile, platform)
    log(f"fetching {len(artifacts)} wheels (sha256-checked)")
    fill_wheelhouse(artifacts, out / WHEELS, lock_dir=lockfile.parent, cache=cache, find_links=list(find_links), log=log)
    checkpoint("bundle:after-wheels")
    shutil.copyfile(aipc_wheel, out / WHEELS / aipc_wheel.name)
    conda = _conda_packages(lockfile.parent, platform, out / "conda", cache, python, log)
    if conda:
        log(f"{len(conda)} conda packages for the interpreter layer")
    shutil.copyfile(lockfile, out / lockfile.name)
    requirements = f"requirements.{platform}.txt"
    (out / requirements).write_text(hashed_requirements(artifacts), encoding="utf-8")
    # the one file check, run by the bootstrap scripts with the machine's Python before anything is installed;
    # its sha256 is written into them, so they run it only as shipped
    verifier = Path(bundle_files.__file__).read_bytes()
    (out / VERIFIER).write_bytes(verifier)
    names = {
        "pair": pair.id,
        "platform": platform,
        "python": python,
        "wheels": WHEELS,
        "aipc_wheel": aipc_wheel.name,
        "manifest": MANIFEST,
        "verifier": VERIFIER,
        "verifier_sha256": hashlib.sha256(verifier).hexdigest(),
    }
    sh = out / "bootstrap.sh"
    sh.write_text(render_marked(template_text("bootstrap.sh"), "bootstrap.sh", names), encoding="utf-8")
    sh.chmod(0o755)
    ps1 = render_marked(template_text("bootstrap.ps1"), "bootstrap.ps1", names)
    (out / "bootstrap.ps1").write_text(ps1.replace("\n", "\r\n"), encoding="utf-8")
    if winget_yaml is not None:
        (out / f"aipc-{pair.id}.dsc.yaml").write_text(winget_yaml, encoding="utf-8")
    files = {p.relative_to(out).as_posix(): file_sha256(p) for p in sorted(out.rglob("*")) if p.is_file()}
    manifest = BundleManifest(
        pair=pair.id,
        platform=platform,
        python=python,
        lockfile=lockfile.name,
        requirements=requirements,
        aipc_env_wheel=aipc_wheel.name,
        created_at=timestamp(),
        files=files,
    )
    write_model(out / MANIFEST, manifest)
    return manifest
