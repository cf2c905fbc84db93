"""The closure check of a lock: for one platform and one Python, which locked packages install there (their marker,
a wheel that fits, their Requires-Python), and whether every Requires-Dist of each of them, with its markers and
the extras asked for, is satisfied by a package of the same lock. `pip check`, on the lock instead of an env (pure).
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from aipc_env.core.platforms import Platform, marker_environment, wheel_platform_fits
from aipc_env.core.specs import evaluate_marker, parse_requirement, parse_specifier, parse_version

__all__ = ["LockedDist", "closure_problems", "wheel_installs"]


@dataclass(frozen=True)
class LockedDist:
    """One package entry of a pylock, with the core metadata of its artifacts."""

    name: str
    version: str
    marker: str | None
    requires_dist: tuple[str, ...]
    requires_python: str | None
    wheels: tuple[str, ...]
    """File names of its wheels (this platform's)."""
    sdist: bool = False

    @property
    def key(self) -> str:
        return canonicalize_name(self.name)


def wheel_installs(filename: str, platform: Platform, python: str) -> bool:
    """Whether a wheel installs on CPython `python` (3.X) on `platform` (its tags, as pip decides)."""
    try:
        _, _, _, tags = parse_wheel_filename(filename.replace("%2B", "+"))
    except InvalidWheelFilename:
        return False
    minor = int(python.split(".")[1])
    for tag in tags:
        if not wheel_platform_fits(tag.platform, platform):
            continue
        interpreter, abi = tag.interpreter, tag.abi
        if interpreter in ("py3", f"py3{minor}") and abi == "none":
            return True
        if interpreter.startswith("cp3") and interpreter[3:].isdigit():
            built = int(interpreter[3:])
            if built == minor and abi in (f"cp3{minor}", "none", "abi3"):
                return True
            if abi == "abi3" and built <= minor:
                return True
    return False


def _env(platform: Platform, python: str, extra: str = "") -> dict[str, str]:
    return {**marker_environment(platform, python), "extra": extra}


def _applies(marker: str | None, env: dict[str, str]) -> bool:
    return marker is None or evaluate_marker(marker, env)


def closure_problems(dists: list[LockedDist], platform: Platform, python: str) -> list[str]:
    """What keeps the lock from installing a consistent env on (platform, python); empty: closed. Each problem names
    the platform, the Python, the package and what it requires."""
    where = f"{platform} Python {python}"
    env = _env(platform, python)
    chosen: dict[str, LockedDist] = {}
    problems: list[str] = []
    for dist in dists:
        if not _applies(dist.marker, env):
            continue
        if dist.key in chosen:
            problems.append(
                f"{where}: {dist.name} is locked twice for it ({chosen[dist.key].version} and "
                f"{dist.version}); their markers overlap"
            )
            continue
        chosen[dist.key] = dist
    for dist in chosen.values():
        if not (dist.sdist or any(wheel_installs(w, platform, python) for w in dist.wheels)):
            problems.append(f"{where}: {dist.name} {dist.version} has no wheel for it (and no sdist)")
        if dist.requires_python and parse_version(f"{python}.0") not in parse_specifier(dist.requires_python):
            problems.append(f"{where}: {dist.name} {dist.version} requires Python {dist.requires_python}")
    pending = [(key, "") for key in chosen]
    seen: set[tuple[str, str]] = set()
    reported: set[tuple[str, str]] = set()
    while pending:
        key, extra = pending.pop()
        if (key, extra) in seen:
            continue
        seen.add((key, extra))
        dist = chosen[key]
        extra_env = _env(platform, python, extra)
        for line in dist.requires_dist:
            req = parse_requirement(line)
            if req.marker is not None:
                if extra and not evaluate_marker(req.marker, extra_env):
                    continue
                if not extra and not evaluate_marker(req.marker, env):
                    continue
                if extra and evaluate_marker(req.marker, env):
                    continue  # the base requirement, already checked
            elif extra:
                continue
            dep_key = canonicalize_name(req.name)
            need = f"{dist.name} {dist.version}{f'[{extra}]' if extra else ''} requires {req.name}{req.specifier}"
            dep = chosen.get(dep_key)
            if dep is None:
                if (dep_key, need) not in reported:
                    reported.add((dep_key, need))
                    problems.append(f"{where}: {need}, which the lock does not have for it")
                continue
            if req.specifier and not req.specifier.contains(parse_version(dep.version), prereleases=True):
                problems.append(f"{where}: {need}, but the lock has {dep.name} {dep.version}")
            pending += [(dep_key, canonicalize_name(e)) for e in req.extras]  # its extras' requirements too
    return problems
