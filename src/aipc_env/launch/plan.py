"""The launch plan: what a generated launcher does, decided from facts without touching the machine."""

from __future__ import annotations

import re
from pathlib import PurePosixPath, PureWindowsPath
from typing import ClassVar, Final, Literal

from pydantic import field_validator

from aipc_env.core.formats import StrictModel, VersionedModel
from aipc_env.core.platforms import Platform
from aipc_env.facts.model import MsvcInfo, OneApiInfo
from aipc_env.matrix import Pair

__all__ = ["ENV_NAME", "Activation", "LaunchPlan", "Phase", "base_env", "choose_oneapi", "choose_vcvars", "plan_run"]

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
PLAN_VERSION: Final = 1


class Phase(StrictModel):
    name: str
    argv: list[str]
    cwd: str | None = None


class Activation(StrictModel):
    """A batch/shell script to source before the run: its folder and its file name, kept apart so the
    launcher can `pushd` into the folder and call the file by a fixed name (no user data in code)."""

    folder: str
    name: Literal["setvars.bat", "oneapi-vars.bat", "setvars.sh", "oneapi-vars.sh", "vcvars64.bat"]
    release: str | None = None


class LaunchPlan(VersionedModel):
    """<run dir>/launch.json: everything a run does, read by the runner inside the training env."""

    FORMAT: ClassVar[str] = "launch plan"
    LEGACY_KEYS: ClassVar[dict[str, str]] = {"plan_version": "schema_version"}
    FIX: ClassVar[str] = "write the run again with the command that made it (aipc-env train / verify)"
    schema_version: Literal[1] = PLAN_VERSION
    platform: Platform
    run_dir: str
    python: str
    oneapi: Activation | None = None
    vcvars: Activation | None = None
    env: dict[str, str | None] = {}
    """Set for the run (None: unset)."""
    phases: list[Phase]
    background: list[Phase] = []
    """Started before the phases and stopped (SIGTERM / Ctrl-Break) after them, e.g. the memory monitor."""
    log_file: str
    warnings: list[str] = []
    files: dict[str, str] = {}
    resume: str | None = None
    """What resumes the run after a stop (Ctrl-C): the runner's stop line says it."""
    """Extra files of the run folder (name -> text), e.g. accelerate_config.yaml."""

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str | None]) -> dict[str, str | None]:
        for key, val in value.items():
            if not ENV_NAME.fullmatch(key):
                raise ValueError(f"{key!r} is not a valid environment variable name")
            if val is not None and ("\n" in val or "\r" in val or "\x00" in val):
                raise ValueError(f"the value of {key} contains a line break")
            if val is not None and val.startswith("="):
                raise ValueError(f"the value of {key} starts with '=' (cmd cannot carry that)")
        return value

    @field_validator("files")
    @classmethod
    def _files(cls, value: dict[str, str]) -> dict[str, str]:
        reserved = {"launch.json", "launch.env", "launch.env.sh", "launch.bat", "launch.sh"}
        for name in value:
            if not re.fullmatch(r"[A-Za-z0-9_.-]+", name) or name in reserved or name.startswith("."):
                raise ValueError(f"{name!r} cannot be a run file name")
        return value


def _split(path: str, platform: Platform) -> tuple[str, str]:
    pure = PureWindowsPath(path) if platform == "win-64" else PurePosixPath(path)
    return str(pure.parent), pure.name


def choose_oneapi(pair: Pair | None, oneapi: OneApiInfo, platform: Platform) -> tuple[Activation | None, list[str]]:
    """The activation script of the toolkit matching the pair, or None (with warnings). Never another release."""
    warnings: list[str] = []
    if pair is None or not pair.compiles_kernels_on(platform):
        return None, warnings
    ext = "bat" if platform == "win-64" else "sh"
    for inst in oneapi.installs:
        if pair.oneapi not in inst.releases and inst.version != pair.oneapi:
            continue
        root = PureWindowsPath(inst.root) if platform == "win-64" else PurePosixPath(inst.root)
        if inst.layout == "unified" and pair.oneapi in inst.releases:
            return Activation(folder=str(root / pair.oneapi), name=f"oneapi-vars.{ext}", release=pair.oneapi), warnings
        if inst.setvars and inst.version == pair.oneapi:
            folder, name = _split(inst.setvars, platform)
            return Activation(folder=folder, name=name, release=pair.oneapi), warnings
    others = sorted({inst.version for inst in oneapi.installs if inst.version})
    if others:
        warnings.append(
            f"oneAPI {', '.join(others)} is installed but {pair.id} needs {pair.oneapi}; it is NOT "
            "activated (mixing runtimes breaks bitsandbytes). Triton kernels (NF4 quantize, Adam8bit) "
            f"will fail to compile until oneAPI {pair.oneapi} is installed"
        )
    else:
        warnings.append(
            f"no oneAPI toolkit found; {pair.id} compiles Triton kernels (NF4 quantize, Adam8bit) "
            f"with oneAPI {pair.oneapi}: install it or those steps will fail"
        )
    return None, warnings


def choose_vcvars(pair: Pair | None, msvc: MsvcInfo | None, platform: Platform) -> tuple[Activation | None, list[str]]:
    """vcvars64.bat of a Visual Studio with the C++ tools, when kernels are compiled on Windows."""
    if platform != "win-64" or msvc is None or (pair is not None and not pair.compiles_kernels_on(platform)):
        return None, []
    tools = [i for i in msvc.installs if i.has_vc_tools and i.vcvars64]
    if tools:
        folder, _ = _split(tools[-1].vcvars64, platform)  # type: ignore[arg-type]  # the path was checked to be set above
        return Activation(folder=folder, name="vcvars64.bat"), []
    if msvc.cl_on_path:
        return None, []
    return None, ["no Visual Studio C++ tools found: Triton cannot compile kernels (install 'Desktop development with C++')"]


def base_env(
    platform: Platform, *, pythonpath: list[str], device: str | None, engine: str, extra: dict[str, str] | None = None
) -> dict[str, str | None]:
    """The environment every run gets, then the config's own `env:` entries (which win)."""
    sep = ";" if platform == "win-64" else ":"
    env: dict[str, str | None] = {
        "PYTHONUTF8": "1",
        "PYTHONIOENCODING": "utf-8",
        "SYCL_CACHE_PERSISTENT": "1",
        "PYTHONPATH": sep.join(pythonpath),
        "PYTHONHOME": None,
        "PYTHONNOUSERSITE": "1",
    }
    if engine == "qflux":
        env["QFLUX_DOTENV_LOADED"] = "1"
    if device and device.startswith("xpu:"):
        env["ONEAPI_DEVICE_SELECTOR"] = f"level_zero:{device.split(':', 1)[1]}"
    env.update(extra or {})
    return env


def plan_run(
    *,
    platform: Platform,
    run_dir: str,
    python: str,
    pair: Pair | None,
    oneapi: OneApiInfo,
    msvc: MsvcInfo | None,
    phases: list[Phase],
    log_file: str,
    pythonpath: list[str],
    device: str | None,
    engine: str,
    extra_env: dict[str, str] | None = None,
    background: list[Phase] | None = None,
    files: dict[str, str] | None = None,
    resume: str | None = None,
) -> LaunchPlan:
    """A launch plan for any run (training, verify): the matching oneAPI, MSVC where kernels compile, the env."""
    activation, warnings = choose_oneapi(pair, oneapi, platform)
    vcvars, more = choose_vcvars(pair, msvc, platform)
    return LaunchPlan(
        platform=platform,
        run_dir=run_dir,
        python=python,
        oneapi=activation,
        vcvars=vcvars,
        env=base_env(platform, pythonpath=pythonpath, device=device, engine=engine, extra=extra_env),
        phases=phases,
        background=background or [],
        log_file=log_file,
        warnings=warnings + more,
        files=files or {},
        resume=resume,
    )
