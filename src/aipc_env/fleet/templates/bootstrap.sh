#!/bin/sh
# aipc-env offline bundle (@AIPC_PAIR@, @AIPC_PLATFORM@): build the training env with no network.
# Usage: AIPC_ENV_BUNDLE_TRUST=/path/admin.pub sh bootstrap.sh [--prefix DIR]   (needs python3 @AIPC_PYTHON@ with venv)
# With AIPC_ENV_BUNDLE_TRUST (the admin's minisign public key, kept outside the bundle) the manifest's signature is
# checked with the minisign CLI before anything from the bundle runs; without it an unsigned bundle is warned about.
set -eu
here=$(CDPATH= cd -- "$(dirname -- "$0")" && pwd)
if [ -n "${AIPC_ENV_BUNDLE_TRUST:-}" ]; then
    if ! command -v minisign >/dev/null 2>&1; then
        echo "aipc-env bundle: a trust key is set but minisign is not installed (apt install minisign)" >&2
        exit @AIPC_EXIT_PROBLEMS@
    fi
    if ! minisign -Vm "$here/@AIPC_MANIFEST@" -p "$AIPC_ENV_BUNDLE_TRUST" -q; then
        echo "aipc-env bundle: the manifest's signature does not verify with $AIPC_ENV_BUNDLE_TRUST; nothing was run" >&2
        exit @AIPC_EXIT_PROBLEMS@
    fi
else
    echo "aipc-env bundle: warning: no AIPC_ENV_BUNDLE_TRUST key: the bundle's signature is not checked" >&2
fi
# every file against the manifest (paths inside the bundle, no links, nothing extra) before anything is installed:
# aipc-env's own check, shipped as @AIPC_VERIFIER@ and run only if it is the file this script was made with
if ! (cd "$here" && printf '%s  %s\n' "@AIPC_VERIFIER_SHA256@" "@AIPC_VERIFIER@" | sha256sum -c --status - 2>/dev/null); then
    echo "aipc-env bundle: @AIPC_VERIFIER@ is missing or not the one this bundle was made with; nothing was run" >&2
    exit @AIPC_EXIT_PROBLEMS@
fi
if ! python3 -I "$here/@AIPC_VERIFIER@" "$here"; then
    exit @AIPC_EXIT_PROBLEMS@
fi
# the aipc-env that installs the env lives outside the bundle: a temporary venv, or AIPC_BUNDLE_TOOL (kept, for
# the commands that follow, e.g. an Ansible play's env --check and doctor)
if [ -n "${AIPC_BUNDLE_TOOL:-}" ]; then
    case "$AIPC_BUNDLE_TOOL" in
        "$here"|"$here"/*) echo "aipc-env bundle: AIPC_BUNDLE_TOOL must be outside the bundle" >&2; exit @AIPC_EXIT_USAGE@ ;;
    esac
    if [ -e "$AIPC_BUNDLE_TOOL" ] && [ ! -f "$AIPC_BUNDLE_TOOL/pyvenv.cfg" ]; then
        echo "aipc-env bundle: AIPC_BUNDLE_TOOL=$AIPC_BUNDLE_TOOL exists and is not a venv" >&2; exit @AIPC_EXIT_USAGE@
    fi
    venv=$AIPC_BUNDLE_TOOL
else
    tool=$(mktemp -d "${TMPDIR:-/tmp}/aipc-bundle-tool.XXXXXX")
    trap 'rm -rf "$tool"' EXIT
    venv=$tool/venv
fi
python3 -m venv --clear "$venv"
"$venv/bin/python" -m pip install --no-index --find-links "$here/@AIPC_WHEELS@" --quiet \
    "$here/@AIPC_WHEELS@/@AIPC_AIPC_WHEEL@" uv
"$venv/bin/aipc-env" env --bundle "$here" --base-python python3 "$@"
