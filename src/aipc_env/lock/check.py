"""`aipc-env lock check` of one lock folder: everything `lockfile.check_pylock` and `check_public_artifacts` find
per platform, the closure of every platform and Python the lock covers (`requires.lock_closure`), the staleness
of the matrix row it came from, and the conda layer."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from packaging.utils import canonicalize_name

from aipc_env.core.platforms import DEFAULT_PYTHON, PLATFORMS, marker_environment
from aipc_env.core.specs import evaluate_marker, parse_requirement, parse_version
from aipc_env.lock.conda_layer import sources_path
from aipc_env.lock.lockfile import (
    LockMeta,
    Pylock,
    check_public_artifacts,
    check_pylock,
    conda_lock_path,
    meta_path,
    provenance_of,
    pylock_path,
    read_meta,
    read_pylock,
)
from aipc_env.lock.requires import IndexReader, lock_closure, recorded_metadata
from aipc_env.lock.specs import EXPLICIT_XPU_NAMES, row_hash
from aipc_env.lock.wheels import WheelManifest, load_wheel_manifest
from aipc_env.matrix import Matrix, Pair

__all__ = ["Readers", "check_pair_lock", "default_readers", "inferred_metadata", "manifest_row_problems"]

Readers = Mapping[str, IndexReader]


class _DefaultReaders(dict[str, IndexReader]):
    """An IndexReader per index URL, made when first asked for (cached metadata, the network for the rest)."""

    def __missing__(self, url: str) -> IndexReader:
        self[url] = IndexReader.default(url)
        return self[url]


def default_readers() -> Readers:
    return _DefaultReaders()


def _reader(lock: Pylock, readers: Readers | None, meta: LockMeta | None) -> IndexReader | None:
    """The reader for the index a lock's unrecorded packages came from (None: none needed, or none given)."""
    if readers is None:
        return None
    unrecorded = [p for p in lock.packages if provenance_of(p)["provenance"] == "index" and recorded_metadata(p) is None]
    if not unrecorded:
        return None
    url = provenance_of(unrecorded[0]).get("index") or (meta.pypi_url if meta else None)
    return readers[url] if url else None


def manifest_row_problems(pair: Pair, torch: str, manifest: WheelManifest) -> list[str]:
    """Where the manifest's record of torch's Requires-Dist disagrees with the matrix row's runtime pins and Triton,
    on each platform (the two homes of the same fact must agree; pure)."""
    from aipc_env.lock.verify import requires_dist_problems

    problems = []
    for platform in PLATFORMS:
        record = manifest.metadata_for("torch", f"{torch}+xpu", platform)
        if record is None:
            problems.append(f"environments/xpu-wheels.yaml: no metadata of torch {torch}+xpu for {platform}")
            continue
        found = requires_dist_problems(record.requires_dist, pair, platform, DEFAULT_PYTHON)
        triton = pair.triton_pin() if pair.triton.applies_to(platform) else None
        if triton is not None:
            lines = [parse_requirement(r) for r in record.requires_dist]
            pin = next(
                (
                    r
                    for r in lines
                    if canonicalize_name(r.name) == triton.key
                    and (r.marker is None or evaluate_marker(r.marker, marker_environment(platform)))
                ),
                None,
            )
            if pin is None or not any(
                s.operator == "==" and parse_version(s.version) == parse_version(pair.triton_for(torch)) for s in pin.specifier
            ):
                found.append(
                    f"torch requires {pin or 'no ' + triton.name}, the matrix row pins {triton.name} {pair.triton_for(torch)}"
                )
        problems += [f"environments/xpu-wheels.yaml: torch {torch}+xpu on {platform}: {p}" for p in found]
    return problems


def check_pair_lock(
    lock_dir: Path, matrix: Matrix, manifest: WheelManifest | None = None, readers: Readers | None = None
) -> list[str]:
    """Every problem of lockfiles/<pair>/: both platforms, hashes, torch and runtime pins, one Triton, the public
    artifacts against the manifest, the closure of every platform and Python it covers, the conda layer (unless
    lock-meta.json says why there is none), completeness. `readers` (index URL -> IndexReader) read the metadata
    a lock does not record (older locks); without them such a lock's closure is a problem, unchecked."""
    pair = matrix.get(lock_dir.name)
    problems: list[str] = []
    meta = None
    if not meta_path(lock_dir).is_file():
        problems.append(f"{meta_path(lock_dir)}: missing")
    else:
        meta = read_meta(lock_dir)
        if meta.matrix_row_hash != row_hash(pair):
            problems.append(
                f"{meta_path(lock_dir)}: made from an older matrix row of {pair.id} "
                f"(environments/matrix.yaml, pairs: {pair.id}); re-lock: nox -s lock -- --pair {pair.id}"
            )
    manifest = manifest or load_wheel_manifest()
    if meta is not None and meta.torch:
        problems += manifest_row_problems(pair, meta.torch, manifest)
    pythons = (meta.pythons or [meta.python]) if meta is not None else []
    counts: dict[str, int] = {}
    for platform in PLATFORMS:
        path = pylock_path(lock_dir, platform)
        if not path.is_file():
            problems.append(f"{path}: missing")
            continue
        lock = read_pylock(path)
        for pkg in lock.packages:
            kind = provenance_of(pkg)["provenance"]
            counts[kind] = counts.get(kind, 0) + 1
        problems += check_pylock(lock, path, pair, platform)
        problems += check_public_artifacts(lock, path, manifest)
        if meta is not None and meta.xpu_source == "manifest":  # then nothing of the XPU index may claim "index"
            problems += [
                f"{path}: {p.name} {p.version} says provenance `index`, but lock-meta.json says the XPU "
                "wheels came from environments/xpu-wheels.yaml"
                for p in lock.packages
                if p.key in EXPLICIT_XPU_NAMES and provenance_of(p)["provenance"] != "public-lockfile"
            ]
        reader = _reader(lock, readers, meta)
        problems += lock_closure(lock, path, platform, pythons, manifest, reader)
    complete = all(pylock_path(lock_dir, p).is_file() for p in PLATFORMS)
    if meta is not None and meta.provenance and complete and meta.provenance != counts:
        problems.append(
            f"{meta_path(lock_dir)}: says the locks hold {_counts(meta.provenance)}, but they hold "
            f"{_counts(counts)}: a lock was edited after it was made; re-lock: nox -s lock -- --pair "
            f"{pair.id}"
        )
    conda = conda_lock_path(lock_dir)
    if meta is not None and meta.conda_layer.get("status") == "unavailable":  # said, and noted by lock_notes
        if conda.is_file():
            problems.append(f"{conda}: present, but lock-meta.json says the conda channels were unreachable")
    elif not conda.is_file():
        problems.append(f"{conda}: missing (conda layer)")
    else:
        problems += [f"{conda}: {p}" for p in conda_layer_problems(lock_dir, meta)]
    return problems


def conda_layer_problems(lock_dir: Path, meta: LockMeta | None) -> list[str]:
    """A conda layer assembled from public records: read back, closed under `depends`, every package with its
    source, the interpreter the one lock-meta.json names."""
    from aipc_env.core.formats import load_versioned
    from aipc_env.lock.conda_layer import (
        CondaSources,
        closure_problems,
        conda_python,
        read_conda_lock,
        source_problems,
    )
    from aipc_env.lock.condaspec import can_check_closure

    lock = read_conda_lock(conda_lock_path(lock_dir))
    # without the lock extra (a plain pipx install) the closure is left to a checker that has conda's rules: a note
    # of lock_notes says so, the rest is still checked
    problems = closure_problems(lock) if can_check_closure() else []
    if sources_path(lock_dir).is_file():  # assembled from public records (a lock made by conda-lock has no sidecar)
        problems += source_problems(lock, load_versioned(CondaSources, sources_path(lock_dir)))
    held = {v for p in lock.metadata.platforms if (v := conda_python(lock, p)) is not None}
    if meta is not None:
        said = meta.conda_layer.get("python")
        if said is not None and held != {said}:
            problems.append(f"python {', '.join(sorted(held))}, but lock-meta.json's conda_layer says {said}")
        off = sorted(v for v in held if ".".join(v.split(".")[:2]) != meta.python)
        if off:
            problems.append(f"python {', '.join(off)} is not the Python {meta.python} the pair's envs are built with")
    return problems


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items())) or "no packages"


def inferred_metadata(lock_dir: Path, manifest: WheelManifest | None = None) -> list[str]:
    """The packages of a lock whose core metadata stands on an inferred record of the manifest (no source shows the
    wheel's own Requires-Dist): "torch 2.12.0+xpu (win-64, linux-64)", sorted; a package the manifest has no record
    of is a closure problem, not listed here."""
    manifest = manifest or load_wheel_manifest()
    found: dict[str, list[str]] = {}
    for platform in PLATFORMS:
        path = pylock_path(lock_dir, platform)
        if not path.is_file():
            continue
        for pkg in read_pylock(path).packages:
            if provenance_of(pkg)["provenance"] != "public-lockfile":
                continue
            record = manifest.metadata_for(pkg.name, pkg.version or "", platform)
            if record is not None and record.certainty == "inferred":
                found.setdefault(f"{pkg.name} {pkg.version}", []).append(platform)
    return [f"{name} ({', '.join(platforms)})" for name, platforms in sorted(found.items())]
