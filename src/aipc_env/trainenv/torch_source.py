"""Where the nox sessions' own env gets torch: the pair's XPU build from the PyTorch XPU index on a machine with
an Intel GPU, else the CPU build from the PyTorch CPU index — never PyPI's default torch, which is a CUDA build
of several GB on Linux. A mirror (AIPC_ENV_TORCH_INDEX) or a local wheel folder (AIPC_ENV_TORCH_WHEELS) replaces
the PyTorch index for offline and air-gapped machines.

Standard library only: the noxfile imports it before any env exists. Pure but for `detect()`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

__all__ = [
    "ENV_VARS",
    "PYTORCH_INDEX",
    "UV_TLS",
    "TorchSource",
    "detect",
    "local_wheel_folder",
    "pinned_torch",
    "plan_torch_install",
    "take_options",
    "torch_source_fix",
    "uv_environment",
]

PYTORCH_INDEX = "https://download.pytorch.org/whl"
PYPI = "https://pypi.org/simple"
ENV_VARS = {"build": "AIPC_ENV_TORCH", "index": "AIPC_ENV_TORCH_INDEX", "wheels": "AIPC_ENV_TORCH_WHEELS"}
Build = Literal["xpu", "cpu"]
UV_TLS = {"UV_SYSTEM_CERTS": "1", "UV_NATIVE_TLS": "1"}
"""uv reads the system certificate store (corporate proxies that re-sign HTTPS): UV_SYSTEM_CERTS for uv >= 0.13,
UV_NATIVE_TLS for older ones (a newer uv ignores it quietly when both are set)."""


@dataclass(frozen=True)
class TorchSource:
    build: Build
    requirement: str
    """torch==X+xpu or torch==X+cpu: the local version pins the build, so no other index can satisfy it."""
    args: tuple[str, ...]
    """Installer arguments that name where torch comes from (pip and uv take the same ones)."""
    why: str

    def describe(self) -> str:
        return f"{self.requirement} ({self.why}) {' '.join(self.args)}"


def pinned_torch(constraints: Path) -> str:
    """The torch version the dev constraints pin (environments/constraints-dev.txt)."""
    for line in constraints.read_text(encoding="utf-8").splitlines():
        match = re.match(r"^\s*torch\s*==\s*([0-9][^\s;#+]*)", line)
        if match:
            return match.group(1)
    raise ValueError(f"{constraints}: no `torch==X` line")


def plan_torch_install(
    version: str, *, intel_gpu: bool, build: str | None = None, index: str | None = None, wheels: str | None = None
) -> TorchSource:
    """How to install torch `version` (pure). build forces xpu/cpu; index replaces the PyTorch index (its /cpu or
    /xpu subfolder is used when the URL names neither); wheels is a local folder searched first, with no index
    for torch then needed."""
    if build not in (None, "", "auto", "xpu", "cpu"):
        raise ValueError(f"{ENV_VARS['build']}={build!r}: use xpu, cpu or auto")
    chosen: Build = build if build in ("xpu", "cpu") else ("xpu" if intel_gpu else "cpu")  # type: ignore[assignment]  # a Literal chosen from the fixed table above
    why = (
        "forced"
        if build in ("xpu", "cpu")
        else "this machine has an Intel GPU"
        if intel_gpu
        else "no Intel GPU here: the CPU build, not PyPI's CUDA one"
    )
    requirement = f"torch=={version}+{chosen}"
    if wheels:
        return TorchSource(chosen, requirement, ("--find-links", str(wheels)), why + f"; from the wheels in {wheels}")
    base = (index or PYTORCH_INDEX).rstrip("/")
    url = base if base.endswith(("/cpu", "/xpu")) else f"{base}/{chosen}"
    # PyPI as the index and the PyTorch index as the extra one: pip merges both, and uv looks at extra indexes
    # first, so torch (and only what that index serves) comes from it either way
    return TorchSource(chosen, requirement, ("--index-url", PYPI, "--extra-index-url", url), why)


def detect(version: str, environ: dict[str, str] | None = None) -> TorchSource:
    """plan_torch_install for this machine and its environment variables."""
    from aipc_env.core.platforms import has_intel_gpu

    env = os.environ if environ is None else environ
    return plan_torch_install(
        version,
        intel_gpu=has_intel_gpu(),
        build=env.get(ENV_VARS["build"]),
        index=env.get(ENV_VARS["index"]) or None,
        wheels=str(local_wheel_folder(env) or "") or None,
    )


def local_wheel_folder(environ: Mapping[str, str] | None = None) -> Path | None:
    """The local torch wheel folder the environment names (AIPC_ENV_TORCH_WHEELS), or None."""
    env = os.environ if environ is None else environ
    value = env.get(ENV_VARS["wheels"])
    return Path(value) if value else None


def take_options(posargs: list[str]) -> tuple[dict[str, str], list[str]]:
    """Split `--torch xpu|cpu`, `--torch-index URL` and `--torch-wheels DIR` (also `--opt=value`) off a nox
    session's posargs; they override the environment variables. Returns (overrides, the rest)."""
    names = {"--torch": ENV_VARS["build"], "--torch-index": ENV_VARS["index"], "--torch-wheels": ENV_VARS["wheels"]}
    overrides: dict[str, str] = {}
    rest: list[str] = []
    i = 0
    while i < len(posargs):
        arg = posargs[i]
        name, eq, value = arg.partition("=")
        if name in names:
            if not eq:
                if i + 1 >= len(posargs):
                    raise ValueError(f"{name} needs a value")
                value = posargs[i + 1]
                i += 1
            overrides[names[name]] = value
        else:
            rest.append(arg)
        i += 1
    return overrides, rest


def uv_environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment uv runs in: this one plus the system certificate store (unless the user chose otherwise)."""
    env = dict(os.environ if environ is None else environ)
    for name, value in UV_TLS.items():
        env.setdefault(name, value)
    return env


def torch_source_fix(log: Path | str | None = None) -> str:
    """What to do when torch could not be installed: the index is unreachable (offline, a firewall, a proxy) or
    serves no such wheel. Names both ways around it."""
    where = f"; uv's own words are in {log}" if log else ""
    return (
        f"the PyTorch index ({PYTORCH_INDEX}) or PyPI could not be reached, or had no such wheel. Offline or "
        f"behind a firewall, set {ENV_VARS['wheels']}=<folder holding the torch wheel> or "
        f"{ENV_VARS['index']}=<URL of a mirror of the PyTorch index>; behind a proxy that re-signs HTTPS, add "
        f"its certificate to the system store (uv reads it){where}"
    )
