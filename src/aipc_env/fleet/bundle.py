"""Offline bundles: everything one platform needs to build a pair's training env with no network — the lock,
every wheel it names (hash-checked), the conda layer's packages where a conda lock exists, aipc-env itself as a
wheel, the WinGet configuration (Windows), bootstrap scripts, and a manifest with the sha256 of every file.
`aipc-env env --bundle DIR` installs from it, after proving every file matches the manifest."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import ClassVar, Literal

from aipc_env.errors import AipcError, ExitCode, InputError
from aipc_env.formats import VersionedModel, load_versioned, timestamp, write_model
from aipc_env.lock.artifacts import Artifact, file_sha256, fill_wheelhouse, hashed_requirements, select_artifacts
from aipc_env.lock.lockfile import conda_lock_path, read_pylock
from aipc_env.matrix import Pair
from aipc_env.platforms import Platform

__all__ = ["MANIFEST", "BundleManifest", "BundleTampered", "build_bundle", "verify_bundle"]

MANIFEST = "bundle-manifest.json"
WHEELS = "wheels"


class BundleTampered(AipcError):
    exit_code = ExitCode.PROBLEMS


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


BOOTSTRAP_SH = """#!/bin/sh
# aipc-env offline bundle ({pair}, {platform}): build the training env with no network.
# Usage: sh bootstrap.sh [--prefix DIR]   (needs python3 {python} with venv)
set -eu
here=$(CDPATH= cd -- "$(dirname -- "$0")" && pwd)
# every file against the manifest before anything is installed (aipc-env checks it again)
python3 - "$here" <<'PY'
import hashlib, json, pathlib, sys
root = pathlib.Path(sys.argv[1])
files = json.loads((root / "{manifest}").read_text(encoding="utf-8"))["files"]
bad = [f for f, h in files.items()
       if not (root / f).is_file() or hashlib.sha256((root / f).read_bytes()).hexdigest() != h]
if bad:
    sys.exit("aipc-env bundle: files do not match the manifest (damaged or tampered): " + ", ".join(bad[:5]))
PY
python3 -m venv "$here/.tool"
"$here/.tool/bin/python" -m pip install --no-index --find-links "$here/{wheels}" --quiet \\
    "$here/{wheels}/{aipc_wheel}" uv
exec "$here/.tool/bin/aipc-env" env --bundle "$here" --base-python python3 "$@"
"""

BOOTSTRAP_PS1 = """# aipc-env offline bundle ({pair}, {platform}): build the training env with no network.
# Usage (Windows PowerShell 5.1): powershell -ExecutionPolicy Bypass -File bootstrap.ps1 [-Prefix DIR]
param([string]$Prefix = "")
$ErrorActionPreference = "Stop"
$here = Split-Path -Parent $MyInvocation.MyCommand.Path
# every file against the manifest before anything is installed (aipc-env checks it again)
$manifest = Get-Content -Raw -Encoding UTF8 "$here\\{manifest}" | ConvertFrom-Json
$bad = @()
foreach ($entry in $manifest.files.PSObject.Properties) {{
    $path = Join-Path $here $entry.Name
    if (-not (Test-Path -LiteralPath $path -PathType Leaf)) {{ $bad += $entry.Name; continue }}
    $hash = (Get-FileHash -LiteralPath $path -Algorithm SHA256).Hash.ToLower()
    if ($hash -ne $entry.Value) {{ $bad += $entry.Name }}
}}
if ($bad.Count -gt 0) {{
    Write-Error ("aipc-env bundle: files do not match the manifest (damaged or tampered): " + ($bad -join ", "))
    exit 1
}}
py -{python} -m venv "$here\\.tool"
if ($LASTEXITCODE -ne 0) {{ exit $LASTEXITCODE }}
& "$here\\.tool\\Scripts\\python.exe" -m pip install --no-index --find-links "$here\\{wheels}" --quiet `
    "$here\\{wheels}\\{aipc_wheel}" uv
if ($LASTEXITCODE -ne 0) {{ exit $LASTEXITCODE }}
$argv = @("env", "--bundle", $here)
if ($Prefix) {{ $argv += @("--prefix", $Prefix) }}
& "$here\\.tool\\Scripts\\aipc-env.exe" @argv
exit $LASTEXITCODE
"""


def _conda_packages(lock_dir: Path, platform: Platform, out: Path, cache: Path) -> list[Path]:
    """The conda layer's packages (url + sha256 from conda-lock.yml), when the pair has a conda lock."""
    path = conda_lock_path(lock_dir)
    if not path.is_file():
        return []
    from aipc_env.fileio import read_yaml

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


def build_bundle(pair: Pair, platform: Platform, lockfile: Path, out: Path, *, python: str, aipc_wheel: Path,
                 winget_yaml: str | None, cache: Path, find_links: list[Path] = (), log=print) -> BundleManifest:
    """Write the bundle into `out` (a new or empty folder), built beside it and renamed into place: a failed or
    interrupted build leaves nothing behind."""
    from aipc_env.fileio import atomic_dir

    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise InputError("the bundle folder is not empty", path=out, fix="choose a new folder")
    with atomic_dir(out) as tmp:
        return _build_into(tmp, pair, platform, lockfile, python=python, aipc_wheel=aipc_wheel,
                           winget_yaml=winget_yaml, cache=cache, find_links=find_links, log=log)


def _build_into(out: Path, pair: Pair, platform: Platform, lockfile: Path, *, python: str, aipc_wheel: Path,
                winget_yaml: str | None, cache: Path, find_links: list[Path], log) -> BundleManifest:
    lock = read_pylock(lockfile)
    artifacts = select_artifacts(lock, python, lockfile, platform)
    log(f"fetching {len(artifacts)} wheels (sha256-checked)")
    fill_wheelhouse(artifacts, out / WHEELS, lock_dir=lockfile.parent, cache=cache, find_links=list(find_links),
                    log=log)
    shutil.copyfile(aipc_wheel, out / WHEELS / aipc_wheel.name)
    conda = _conda_packages(lockfile.parent, platform, out / "conda", cache)
    if conda:
        log(f"{len(conda)} conda packages for the interpreter layer")
    shutil.copyfile(lockfile, out / lockfile.name)
    requirements = f"requirements.{platform}.txt"
    (out / requirements).write_text(hashed_requirements(artifacts), encoding="utf-8")
    names = {"pair": pair.id, "platform": platform, "python": python, "wheels": WHEELS, "aipc_wheel": aipc_wheel.name,
             "manifest": MANIFEST}
    sh = out / "bootstrap.sh"
    sh.write_text(BOOTSTRAP_SH.format(**names), encoding="utf-8")
    sh.chmod(0o755)
    (out / "bootstrap.ps1").write_text(BOOTSTRAP_PS1.format(**names).replace("\n", "\r\n"), encoding="utf-8")
    if winget_yaml is not None:
        (out / f"aipc-{pair.id}.dsc.yaml").write_text(winget_yaml, encoding="utf-8")
    files = {p.relative_to(out).as_posix(): file_sha256(p) for p in sorted(out.rglob("*")) if p.is_file()}
    manifest = BundleManifest(pair=pair.id, platform=platform, python=python, lockfile=lockfile.name,
                              requirements=requirements, aipc_env_wheel=aipc_wheel.name, created_at=timestamp(),
                              files=files)
    write_model(out / MANIFEST, manifest)
    return manifest


def verify_bundle(bundle: Path) -> BundleManifest:
    """The manifest, after proving every file it lists is there with its sha256 and no other file was added."""
    if not (bundle / MANIFEST).is_file():
        raise InputError(f"not an aipc-env bundle (no {MANIFEST})", path=bundle,
                         fix="pass the folder made by `aipc-env fleet bundle`")
    manifest = load_versioned(BundleManifest, bundle / MANIFEST)
    problems = []
    for rel, sha in manifest.files.items():
        path = bundle / rel
        if not path.is_file():
            problems.append(f"{rel}: missing")
        elif file_sha256(path) != sha:
            problems.append(f"{rel}: sha256 differs from the manifest")
    ignore = {MANIFEST}
    for path in sorted(bundle.rglob("*")):
        rel = path.relative_to(bundle).as_posix()
        if path.is_file() and rel not in manifest.files and rel not in ignore and not rel.startswith(".tool/"):
            problems.append(f"{rel}: not in the manifest")
    if problems:
        shown = "; ".join(problems[:5]) + (f" (+{len(problems) - 5} more)" if len(problems) > 5 else "")
        raise BundleTampered(f"the bundle does not match its manifest: {shown}", path=bundle,
                             fix="get an intact copy of the bundle; nothing was installed")
    return manifest
