"""aipc-env's own training env, for a tool installed without torch (pipx): built on first use the way
`nox -s train` builds its env (torch from this machine's torch source, then the `train` extra at the pins of
environments/constraints-dev.txt, with uv), reused while its inputs are unchanged. The tool's own interpreter never
imports torch; runs import this aipc-env from its folder (PYTHONPATH), so the env needs only the libraries."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

from aipc_env.core.platforms import current_platform, marker_environment
from aipc_env.core.specs import evaluate_marker, parse_requirement
from aipc_env.errors import AipcError

__all__ = ["STAMP", "can_import_torch", "ensure_tool_env", "tool_env_prefix", "train_requirements"]

STAMP = ".aipc-tool-env"


def can_import_torch() -> bool:
    """Whether this interpreter has torch (found, not imported: the tool's own venv never imports it)."""
    return importlib.util.find_spec("torch") is not None


def tool_env_prefix() -> Path:
    from aipc_env.trainenv.envs import default_env_prefix

    return default_env_prefix("train")


def train_requirements(requires: list[str]) -> list[str]:
    """The env's requirements from aipc-env's own Requires-Dist: the core ones and the `train` extra's, markers of
    the extra dropped, torch left to the torch source (pure)."""
    out = []
    for line in requires:
        req = parse_requirement(line)
        marker = str(req.marker) if req.marker else ""
        if "extra" in marker and not evaluate_marker(marker, {**marker_environment(current_platform()), "extra": "train"}):
            continue
        if req.name.lower() == "torch":
            continue
        req.marker = None
        out.append(str(req))
    return sorted(set(out))


def ensure_tool_env(log: Callable[[str], None] = print, prefix: Path | None = None) -> Path:
    """The env's prefix, built (or repaired) when its inputs changed: the torch source, the requirements, the pins
    and this Python. Progress lines go to `log`, the installer's own output to <prefix>/build.log."""
    from importlib.metadata import PackageNotFoundError, requires

    from aipc_env.paths import environments_dir
    from aipc_env.trainenv.torch_source import detect, pinned_torch
    from aipc_env.trainenv.uvenv import StampedVenv, build_stamped_venv, digest_of, stamp_matches

    prefix = prefix or tool_env_prefix()
    constraints = environments_dir() / "constraints-dev.txt"
    try:
        reqs = train_requirements(requires("aipc-env") or [])
    except PackageNotFoundError:
        raise AipcError(
            "aipc-env is not installed (no package metadata), so its training requirements are unknown",
            fix="install it (pipx install aipc-env, or pip install -e . in a checkout), or pass --env PREFIX",
        ) from None
    source = detect(pinned_torch(constraints))
    digest = digest_of([*reqs, source.describe(), constraints.read_text(encoding="utf-8")])
    if not stamp_matches(prefix, STAMP, digest):
        log(f"training env: building {prefix} ({source.describe()})")
    build_stamped_venv(
        StampedVenv(
            label="training env",
            prefix=prefix,
            stamp=STAMP,
            digest=digest,
            requirements_name="requirements-train.txt",
            requirements="\n".join([source.requirement, *reqs]) + "\n",
            install_args=("-c", str(constraints), *source.args),
            describe=f"torch and {len(reqs)} libraries",
            cost="about 400 MB to download and 1.4 GB on disk the first time",
            echo=True,
        ),
        log,
    )
    return prefix
