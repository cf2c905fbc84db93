"""Lock a pair without the PyTorch XPU index (`nox -s lock` when it cannot be reached, or `--from-manifest`).

Everything from PyPI is resolved for real by uv (one universal resolution per platform, forked by Python version
where needed); torch, torchvision and Triton come from environments/xpu-wheels.yaml (hashes read from public
lockfiles), and so do their own dependencies (each release's Requires-Dist as published, recorded there with its
source): the stand-in wheels uv resolves around carry exactly those lists, never an empty one. Every package
in the written pylock says where its hash came from in `[packages.tool.aipc-env]`: `index` (hashed by uv against
the live index it resolved from) or `public-lockfile` (with the repositories it was read from). The torch release
is the one of the pair with wheels for the most Python versions on both platforms (newest on a tie); the lock
covers those Python versions.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.utils import parse_wheel_filename
from packaging.version import Version

from aipc_env.core.platforms import CPYTHON_MINORS, PLATFORMS, Platform, lock_environment, marker_environment, wheel_platform_fits
from aipc_env.core.specs import evaluate_marker, parse_requirement, parse_version
from aipc_env.errors import AipcError, ExitCode
from aipc_env.lock import specs
from aipc_env.lock.wheels import PairArtifacts, WheelManifest, pair_artifacts
from aipc_env.matrix import Pair

__all__ = ["PROVENANCE_TOOL", "OfflinePlan", "merge_pylock", "plan_offline", "pypi_requirements", "stub_wheels"]

PROVENANCE_TOOL = "aipc-env"
CANDIDATE_PYTHONS = CPYTHON_MINORS
PLATFORM_SYSTEM: dict[Platform, str] = {"win-64": "Windows", "linux-64": "Linux"}


@dataclass(frozen=True)
class OfflinePlan:
    torch: str
    pythons: list[str]
    default_python: str
    artifacts: dict[Platform, PairArtifacts]
    uncovered: list[str]
    """Pythons the row allows that no public hash covers on every platform."""


def plan_offline(
    pair: Pair,
    manifest: WheelManifest,
    platforms: tuple[Platform, ...] = PLATFORMS,
    python: str | None = None,
    pythons: SpecifierSet | None = None,
) -> OfflinePlan:
    """Which torch release and Python versions a manifest-based lock of the pair covers (pure; `pythons`: what the
    env may have, default the pair's range). Refuses a pair whose public hashes do not cover one Python on every
    platform, listing what is missing."""
    allowed = [p for p in CANDIDATE_PYTHONS if f"{p}.0" in (pythons or pair.python_specifier)]
    best: OfflinePlan | None = None
    for torch in sorted(pair.torch, key=Version):
        arts = {pl: pair_artifacts(pair, pl, torch, manifest, allowed) for pl in platforms}
        common = [p for p in allowed if all(p in a.pythons for a in arts.values())]
        missing = {pl: a.missing for pl, a in arts.items()}
        if common and (best is None or len(common) >= len(best.pythons)):
            default = python or (specs.DEFAULT_PYTHON if specs.DEFAULT_PYTHON in common else common[-1])
            best = OfflinePlan(torch, common, default, arts, [p for p in allowed if p not in common])
        elif best is None and torch == pair.newest_torch:
            problems = [f"{pl}: {m}" for pl, items in missing.items() for m in items] or ["no common Python"]
            raise AipcError(
                f"{pair.id} cannot be locked from public hashes: " + "; ".join(problems),
                exit_code=ExitCode.PROBLEMS,
                fix="lock it on a machine that reaches the PyTorch XPU index (nox -s lock -- --pair "
                f"{pair.id}), or add the missing hashes to environments/xpu-wheels.yaml with their "
                "sources",
            )
    assert best is not None
    if python and python not in best.pythons:
        raise AipcError(
            f"Python {python} has no public {pair.id} wheels (covered: {', '.join(best.pythons)})",
            key="--python",
            fix=f"pass one of {', '.join(best.pythons)}",
        )
    return best


def stub_wheels(
    folder: Path, pair: Pair, torch: str, manifest: WheelManifest, platforms: tuple[Platform, ...] = PLATFORMS
) -> dict[str, Path]:
    """Metadata-only wheels of torch+xpu, its torchvision and the pair's Triton, whose Requires-Dist is what the
    manifest records for each release: uv resolves everything else against PyPI around them; they never reach a
    lock (the real artifacts come from the manifest). A release the manifest records no metadata for is refused:
    an empty list would lock an env that cannot import it."""
    import zipfile

    folder.mkdir(parents=True, exist_ok=True)
    wanted = {"torch": f"{torch}+xpu", pair.triton.name: pair.triton_for(torch)}
    vision = pair.torchvision_version(torch)
    if vision:
        wanted["torchvision"] = vision
    stubs = {}
    for name, version in wanted.items():
        records = {
            pl: manifest.metadata_for(name, version, pl)
            for pl in platforms
            if name != pair.triton.name or pair.triton.applies_to(pl)
        }
        missing = sorted(pl for pl, r in records.items() if r is None)
        if missing:
            raise AipcError(
                f"{name} {version}: environments/xpu-wheels.yaml records no core metadata (Requires-Dist) "
                f"for {', '.join(missing)}",
                exit_code=ExitCode.PROBLEMS,
                fix="add it under `metadata:` with its source (a public lockfile's dependency record, the "
                "project's setup.py at the release tag), or lock on a machine that reaches the index",
            )
        requires = _merged_requires({pl: r.requires_dist for pl, r in records.items() if r is not None})
        dist = name.replace("-", "_")
        info = f"{dist}-{version}.dist-info"
        meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(f"Requires-Dist: {r}\n" for r in requires)
        path = folder / f"{dist}-{version}-py3-none-any.whl"
        with zipfile.ZipFile(path, "w") as zf:
            zf.writestr(f"{info}/METADATA", meta)
            zf.writestr(
                f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: aipc-env (stub)\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
            )
            zf.writestr(f"{info}/RECORD", "")
        stubs[name] = path
    return stubs


def _merged_requires(by_platform: dict[Platform, list[str]]) -> list[str]:
    """One Requires-Dist for a universal resolution from per-platform records: a line every platform's record has
    stays as it is; a line only some have gets their platforms' marker."""
    lines: list[str] = []
    for platform, requires in by_platform.items():
        for line in requires:
            if all(line in other for other in by_platform.values()):
                if line not in lines:
                    lines.append(line)
                continue
            req = parse_requirement(line)
            system = PLATFORM_SYSTEM[platform]
            marker = f"platform_system == '{system}'" + (f" and ({req.marker})" if req.marker else "")
            lines.append(f"{str(req).split(';', 1)[0].strip()}; {marker}")
    return lines


def pypi_requirements(pair: Pair, torch: str, common: list[str] | None = None) -> list[str]:
    """The env's requirements for the universal resolution: torch (and torchvision) of the chosen release, which
    resolve to the stub wheels, then the pip layer."""
    reqs = [
        f"torch=={torch}+xpu",  # uv applies path sources to direct requirements only: Triton is one too
        f"{pair.triton.name}=={pair.triton_for(torch)}" + (f"; {pair.triton.marker}" if pair.triton.marker else ""),
    ]
    if pair.torchvision_version(torch):
        reqs.append(f"torchvision=={pair.torchvision_version(torch)}")
    return reqs + [r for r in specs.pip_layer(pair, common) if parse_requirement(r).name not in specs.EXPLICIT_XPU_NAMES]


def _python_range(pythons: list[str]) -> str:
    low, high = pythons[0], pythons[-1]
    return f">={low},<3.{int(high.split('.')[1]) + 1}"


def uv_universal_project(requirements: list[str], *, pypi_url: str, pythons: list[str], stubs: dict[str, Path]) -> str:
    """A pyproject uv resolves universally: the stub wheels stand for the XPU index's packages (path sources), every
    other name comes from PyPI."""
    deps = ",\n".join(f"    {json.dumps(r)}" for r in requirements)
    sources = "\n".join(f"{name} = {{ path = {json.dumps(str(path))} }}" for name, path in stubs.items())
    return (
        f'[project]\nname = "aipc-training-env"\nversion = "0"\nrequires-python = "{_python_range(pythons)}"\n'
        f"dependencies = [\n{deps},\n]\n\n"
        f'[[tool.uv.index]]\nname = "pypi"\nurl = {json.dumps(pypi_url)}\ndefault = true\n\n'
        f"[tool.uv.sources]\n{sources}\n"
    )


def uv_universal_argv(uv: str, project: Path, out: Path, *, pythons: list[str], default_index: str) -> list[str]:
    return [
        uv,
        "pip",
        "compile",
        str(project),
        "--format",
        "pylock.toml",
        "-o",
        str(out),
        "--universal",
        "--python-version",
        pythons[0],
        "--default-index",
        default_index,
        "--no-header",
        "--quiet",
    ]


def _applies(marker: str | None, platform: Platform, pythons: list[str]) -> bool:
    return marker is None or any(evaluate_marker(marker, marker_environment(platform, p)) for p in pythons)


def _wheel_fits(filename: str, platform: Platform) -> bool:
    try:
        _, _, _, tags = parse_wheel_filename(filename.replace("%2B", "+"))
    except ValueError:
        return False
    return any(wheel_platform_fits(t.platform, platform) for t in tags)


def merge_pylock(
    universal: dict[str, Any], platform: Platform, pythons: list[str], artifacts: PairArtifacts, pair: Pair, pypi_url: str
) -> dict[str, Any]:
    """The platform's pylock: the universal resolution's packages that can install there (their wheels for this
    platform only), each marked `index`, plus the XPU index's packages from the manifest, marked
    `public-lockfile` with their sources."""
    packages = []
    for pkg in universal.get("packages", []):
        if pkg["name"] in specs.EXPLICIT_XPU_NAMES or pkg["name"] == "aipc-training-env":
            continue  # the stubs: their real artifacts are added from the manifest below
        if not _applies(pkg.get("marker"), platform, pythons):
            continue
        pkg = dict(pkg)
        wheels = [w for w in pkg.get("wheels", []) if _wheel_fits(w["url"].rsplit("/", 1)[-1], platform)]
        if wheels:
            pkg["wheels"] = wheels
        elif "wheels" in pkg:
            del pkg["wheels"]
        if "wheels" not in pkg and "sdist" not in pkg:
            raise AipcError(
                f"{pkg['name']} {pkg.get('version')}: nothing installs on {platform}",
                exit_code=ExitCode.PROBLEMS,
                fix="check the pip layer; nothing was written",
            )
        pkg["tool"] = {PROVENANCE_TOOL: {"provenance": "index", "index": pypi_url}}
        packages.append(pkg)
    for key, (version, wheels) in artifacts.packages.items():
        entry: dict[str, Any] = {"name": key, "version": version}
        if key == pair.triton.key and pair.triton.marker:
            entry["marker"] = pair.triton.marker
        entry["wheels"] = [{"name": w.file, "url": w.url, "hashes": {"sha256": w.sha256}} for w in wheels]
        entry["tool"] = {
            PROVENANCE_TOOL: {
                "provenance": "public-lockfile",
                "sources": {w.file: {"repositories": w.sources, "independent-sources": w.independent_sources} for w in wheels},
            }
        }
        packages.append(entry)
    packages.sort(key=lambda p: (p["name"], parse_version(p["version"])))
    return {
        "lock-version": "1.0",
        "environments": [lock_environment(platform)],
        "created-by": "aipc-env",
        "requires-python": _python_range(pythons),
        "packages": packages,
    }


def read_universal(path: Path) -> dict[str, Any]:
    from aipc_env.core.fileio import parse_toml, read_text

    data: dict[str, Any] = parse_toml(read_text(path, "universal lock"), path, "universal lock")  # a TOML document is a table
    return data
