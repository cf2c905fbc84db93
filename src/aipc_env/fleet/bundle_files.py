"""The one check of an offline bundle's files against its manifest: no link or special file anywhere, every path
relative and inside the bundle, every listed file there with its sha256, and nothing else.

Standard library only: `aipc-env env --bundle` checks through `bundle_check.verify_bundle`, and the bundle's
bootstrap scripts run this same file (shipped in the bundle as `verify-bundle.py`, its sha256 written into the
bootstrap script) with the machine's own Python before anything from the bundle is installed.
`python -I verify-bundle.py BUNDLE` prints what differs and exits 1, or exits 0.
"""

import sys

if __name__ == "__main__" and not getattr(sys.flags, "safe_path", False):
    del sys.path[0]  # the bundle's own folder: a file there must not shadow a standard module before it is checked

import hashlib
import json
import os
import stat

MANIFEST = "bundle-manifest.json"
SIGNATURE = MANIFEST + ".minisig"
VERIFIER = "verify-bundle.py"
MAX_MANIFEST_BYTES = 16 * 1024 * 1024

__all__ = ["MANIFEST", "SIGNATURE", "VERIFIER", "file_problems", "not_plain", "safe_relative", "summary"]


def safe_relative(rel: str) -> bool:
    """A path the manifest may name: relative, '/'-separated, no drive, no '.', '..' or empty part."""
    parts = rel.split("/")
    return (
        bool(rel)
        and not rel.startswith("/")
        and "\\" not in rel
        and ":" not in rel
        and all(part not in ("", ".", "..") for part in parts)
    )


def not_plain(bundle: str) -> list[str]:
    """'<path>: link|FIFO|special file' for everything in the bundle that is not a regular file or folder."""
    found = []
    for dirpath, dirnames, filenames in os.walk(bundle):
        for name in dirnames + filenames:
            mode = os.lstat(os.path.join(dirpath, name)).st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                kind = "link" if stat.S_ISLNK(mode) else "FIFO" if stat.S_ISFIFO(mode) else "special file"
                found.append(f"{_rel(os.path.join(dirpath, name), bundle)}: {kind}")
    return sorted(found)  # the directory's order is the file system's: name them the same way every time


def file_problems(bundle: str, files: dict[str, str]) -> list[str]:
    """What differs between the bundle's files and the manifest's table {relative path: sha256}."""
    problems = [f"{rel}: not a path inside the bundle" for rel in files if not safe_relative(rel)]
    for rel, sha in files.items():
        if not safe_relative(rel):
            continue
        path = os.path.join(bundle, *rel.split("/"))
        if not os.path.isfile(path) or os.path.islink(path):
            problems.append(f"{rel}: missing")
        elif _sha256(path) != sha:
            problems.append(f"{rel}: sha256 differs from the manifest")
    known = set(files) | {MANIFEST, SIGNATURE}
    for dirpath, _dirnames, filenames in sorted(os.walk(bundle)):
        for name in sorted(filenames):
            rel = _rel(os.path.join(dirpath, name), bundle)
            if rel not in known:
                problems.append(f"{rel}: not in the manifest")
    return problems


def summary(problems: list[str]) -> str:
    """The first five problems, then how many more."""
    return "; ".join(problems[:5]) + (f" (+{len(problems) - 5} more)" if len(problems) > 5 else "")


def _rel(path: str, bundle: str) -> str:
    return os.path.relpath(path, bundle).replace(os.sep, "/")


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    """A key twice in one object (a file listed twice, once with a wrong hash) is refused: readers disagree which
    value wins."""
    data = dict(pairs)
    if len(data) != len(pairs):
        names = [k for k, _ in pairs]
        twice = next(k for k in names if names.count(k) > 1)
        raise ValueError(f"the key {twice[:200]!r} appears twice in one object")
    return data


def _manifest_files(bundle: str) -> dict[str, str]:
    path = os.path.join(bundle, MANIFEST)
    with open(path, "rb") as f:
        raw = f.read(MAX_MANIFEST_BYTES + 1)
    if len(raw) > MAX_MANIFEST_BYTES:
        raise ValueError(f"{MANIFEST} is over {MAX_MANIFEST_BYTES} bytes")
    manifest = json.loads(raw.decode("utf-8"), object_pairs_hook=_unique_keys)
    if not isinstance(manifest, dict):
        raise ValueError("the manifest is not one JSON object")
    files = manifest.get("files")
    if not isinstance(files, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        raise ValueError(f"{MANIFEST}: 'files' is not a table of path -> sha256")
    return files


EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE = 0, 1, 2
"""aipc_env.errors.ExitCode's OK, PROBLEMS and USAGE (this file also runs alone, as verify-bundle.py, without the
package; tests/test_rules.py holds the values equal)."""


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -I verify-bundle.py BUNDLE", file=sys.stderr)
        return EXIT_USAGE
    bundle = os.path.abspath(argv[0])
    try:
        problems = not_plain(bundle) or file_problems(bundle, _manifest_files(bundle))
    except (OSError, ValueError, RecursionError) as err:  # json errors are ValueErrors
        problems = [f"{MANIFEST}: {err}"]
    if problems:
        print(
            f"aipc-env bundle: the bundle does not match its manifest (damaged or tampered): {summary(problems)}; "
            "nothing was installed",
            file=sys.stderr,
        )
        return EXIT_PROBLEMS
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
