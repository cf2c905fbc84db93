# aipc-env offline bundle (@AIPC_PAIR@, @AIPC_PLATFORM@): build the training env with no network.
# Usage (Windows PowerShell 5.1): powershell -ExecutionPolicy Bypass -File bootstrap.ps1 [-Prefix DIR] [-Trust admin.pub]
# With -Trust (or AIPC_ENV_BUNDLE_TRUST: the admin's minisign public key, kept outside the bundle) the manifest's
# signature is checked with minisign.exe before anything from the bundle runs.
param([string]$Prefix = "", [string]$Trust = $env:AIPC_ENV_BUNDLE_TRUST, [string]$Tool = $env:AIPC_BUNDLE_TOOL)
$ErrorActionPreference = "Stop"
$here = Split-Path -Parent $MyInvocation.MyCommand.Path
if ($Trust) {
    if (-not (Get-Command minisign.exe -ErrorAction SilentlyContinue)) {
        Write-Error "aipc-env bundle: a trust key is set but minisign.exe is not on PATH (winget install jedisct1.minisign)"
        exit @AIPC_EXIT_PROBLEMS@
    }
    & minisign.exe -Vm "$here\@AIPC_MANIFEST@" -p $Trust -q
    if ($LASTEXITCODE -ne 0) {
        Write-Error "aipc-env bundle: the manifest's signature does not verify; nothing was run"
        exit @AIPC_EXIT_PROBLEMS@
    }
} else {
    Write-Warning "aipc-env bundle: no trust key (-Trust): the bundle's signature is not checked"
}
# every file against the manifest (paths inside the bundle, no links, nothing extra) before anything is installed:
# aipc-env's own check, shipped as @AIPC_VERIFIER@ and run only if it is the file this script was made with
$verifier = Join-Path $here "@AIPC_VERIFIER@"
$item = Get-Item -LiteralPath $verifier -Force -ErrorAction SilentlyContinue
if (-not $item -or $item.PSIsContainer -or $item.LinkType -or
        (Get-FileHash -LiteralPath $verifier -Algorithm SHA256).Hash.ToLower() -ne "@AIPC_VERIFIER_SHA256@") {
    Write-Error "aipc-env bundle: @AIPC_VERIFIER@ is missing or not the one this bundle was made with; nothing was run"
    exit @AIPC_EXIT_PROBLEMS@
}
& py -@AIPC_PYTHON@ -I "$verifier" "$here"
if ($LASTEXITCODE -ne 0) { exit @AIPC_EXIT_PROBLEMS@ }
# the aipc-env that installs the env lives outside the bundle: a temporary venv, or -Tool DIR (kept)
$keep = [bool]$Tool
if ($keep) {
    $full = [System.IO.Path]::GetFullPath($Tool)
    if ($full -eq $here -or $full.StartsWith($here + "\")) {
        Write-Error "aipc-env bundle: -Tool must be outside the bundle"; exit @AIPC_EXIT_USAGE@
    }
    if ((Test-Path -LiteralPath $full) -and -not (Test-Path -LiteralPath (Join-Path $full "pyvenv.cfg"))) {
        Write-Error "aipc-env bundle: -Tool $full exists and is not a venv"; exit @AIPC_EXIT_USAGE@
    }
    $tool = $full
} else {
    $tool = Join-Path ([System.IO.Path]::GetTempPath()) ("aipc-bundle-tool-" + [guid]::NewGuid())
}
try {
    py -@AIPC_PYTHON@ -m venv --clear "$tool"
    if ($LASTEXITCODE -ne 0) { exit $LASTEXITCODE }
    & "$tool\Scripts\python.exe" -m pip install --no-index --find-links "$here\@AIPC_WHEELS@" --quiet `
        "$here\@AIPC_WHEELS@\@AIPC_AIPC_WHEEL@" uv
    if ($LASTEXITCODE -ne 0) { exit $LASTEXITCODE }
    $argv = @("env", "--bundle", $here)
    if ($Prefix) { $argv += @("--prefix", $Prefix) }
    if ($Trust) { $argv += @("--trust", $Trust) }
    & "$tool\Scripts\aipc-env.exe" @argv
    exit $LASTEXITCODE
} finally {
    if (-not $keep) { Remove-Item -LiteralPath $tool -Recurse -Force -ErrorAction SilentlyContinue }
}
