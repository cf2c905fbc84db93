"""Pure parsers of tool outputs and files, tested on recorded outputs (tests/fixtures/outputs)."""

from __future__ import annotations

import re
from pathlib import PurePosixPath, PureWindowsPath
from typing import Any

from aipc_env.core.fileio import loads_json
from aipc_env.facts.model import GpuInfo, ModelVariant, MsvcInstall, SyclDevice

__all__ = [
    "MODEL_PARTS",
    "RELEASE_DIR",
    "is_release_dir",
    "model_variant",
    "oneapi_version_from_path",
    "parse_cim_gpus",
    "parse_compiler_version",
    "parse_cpuinfo_brand",
    "parse_os_release",
    "parse_sycl_ls",
    "parse_tool_version",
    "parse_vswhere",
]

RELEASE_DIR = re.compile(r"^(20\d\d)\.(\d+)$")
"""A oneAPI toolkit release folder name: 2025.0, 2025.3, 2026.1."""


def is_release_dir(name: str) -> bool:
    return RELEASE_DIR.fullmatch(name) is not None


def oneapi_version_from_path(path: str) -> str | None:
    """The two-part release in a oneAPI path: `.../compiler/2025.0/bin/compiler` or `.../oneAPI/2025.3/bin`."""
    pure = PureWindowsPath(path) if ("\\" in path or re.match(r"^[A-Za-z]:", path)) else PurePosixPath(path)
    for part in pure.parts:
        match = RELEASE_DIR.fullmatch(part)
        if match:
            return f"{match.group(1)}.{int(match.group(2))}"
    return None


def parse_compiler_version(text: str) -> tuple[str | None, str | None]:
    """(toolkit release from InstalledDir, compiler build from the first line) of `icpx/icx --version`."""
    build = None
    first = text.strip().splitlines()[0] if text.strip() else ""
    match = re.search(r"Compiler\s+(\d{4}\.\d+\.\d+)", first)
    if match:
        build = match.group(1)
    release = None
    for line in text.splitlines():
        if line.strip().startswith("InstalledDir:"):
            release = oneapi_version_from_path(line.split(":", 1)[1].strip())
    return release, build


_SYCL_NEW = re.compile(r"^\[(?P<backend>[a-z_]+):(?P<kind>[a-z]+)\]\[[a-z_]+:(?P<index>\d+)\]\s+(?P<rest>.+)$")
_SYCL_OLD = re.compile(r"^\[(?:ext_oneapi_)?(?P<backend>[a-z_]+):(?P<kind>[a-z]+):(?P<index>\d+)\]\s+(?P<rest>.+)$")
_TAIL = re.compile(r"^(?P<name>.*?)\s+(?P<version>\d+(?:\.\d+)+)(?:\s+\S+)*\s+\[(?P<driver>[^\]]+)\]\s*$")


def parse_sycl_ls(text: str) -> list[SyclDevice]:
    """Devices from `sycl-ls`, current (`[level_zero:gpu][level_zero:0]`) or old (`[ext_oneapi_level_zero:gpu:0]`)."""
    devices = []
    for line in text.splitlines():
        line = line.strip()
        match = _SYCL_NEW.match(line) or _SYCL_OLD.match(line)
        if not match:
            continue
        rest = match.group("rest")
        # "<platform>, <device name> <version> [<driver>]"
        device_part = rest.split(", ", 1)[1] if ", " in rest else rest
        name, version, driver = device_part, None, None
        opencl = re.match(r"^(?P<name>.*?)\s+OpenCL\s+\d.*?\[(?P<driver>[^\]]+)\]\s*$", device_part)
        tail = _TAIL.match(device_part)
        if opencl:
            name, driver = opencl.group("name"), opencl.group("driver").strip()
        elif tail:
            name, version, driver = tail.group("name"), tail.group("version"), tail.group("driver").strip()
        devices.append(
            SyclDevice(
                backend=match.group("backend"),
                kind=match.group("kind"),
                index=int(match.group("index")),
                name=name.strip(),
                version=version,
                driver=driver,
            )
        )
    return devices


def parse_cpuinfo_brand(text: str) -> str | None:
    match = re.search(r"^model name\s*:\s*(.+)$", text, re.MULTILINE)
    return match.group(1).strip() if match else None


def parse_os_release(text: str) -> str | None:
    match = re.search(r'^PRETTY_NAME="?([^"\n]+)"?', text, re.MULTILINE)
    return match.group(1) if match else None


def _as_list(data: object) -> list[dict[str, Any]]:
    if data is None:
        return []
    if isinstance(data, dict):
        return [data]
    if isinstance(data, list):
        return [d for d in data if isinstance(d, dict)]
    raise ValueError("expected a JSON object or list")


def parse_cim_gpus(text: str) -> list[GpuInfo]:
    """`Get-CimInstance Win32_VideoController | Select Name,DriverVersion,PNPDeviceID,Status | ConvertTo-Json`."""
    if not text.strip():
        return []
    gpus = []
    for row in _as_list(loads_json(text)):
        pnp = str(row.get("PNPDeviceID") or "")
        ven = re.search(r"VEN_([0-9A-Fa-f]{4})", pnp)
        dev = re.search(r"DEV_([0-9A-Fa-f]{4})", pnp)
        gpus.append(
            GpuInfo(
                name=str(row.get("Name") or "unknown"),
                vendor_id=ven.group(1).lower() if ven else None,
                device_id=dev.group(1).lower() if dev else None,
                driver_version=row.get("DriverVersion"),
                status=row.get("Status"),
                source="Win32_VideoController",
            )
        )
    return gpus


VC_TOOLS = "Microsoft.VisualStudio.Component.VC.Tools.x86.x64"


def parse_vswhere(text: str, with_vc_tools: set[str] | None = None) -> list[MsvcInstall]:
    """`vswhere -products * -format json` (all installs); `with_vc_tools` = installPaths of the VC-filtered query."""
    installs = []
    for row in _as_list(loads_json(text) if text.strip() else []):
        path = str(row.get("installationPath") or "")
        if not path:
            continue
        has_tools = with_vc_tools is None or path in with_vc_tools
        installs.append(
            MsvcInstall(
                path=path,
                version=row.get("installationVersion"),
                display_name=row.get("displayName"),
                has_vc_tools=has_tools,
                vcvars64=str(PureWindowsPath(path, "VC", "Auxiliary", "Build", "vcvars64.bat")) if has_tools else None,
            )
        )
    return installs


MODEL_PARTS = ("model_index.json", "transformer", "text_encoder", "vae", "scheduler", "tokenizer", "processor")


def model_variant(model_index: dict[str, Any], transformer_config: dict[str, Any] | None) -> tuple[str | None, ModelVariant]:
    """(pipeline class, variant) of a diffusers Qwen-Image-Edit model dir."""
    cls = model_index.get("_class_name")
    if cls == "QwenImageEditPipeline":
        return cls, "edit"
    if cls == "QwenImageEditPlusPipeline":
        if transformer_config is None:
            return cls, "edit-plus"
        # 2511 introduced the zero-timestep conditioning flag in the transformer config.
        return cls, "edit-2511" if transformer_config.get("zero_cond_t") else "edit-2509"
    return cls, "unknown"


def parse_tool_version(text: str) -> str | None:
    """The version in what `conda --version` (`conda 25.9.1`), `mamba --version` (`2.3.2`, or mamba 1's
    `mamba 1.5.8` then `conda ...`), `micromamba --version` and `conda-lock --version` (`conda-lock, version
    4.0.3`) print: the last word of the first line."""
    lines = text.strip().splitlines()
    words = lines[0].split() if lines else []
    return words[-1] if words else None
