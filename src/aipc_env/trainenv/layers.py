"""The two layers of a training env meet in one site-packages: the conda layer (the interpreter, with conda's own pip
and, in older conda-forge builds, setuptools and wheel) and the pip layer (the pylock). The pip layer installs
without removing or replacing anything the conda layer owns: conda's distributions are read from the prefix's
`conda-meta/*.json` records (py-rattler's PrefixRecord, conda's own record format), left out of the pylock that is
installed and out of what is removed as extra, and every requirement of the lock on them must accept conda's
version (else the build stops and names both). Pure but for reading the records and writing the filtered lock."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name

from aipc_env.core.platforms import Platform
from aipc_env.errors import AipcError
from aipc_env.lock.closure import LockedDist, closure_problems
from aipc_env.lock.lockfile import Pylock
from aipc_env.lock.requires import locked_dists
from aipc_env.lock.wheels import WheelManifest

__all__ = ["CondaOwned", "conda_owned", "kept_for_conda", "pip_layer_lock", "pip_layer_of"]

MAX_RECORDS = 5000
_DIST_INFO = re.compile(r"(?:^|/)site-packages/([^/]+)-([^/-]+)\.dist-info/METADATA$")


@dataclass(frozen=True)
class CondaOwned:
    """A Python distribution a conda package installed into the prefix."""

    name: str
    """Canonical distribution name (from its .dist-info folder)."""
    version: str
    package: str
    """The conda package (name-version-build) whose record lists it."""


def conda_owned(prefix: Path) -> dict[str, CondaOwned]:
    """The Python distributions the prefix's conda packages installed, by canonical name (empty: no conda-meta, e.g.
    a venv). A record that conda's own reader cannot read is a named error, never a traceback."""
    meta = prefix / "conda-meta"
    if not meta.is_dir():
        return {}
    try:
        import rattler.exceptions
        from rattler import PrefixRecord
    except ImportError:
        raise AipcError(
            f"{prefix} is a conda env; reading its conda records needs py-rattler", fix="pip install 'aipc-env[lock]'"
        ) from None
    errors: tuple[type[BaseException], ...] = tuple(
        e
        for n in dir(rattler.exceptions)
        if isinstance(e := getattr(rattler.exceptions, n), type) and issubclass(e, BaseException)
    ) + (OSError, ValueError, TypeError)
    records = sorted(meta.glob("*.json"))
    if len(records) > MAX_RECORDS:
        raise AipcError(f"{len(records)} conda records in {meta} (at most {MAX_RECORDS})", path=meta)
    owned: dict[str, CondaOwned] = {}
    for path in records:
        try:
            record = PrefixRecord.from_path(path)
            files = [str(f).replace("\\", "/") for f in record.files]
            package = f"{record.name.normalized}-{record.version}-{record.build}"
        except errors as exc:  # rattler's parse errors are its own types
            why = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
            raise AipcError(
                f"conda's record {path.name} cannot be read: {why}",
                path=path,
                fix="repair the conda layer (rebuild the env: nox -s env)",
            ) from None
        for file in files:
            found = _DIST_INFO.search(file)
            if found:
                name = canonicalize_name(found.group(1))
                owned[name] = CondaOwned(name, found.group(2), package)
    return owned


def kept_for_conda(
    lock: Pylock, platform: Platform, python: str, manifest: WheelManifest, owned: dict[str, CondaOwned]
) -> list[str]:
    """What the pip layer leaves to the conda layer: each conda distribution the lock also pins, with both versions.
    AipcError when a locked requirement does not accept conda's version (the layers would need one version each)."""
    if not owned:
        return []
    dists, _ = locked_dists(lock, platform, manifest)
    pinned = {d.key: d for d in dists if d.key in owned}
    if not pinned:
        return []
    swapped = [
        LockedDist(d.name, owned[d.key].version, d.marker, (), None, d.wheels, d.sdist) if d.key in owned else d for d in dists
    ]
    clashes = [p for p in closure_problems(swapped, platform, python) if any(f"requires {n}" in p.lower() for n in pinned)]
    if clashes:
        raise AipcError(
            "the pip layer needs another version of what the conda layer installed (it would replace conda's files):\n  "
            + "\n  ".join(
                [f"{d.name}: conda has {owned[k].version} ({owned[k].package}), the lock {d.version}" for k, d in pinned.items()]
                + clashes
            ),
            fix="lock both layers at one version: re-lock the pair (nox -s lock -- --pair <pair>) with a conda layer "
            "whose versions the pip layer accepts",
        )
    return [
        f"{d.name} {owned[k].version} kept from the conda layer ({owned[k].package}); the lock's {d.version} is not "
        "installed over it (every locked requirement on it accepts conda's)"
        for k, d in sorted(pinned.items())
        if d.version != owned[k].version
    ]


def pip_layer_of(lock: Pylock, owned: dict[str, CondaOwned]) -> Pylock:
    """The lock's packages the pip layer installs and answers for (the conda layer's left out)."""
    if not owned:
        return lock
    return lock.model_copy(update={"packages": [p for p in lock.packages if canonicalize_name(p.name) not in owned]})


def pip_layer_lock(lockfile: Path, owned: dict[str, CondaOwned], out: Path) -> Path:
    """The pylock the pip layer installs: the lock without the conda layer's distributions (written to `out`; the
    lock itself when conda owns none of its packages)."""
    import tomli_w

    from aipc_env.core.fileio import parse_toml, read_text

    data = parse_toml(read_text(lockfile, "pylock"), lockfile, "pylock")
    packages = data.get("packages", [])
    kept = [p for p in packages if canonicalize_name(str(p.get("name", ""))) not in owned]
    if len(kept) == len(packages):
        return lockfile
    out.write_text(tomli_w.dumps({**data, "packages": kept}), encoding="utf-8")
    return out
