"""The facts model: JSON-serialisable, versioned, and the only input of the checks."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Final, Literal

from aipc_env.core.fileio import read_json
from aipc_env.core.formats import StrictModel, VersionedModel, validate_versioned

__all__ = [
    "FACTS_SCHEMA_VERSION",
    "CondaTool",
    "ContainerInfo",
    "CpuInfo",
    "DeviceProbe",
    "DiskInfo",
    "DriNode",
    "EnvSource",
    "Facts",
    "GpuInfo",
    "KernelCache",
    "LevelZeroInfo",
    "MachineIdentity",
    "MemoryInfo",
    "ModelDirInfo",
    "ModelVariant",
    "MsvcInfo",
    "MsvcInstall",
    "OneApiInfo",
    "OneApiInstall",
    "OsInfo",
    "ProbeError",
    "RegistryInfo",
    "SyclDevice",
    "TrainingEnv",
    "VerifyRecord",
    "load_facts",
]

FACTS_SCHEMA_VERSION: Final = 1


EnvSource = Literal["flag", "qflux", "state", "used", "conda", "tool", "current"]
"""Why a training env was chosen (trainenv.select's policy), in the facts and in the policy's EnvChoice."""


class MachineIdentity(StrictModel):
    """Who this machine is, for fleet reports: the hostname and, where one can be read, a stable machine id."""

    hostname: str
    machine_id: str | None = None
    """Windows MachineGuid, Linux /etc/machine-id."""
    source: str | None = None


class OsInfo(StrictModel):
    system: str
    """platform.system(): Windows, Linux, Darwin."""
    release: str = ""
    version: str = ""
    machine: str = ""
    pretty_name: str | None = None


class CpuInfo(StrictModel):
    brand: str | None = None
    logical_cores: int | None = None


class MemoryInfo(StrictModel):
    total_bytes: int | None = None


class DiskInfo(StrictModel):
    path: str
    free_bytes: int | None = None
    total_bytes: int | None = None


class GpuInfo(StrictModel):
    name: str
    vendor_id: str | None = None
    """PCI vendor id, lower-case hex without 0x (Intel is 8086)."""
    device_id: str | None = None
    driver_version: str | None = None
    driver: str | None = None
    """Kernel driver on Linux (i915, xe)."""
    status: str | None = None
    """Windows device status ('OK' or the problem)."""
    source: str = ""

    @property
    def is_intel(self) -> bool:
        """Intel's GPU (aipc_env.core.gpus.is_intel_gpu)."""
        from aipc_env.core.gpus import is_intel_gpu

        return is_intel_gpu(self.vendor_id, self.name)


class SyclDevice(StrictModel):
    backend: str
    kind: str
    index: int
    name: str
    version: str | None = None
    driver: str | None = None


class RegistryInfo(StrictModel):
    long_paths_enabled: int | None = None
    commit_limit_percentage: int | None = None
    tdr_delay: int | None = None
    errors: dict[str, str] = {}
    """Value name -> why it could not be read (absent values are None without an error)."""


class OneApiInstall(StrictModel):
    root: str
    version: str | None = None
    """Two-part toolkit release (2025.3) from the compiler's InstalledDir, else from the folder name."""
    version_source: Literal["icpx", "folder", "unknown"] = "unknown"
    compiler_build: str | None = None
    layout: Literal["unified", "component", "unknown"] = "unknown"
    setvars: str | None = None
    releases: list[str] = []
    """Every toolkit release folder found under the root."""


class OneApiInfo(StrictModel):
    installs: list[OneApiInstall] = []
    active_version: str | None = None
    """Release of the toolkit activated in this shell (setvars ran), if any."""
    active_compiler: str | None = None


class MsvcInstall(StrictModel):
    path: str
    version: str | None = None
    display_name: str | None = None
    has_vc_tools: bool = False
    vcvars64: str | None = None


class MsvcInfo(StrictModel):
    installs: list[MsvcInstall] = []
    cl_on_path: str | None = None
    vswhere: str | None = None


class CondaTool(StrictModel):
    name: str
    path: str
    version: str | None = None
    version_source: Literal["conda-meta", "dist-info", "process"] | None = None
    """Where the version was read: conda's record, the distribution's METADATA, or `--version` (a native tool
    whose files say nothing)."""


class TrainingEnv(StrictModel):
    prefix: str
    python: str | None = None
    python_version: str | None = None
    source: EnvSource = "current"
    """How the env was chosen (aipc_env.trainenv.select): --env, built by aipc-env, used by the last run,
    the active conda env, or the doctor's own interpreter."""
    pair: str | None = None
    """Pair recorded when aipc-env built this env."""
    built_at: str | None = None
    distributions: dict[str, str] = {}
    site_packages: list[str] = []
    """Where the distributions were read from."""
    error: str | None = None


class DeviceProbe(StrictModel):
    ran: bool = False
    error: str | None = None
    torch_version: str | None = None
    torch_version_xpu: str | None = None
    xpu_available: bool | None = None
    cuda_available: bool | None = None
    devices: list[dict[str, object]] = []
    bnb_version: str | None = None
    bnb_backend: str | None = None
    seconds: float | None = None


ModelVariant = Literal["edit", "edit-2509", "edit-2511", "edit-plus", "unknown"]
"""Which Qwen-Image-Edit a diffusers model folder holds (facts.parse.model_variant)."""


class ModelDirInfo(StrictModel):
    path: str
    exists: bool = False
    pipeline_class: str | None = None
    variant: ModelVariant | None = None
    present: list[str] = []
    missing: list[str] = []
    size_bytes: int | None = None


class KernelCache(StrictModel):
    kind: Literal["triton", "torchinductor"]
    path: str
    exists: bool = False
    newest_mtime: float | None = None


class LevelZeroInfo(StrictModel):
    header: str | None = None
    """Path of level_zero/ze_api.h if found."""
    searched: list[str] = []


class VerifyRecord(StrictModel):
    when: str
    passed: bool
    device: str | None = None
    env_prefix: str | None = None
    summary: str = ""
    injected: list[str] = []
    """Faults injected on purpose (verify's test hooks): such a record proves nothing about the stack."""


class DriNode(StrictModel):
    path: str
    group: str | None = None
    gid: int | None = None
    """The node's numeric group (the host's, as the container sees it): what `--group-add` must name."""
    readable_writable: bool = False
    """Whether this process may open it for reading and writing (the render group is what usually grants it)."""


class ContainerInfo(StrictModel):
    """Set when the doctor runs inside a container."""

    engine: str
    """podman, docker or another engine (from /run/.containerenv, /.dockerenv or $container)."""
    dri_nodes: list[str] = []
    nodes: list[DriNode] = []
    groups: list[str] = []
    """The groups this process is in."""


class ProbeError(StrictModel):
    probe: str
    error: str


class Facts(VersionedModel):
    """Everything the checks look at. Serialised by `aipc-env doctor --save-facts` and read by `--facts`."""

    FORMAT: ClassVar[str] = "facts file"
    FIX: ClassVar[str] = "write facts with `aipc-env doctor --save-facts FILE` (this aipc-env)"

    schema_version: Literal[1] = FACTS_SCHEMA_VERSION
    collected_at: str
    aipc_env_version: str = ""
    machine: MachineIdentity | None = None
    os: OsInfo
    cpu: CpuInfo = CpuInfo()
    memory: MemoryInfo = MemoryInfo()
    disk: DiskInfo | None = None
    gpus: list[GpuInfo] = []
    sycl_devices: list[SyclDevice] | None = None
    """None when sycl-ls is not available."""
    registry: RegistryInfo | None = None
    """None off Windows."""
    oneapi: OneApiInfo = OneApiInfo()
    env_vars: dict[str, str | None] = {}
    msvc: MsvcInfo | None = None
    """None off Windows."""
    conda: list[CondaTool] = []
    training_env: TrainingEnv | None = None
    device_probe: DeviceProbe | None = None
    model: ModelDirInfo | None = None
    kernel_caches: list[KernelCache] = []
    level_zero: LevelZeroInfo = LevelZeroInfo()
    last_verify: VerifyRecord | None = None
    container: ContainerInfo | None = None
    """None outside a container."""
    local_torch_wheels: list[str] = []
    """The torch versions of the wheels in the local wheel folder (AIPC_ENV_TORCH_WHEELS), newest first."""
    probe_errors: list[ProbeError] = []

    @property
    def is_windows(self) -> bool:
        return self.os.system == "Windows"

    @property
    def gpu_families(self) -> frozenset[str]:
        """The families of the Intel GPUs the OS listing and sycl-ls show (aipc_env.core.gpus)."""
        from aipc_env.core.gpus import families_of

        return families_of(self.intel_gpus)

    @property
    def intel_gpus(self) -> list[tuple[str, str | None]]:
        """(name, PCI device id or None) of each Intel GPU the OS listing shows, then each GPU sycl-ls shows."""
        from aipc_env.core.gpus import is_intel_gpu

        listed = [(g.name, g.device_id) for g in self.gpus if g.is_intel]
        return listed + [(d.name, None) for d in self.sycl_devices or [] if d.kind == "gpu" and is_intel_gpu(None, d.name)]

    @property
    def has_intel_gpu(self) -> bool:
        """Whether the OS listing or sycl-ls shows an Intel GPU."""
        return bool(self.intel_gpus)


def load_facts(path: str | Path) -> Facts:
    """Facts saved by `doctor --save-facts`, or the facts inside a whole `doctor --json` report."""
    raw = read_json(path, "facts file")
    if isinstance(raw, dict) and "facts" in raw and "findings" in raw:  # a whole doctor --json report
        raw = raw["facts"]
    return validate_versioned(Facts, raw, path)
