"""Offline bundles: everything one platform needs to build a pair's training env with no network — the lock,
every wheel it names (hash-checked), the conda layer's packages where a conda lock exists, aipc-env itself as a
wheel, the WinGet configuration (Windows), bootstrap scripts, and a manifest with the sha256 of every file.
`aipc-env env --bundle DIR` installs from it, after proving every file matches the manifest
(aipc_env.fleet.bundle_check)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import ClassVar, Literal

from aipc_env.errors import InputError
from aipc_env.fleet.sign import SecretKey, sign_file
from aipc_env.formats import VersionedModel, timestamp, write_model
from aipc_env.interrupts import checkpoint
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
from aipc_env.platforms import Platform

__all__ = ["MANIFEST", "SIGNATURE", "BundleManifest", "build_bundle"]

MANIFEST = "bundle-manifest.json"
SIGNATURE = MANIFEST + ".minisig"
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


BOOTSTRAP_SH = """#!/bin/sh
# aipc-env offline bundle ({pair}, {platform}): build the training env with no network.
# Usage: AIPC_ENV_BUNDLE_TRUST=/path/admin.pub sh bootstrap.sh [--prefix DIR]   (needs python3 {python} with venv)
# With AIPC_ENV_BUNDLE_TRUST (the admin's minisign public key, kept outside the bundle) the manifest's signature is
# checked with the minisign CLI before anything from the bundle runs; without it an unsigned bundle is warned about.
set -eu
here=$(CDPATH= cd -- "$(dirname -- "$0")" && pwd)
if [ -n "${{AIPC_ENV_BUNDLE_TRUST:-}}" ]; then
    if ! command -v minisign >/dev/null 2>&1; then
        echo "aipc-env bundle: a trust key is set but minisign is not installed (apt install minisign)" >&2
        exit 1
    fi
    if ! minisign -Vm "$here/{manifest}" -p "$AIPC_ENV_BUNDLE_TRUST" -q; then
        echo "aipc-env bundle: the manifest's signature does not verify with $AIPC_ENV_BUNDLE_TRUST; nothing was run" >&2
        exit 1
    fi
else
    echo "aipc-env bundle: warning: no AIPC_ENV_BUNDLE_TRUST key: the bundle's signature is not checked" >&2
fi
# every file against the manifest (paths inside the bundle, no links, nothing extra) before anything is installed
python3 -I - "$here" <<'PY'
import hashlib, json, os, pathlib, sys
root = pathlib.Path(sys.argv[1])
files = json.loads((root / "{manifest}").read_text(encoding="utf-8"))["files"]
bad = [f for f in files if f.startswith(("/", "\\\\")) or ".." in f.split("/") or ":" in f or "\\\\" in f]
bad += [f for f, h in files.items() if f not in bad and (os.path.islink(root / f) or not (root / f).is_file()
        or hashlib.sha256((root / f).read_bytes()).hexdigest() != h)]
known = set(files) | {{"{manifest}", "{manifest}.minisig"}}
for dirpath, dirnames, filenames in os.walk(root):
    for name in dirnames + filenames:
        rel = os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/")
        if os.path.islink(os.path.join(dirpath, name)) or (name in filenames and rel not in known):
            bad.append(rel)
if bad:
    sys.exit("aipc-env bundle: files do not match the manifest (damaged or tampered): " + ", ".join(bad[:5]))
PY
# the aipc-env that installs the env lives outside the bundle: a temporary venv, or AIPC_BUNDLE_TOOL (kept, for
# the commands that follow, e.g. an Ansible play's env --check and doctor)
if [ -n "${{AIPC_BUNDLE_TOOL:-}}" ]; then
    case "$AIPC_BUNDLE_TOOL" in
        "$here"|"$here"/*) echo "aipc-env bundle: AIPC_BUNDLE_TOOL must be outside the bundle" >&2; exit 2 ;;
    esac
    if [ -e "$AIPC_BUNDLE_TOOL" ] && [ ! -f "$AIPC_BUNDLE_TOOL/pyvenv.cfg" ]; then
        echo "aipc-env bundle: AIPC_BUNDLE_TOOL=$AIPC_BUNDLE_TOOL exists and is not a venv" >&2; exit 2
    fi
    venv=$AIPC_BUNDLE_TOOL
else
    tool=$(mktemp -d "${{TMPDIR:-/tmp}}/aipc-bundle-tool.XXXXXX")
    trap 'rm -rf "$tool"' EXIT
    venv=$tool/venv
fi
python3 -m venv --clear "$venv"
"$venv/bin/python" -m pip install --no-index --find-links "$here/{wheels}" --quiet \\
    "$here/{wheels}/{aipc_wheel}" uv
"$venv/bin/aipc-env" env --bundle "$here" --base-python python3 "$@"
"""

BOOTSTRAP_PS1 = """# aipc-env offline bundle ({pair}, {platform}): build the training env with no network.
# Usage (Windows PowerShell 5.1): powershell -ExecutionPolicy Bypass -File bootstrap.ps1 [-Prefix DIR] [-Trust admin.pub]
# With -Trust (or AIPC_ENV_BUNDLE_TRUST: the admin's minisign public key, kept outside the bundle) the manifest's
# signature is checked with minisign.exe before anything from the bundle runs.
param([string]$Prefix = "", [string]$Trust = $env:AIPC_ENV_BUNDLE_TRUST, [string]$Tool = $env:AIPC_BUNDLE_TOOL)
$ErrorActionPreference = "Stop"
$here = Split-Path -Parent $MyInvocation.MyCommand.Path
if ($Trust) {{
    if (-not (Get-Command minisign.exe -ErrorAction SilentlyContinue)) {{
        Write-Error "aipc-env bundle: a trust key is set but minisign.exe is not on PATH (winget install jedisct1.minisign)"
        exit 1
    }}
    & minisign.exe -Vm "$here\\{manifest}" -p $Trust -q
    if ($LASTEXITCODE -ne 0) {{
        Write-Error "aipc-env bundle: the manifest's signature does not verify; nothing was run"
        exit 1
    }}
}} else {{
    Write-Warning "aipc-env bundle: no trust key (-Trust): the bundle's signature is not checked"
}}
# every file against the manifest (paths inside the bundle, no links, nothing extra) before anything is installed
$manifest = Get-Content -Raw -Encoding UTF8 "$here\\{manifest}" | ConvertFrom-Json
$bad = @()
$known = @{{"{manifest}" = 1; "{manifest}.minisig" = 1}}
foreach ($entry in $manifest.files.PSObject.Properties) {{
    $known[$entry.Name] = 1
    if ($entry.Name -match '(^[/\\\\])|(\\.\\.)|:|\\\\') {{ $bad += $entry.Name; continue }}
    $path = Join-Path $here $entry.Name
    $item = Get-Item -LiteralPath $path -Force -ErrorAction SilentlyContinue
    if (-not $item -or $item.PSIsContainer -or $item.LinkType) {{ $bad += $entry.Name; continue }}
    $hash = (Get-FileHash -LiteralPath $path -Algorithm SHA256).Hash.ToLower()
    if ($hash -ne $entry.Value) {{ $bad += $entry.Name }}
}}
foreach ($item in Get-ChildItem -LiteralPath $here -Recurse -Force) {{
    $rel = $item.FullName.Substring($here.Length + 1).Replace("\\", "/")
    if ($item.LinkType -or (-not $item.PSIsContainer -and -not $known.ContainsKey($rel))) {{ $bad += $rel }}
}}
if ($bad.Count -gt 0) {{
    Write-Error ("aipc-env bundle: files do not match the manifest (damaged or tampered): " + ($bad -join ", "))
    exit 1
}}
# the aipc-env that installs the env lives outside the bundle: a temporary venv, or -Tool DIR (kept)
$keep = [bool]$Tool
if ($keep) {{
    $full = [System.IO.Path]::GetFullPath($Tool)
    if ($full -eq $here -or $full.StartsWith($here + "\\")) {{
        Write-Error "aipc-env bundle: -Tool must be outside the bundle"; exit 2
    }}
    if ((Test-Path -LiteralPath $full) -and -not (Test-Path -LiteralPath (Join-Path $full "pyvenv.cfg"))) {{
        Write-Error "aipc-env bundle: -Tool $full exists and is not a venv"; exit 2
    }}
    $tool = $full
}} else {{
    $tool = Join-Path ([System.IO.Path]::GetTempPath()) ("aipc-bundle-tool-" + [guid]::NewGuid())
}}
try {{
    py -{python} -m venv --clear "$tool"
    if ($LASTEXITCODE -ne 0) {{ exit $LASTEXITCODE }}
    & "$tool\\Scripts\\python.exe" -m pip install --no-index --find-links "$here\\{wheels}" --quiet `
        "$here\\{wheels}\\{aipc_wheel}" uv
    if ($LASTEXITCODE -ne 0) {{ exit $LASTEXITCODE }}
    $argv = @("env", "--bundle", $here)
    if ($Prefix) {{ $argv += @("--prefix", $Prefix) }}
    if ($Trust) {{ $argv += @("--trust", $Trust) }}
    & "$tool\\Scripts\\aipc-env.exe" @argv
    exit $LASTEXITCODE
}} finally {{
    if (-not $keep) {{ Remove-Item -LiteralPath $tool -Recurse -Force -ErrorAction SilentlyContinue }}
}}
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
                 winget_yaml: str | None, cache: Path, find_links: list[Path] = (), log=print,
                 sign_key: SecretKey | None = None) -> BundleManifest:
    """Write the bundle into `out` (a new or empty folder), built beside it and renamed into place: a failed or
    interrupted build leaves nothing behind. With `sign_key` the manifest gets a minisign signature."""
    from aipc_env.fileio import atomic_dir

    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise InputError("the bundle folder is not empty", path=out, fix="choose a new folder")
    with atomic_dir(out) as tmp:
        manifest = _build_into(tmp, pair, platform, lockfile, python=python, aipc_wheel=aipc_wheel,
                               winget_yaml=winget_yaml, cache=cache, find_links=find_links, log=log)
        if sign_key is not None:
            sign_file(tmp / MANIFEST, sign_key, f"aipc-env bundle {pair.id} {platform} {manifest.created_at}",
                      untrusted_comment=f"aipc-env bundle signature (key {sign_key.key_id[::-1].hex().upper()})")
        return manifest


def _build_into(out: Path, pair: Pair, platform: Platform, lockfile: Path, *, python: str, aipc_wheel: Path,
                winget_yaml: str | None, cache: Path, find_links: list[Path], log) -> BundleManifest:
    lock = read_pylock(lockfile)
    check_holds_aipc_env(lock, python, lockfile, platform, aipc_wheel)
    artifacts = select_artifacts(lock, python, lockfile, platform)
    log(f"fetching {len(artifacts)} wheels (sha256-checked)")
    fill_wheelhouse(artifacts, out / WHEELS, lock_dir=lockfile.parent, cache=cache, find_links=list(find_links),
                    log=log)
    checkpoint("bundle:after-wheels")
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
