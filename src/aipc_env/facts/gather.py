"""Probes that read the machine into a Facts model. Each probe is isolated: a failure becomes a
ProbeError in the facts, never an exception. Slow probes (subprocesses) run concurrently."""

from __future__ import annotations

import getpass
import os
import platform
import shutil
import sys
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from aipc_env import __version__
from aipc_env.core.fileio import loads_json
from aipc_env.core.formats import timestamp
from aipc_env.core.platforms import display_adapters
from aipc_env.core.procs import ProbeFailed, run_capture, which
from aipc_env.facts import parse
from aipc_env.facts.memory import system_memory
from aipc_env.facts.model import (
    CondaTool,
    ContainerInfo,
    CpuInfo,
    DeviceProbe,
    DiskInfo,
    DriNode,
    Facts,
    GpuInfo,
    KernelCache,
    LevelZeroInfo,
    MachineIdentity,
    MemoryInfo,
    ModelDirInfo,
    MsvcInfo,
    OneApiInfo,
    OneApiInstall,
    OsInfo,
    ProbeError,
    RegistryInfo,
    SyclDevice,
    TrainingEnv,
)
from aipc_env.facts.toolversion import env_layout_from_files, version_from_files

__all__ = [
    "DEVICE_PROBE_SCRIPT",
    "ENV_VARS",
    "EnvSeen",
    "GatherOptions",
    "gather_facts",
    "inspect_env",
    "installed_toolkits",
    "modified_files",
    "toolchain_facts",
]

ENV_VARS = (
    "ONEAPI_ROOT",
    "CMPLR_ROOT",
    "SETVARS_COMPLETED",
    "NoDefaultCurrentDirectoryInExePath",
    "LEVEL_ZERO_V1_SDK_PATH",
    "ZE_PATH",
    "ONEAPI_DEVICE_SELECTOR",
    "TRITON_CACHE_DIR",
    "CONDA_PREFIX",
    "VSCMD_VER",
    "PYTORCH_ENABLE_XPU_FALLBACK",
)

CONDA_TOOLS = ("conda", "mamba", "micromamba", "conda-lock")

_REG_FS = r"SYSTEM\CurrentControlSet\Control\FileSystem"
_REG_GFX = r"SYSTEM\CurrentControlSet\Control\GraphicsDrivers"
_REG_MM = _REG_GFX + r"\MemoryManager"


@dataclass(frozen=True)
class EnvSeen:
    """The training env the caller chose (trainenv.situation.gather_machine), or why it has none usable."""

    prefix: Path
    python: Path | None = None
    source: str = "flag"
    current: bool = False
    pair: str | None = None
    built_at: str | None = None
    error: str | None = None


@dataclass
class GatherOptions:
    work_dir: Path = field(default_factory=Path.cwd)
    env: EnvSeen | None = None
    """The training env to probe (None: none)."""
    read_last_verify: Callable[[], Any] | None = None
    """Reads the last verify record (a failure is a recorded probe error)."""
    model_dir: Path | None = None
    probe_device: bool = False
    probe_timeout: float = 120.0
    command_timeout: float = 15.0


# --------------------------------------------------------------------------- system


def _machine() -> MachineIdentity:
    import socket

    hostname = socket.gethostname()
    if sys.platform == "win32":
        guid = _read_reg(r"SOFTWARE\Microsoft\Cryptography", "MachineGuid")
        return MachineIdentity(
            hostname=hostname,
            machine_id=str(guid) if guid else None,
            source="HKLM\\SOFTWARE\\Microsoft\\Cryptography\\MachineGuid" if guid else None,
        )
    for path in (Path("/etc/machine-id"), Path("/var/lib/dbus/machine-id")):
        try:
            value = path.read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            continue
        if value:
            return MachineIdentity(hostname=hostname, machine_id=value, source=str(path))
    return MachineIdentity(hostname=hostname)


def _os_info() -> OsInfo:
    info = OsInfo(system=platform.system(), release=platform.release(), version=platform.version(), machine=platform.machine())
    if info.system == "Linux":
        try:
            info.pretty_name = parse.parse_os_release(Path("/etc/os-release").read_text())
        except OSError:
            pass
    elif info.system == "Windows":
        info.pretty_name = f"Windows {platform.release()} (build {platform.version()})"
    return info


def _cpu_info() -> CpuInfo:
    brand = None
    if sys.platform == "win32":
        brand = _read_reg(r"HARDWARE\DESCRIPTION\System\CentralProcessor\0", "ProcessorNameString")
    elif Path("/proc/cpuinfo").is_file():
        brand = parse.parse_cpuinfo_brand(Path("/proc/cpuinfo").read_text(errors="replace"))
    return CpuInfo(brand=(str(brand).strip() if brand else platform.processor() or None), logical_cores=os.cpu_count())


def _memory_info() -> MemoryInfo:
    return MemoryInfo(total_bytes=system_memory()[0])


def _disk_info(work_dir: Path) -> DiskInfo:
    probe = work_dir
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    usage = shutil.disk_usage(probe)
    return DiskInfo(path=str(work_dir), free_bytes=usage.free, total_bytes=usage.total)


def _linux_gpus() -> list[GpuInfo]:
    gpus = []
    for vendor, device, name, source in display_adapters():
        link = Path(source) / "device" / "driver"
        driver = os.path.basename(os.readlink(link)) if link.is_symlink() else None
        gpus.append(GpuInfo(name=name, vendor_id=vendor, device_id=device, driver=driver, source=source))
    return gpus


def _windows_gpus(timeout: float) -> list[GpuInfo]:
    ps = which("powershell") or which("pwsh")
    if not ps:
        raise ProbeFailed("powershell not found")
    query = (Path(__file__).with_name("scripts") / "windows-gpus.ps1").read_text(encoding="utf-8").strip()
    out = run_capture([ps, "-NoProfile", "-NonInteractive", "-Command", query], timeout=timeout)
    return parse.parse_cim_gpus(out.stdout)


def _read_reg(subkey: str, value: str) -> Any:
    import winreg  # Windows only

    try:
        with winreg.OpenKey(winreg.HKEY_LOCAL_MACHINE, subkey) as key:  # type: ignore[attr-defined]  # Windows-only names (winreg); this function runs there
            return winreg.QueryValueEx(key, value)[0]  # type: ignore[attr-defined]  # Windows-only names (winreg); this function runs there
    except FileNotFoundError:
        return None


def _registry() -> RegistryInfo:
    info = RegistryInfo()
    for attr, subkey, name in (
        ("long_paths_enabled", _REG_FS, "LongPathsEnabled"),
        ("commit_limit_percentage", _REG_MM, "SystemPartitionCommitLimitPercentage"),
        ("tdr_delay", _REG_GFX, "TdrDelay"),
    ):
        try:
            raw = _read_reg(subkey, name)
            setattr(info, attr, int(raw) if raw is not None else None)
        except (OSError, ValueError, TypeError) as exc:
            info.errors[name] = f"{type(exc).__name__}: {exc}"
    return info


# --------------------------------------------------------------------------- toolchain


def _oneapi_roots() -> list[Path]:
    roots: list[Path] = []
    if os.environ.get("ONEAPI_ROOT"):
        roots.append(Path(os.environ["ONEAPI_ROOT"]))
    if sys.platform == "win32":
        for var in ("ProgramFiles(x86)", "ProgramFiles"):
            base = os.environ.get(var)
            if base:
                roots.append(Path(base) / "Intel" / "oneAPI")
    else:
        roots += [Path("/opt/intel/oneapi"), Path.home() / "intel" / "oneapi"]
    seen, unique = set(), []
    for root in roots:
        key = os.path.normcase(str(root)).rstrip("\\/")
        if key not in seen:
            seen.add(key)
            unique.append(root)
    return unique


def _compiler_in(release_dir: Path) -> Path | None:
    exe = "icx.exe" if sys.platform == "win32" else "icpx"
    for candidate in (release_dir / "bin" / exe, release_dir / "bin" / "compiler" / exe):
        if candidate.is_file():
            return candidate
    return None


def _oneapi_install(root: Path) -> tuple[OneApiInstall, Path | None] | None:
    """A oneAPI root read from its folders: the releases, setvars, and the newest release's compiler (asked for
    its exact version by the caller)."""
    if not root.is_dir():
        return None
    ext = "bat" if sys.platform == "win32" else "sh"
    setvars = root / f"setvars.{ext}"
    unified = sorted(
        p.name for p in root.iterdir() if p.is_dir() and parse.is_release_dir(p.name) and (p / f"oneapi-vars.{ext}").is_file()
    )
    compiler_dir = root / "compiler"
    component = (
        sorted(p.name for p in compiler_dir.iterdir() if p.is_dir() and parse.is_release_dir(p.name))
        if compiler_dir.is_dir()
        else []
    )
    if not (setvars.is_file() or unified or component):
        return None
    layout = "unified" if unified else ("component" if component else "unknown")
    releases = sorted(set(unified) | set(component), key=lambda v: tuple(int(x) for x in v.split(".")))
    install = OneApiInstall(root=str(root), layout=layout, releases=releases, setvars=str(setvars) if setvars.is_file() else None)
    compiler = None
    if releases:
        newest = releases[-1]
        install.version, install.version_source = newest, "folder"
        compiler = _compiler_in(root / newest) or _compiler_in(compiler_dir / newest)
    return install, compiler


def _compiler_version(compiler: str, timeout: float) -> tuple[str | None, str | None]:
    try:
        return parse.parse_compiler_version(run_capture([compiler, "--version"], timeout=timeout).stdout)
    except ProbeFailed:
        return None, None


def _oneapi(timeout: float) -> OneApiInfo:
    """oneAPI installs from their folders; each compiler (icpx/icx: native, fast) is asked its exact release
    once, all at once."""
    info = OneApiInfo()
    compilers: dict[str, list[OneApiInstall]] = {}
    for root in _oneapi_roots():
        found = _oneapi_install(root)
        if found:
            info.installs.append(found[0])
            if found[1] is not None:
                compilers.setdefault(str(found[1]), []).append(found[0])
    active = None
    if os.environ.get("SETVARS_COMPLETED") or os.environ.get("CMPLR_ROOT"):
        active = which("icx" if sys.platform == "win32" else "icpx")
        if active:
            info.active_compiler = active
            compilers.setdefault(active, [])
    if compilers:
        with ThreadPoolExecutor(max_workers=len(compilers)) as pool:
            answers = dict(zip(compilers, pool.map(lambda c: _compiler_version(c, timeout), compilers)))
        for compiler, installs in compilers.items():
            release, build = answers[compiler]
            for install in installs:
                if release:
                    install.version, install.version_source = release, "icpx"
                install.compiler_build = build
        if active:
            info.active_version = answers[active][0]
    if not info.active_version and os.environ.get("CMPLR_ROOT"):
        info.active_version = parse.oneapi_version_from_path(os.environ["CMPLR_ROOT"])
    return info


def _msvc(timeout: float) -> MsvcInfo:
    info = MsvcInfo(cl_on_path=which("cl"))
    base = os.environ.get("ProgramFiles(x86)", r"C:\Program Files (x86)")
    vswhere = Path(base) / "Microsoft Visual Studio" / "Installer" / "vswhere.exe"
    if not vswhere.is_file():
        return info
    info.vswhere = str(vswhere)
    queries = (
        [str(vswhere), "-products", "*", "-format", "json", "-utf8"],
        [str(vswhere), "-products", "*", "-requires", parse.VC_TOOLS, "-format", "json", "-utf8"],
    )
    with ThreadPoolExecutor(max_workers=2) as pool:
        every, tools = pool.map(lambda argv: run_capture(argv, timeout=timeout), queries)
    with_tools = {i.path for i in parse.parse_vswhere(tools.stdout)}
    info.installs = parse.parse_vswhere(every.stdout, with_vc_tools=with_tools)
    return info


def _conda_tool_paths() -> dict[str, str]:
    """conda, mamba, micromamba and conda-lock as found on PATH (else conda's own CONDA_EXE / MAMBA_EXE)."""
    candidates = {
        "conda": os.environ.get("CONDA_EXE"),
        "mamba": os.environ.get("MAMBA_EXE"),
        "micromamba": os.environ.get("MAMBA_EXE"),
    }
    found = {}
    for name in CONDA_TOOLS:
        path = which(name) or candidates.get(name)
        if not path or not Path(path).exists() or (name == "micromamba" and "micromamba" not in path.lower()):
            continue
        found[name] = path
    return found


def _version_by_process(path: str, timeout: float) -> str | None:
    try:
        out = run_capture([path, "--version"], timeout=timeout)
    except ProbeFailed:
        return None
    return parse.parse_tool_version(out.stdout)


def _conda(timeout: float) -> list[CondaTool]:
    """The conda tools and their versions, read from conda-meta records or dist-info METADATA beside each one
    (facts/toolversion.py). Only a tool whose files say nothing (a standalone micromamba: a native binary) is
    asked `--version`, all such at once."""
    tools = {name: CondaTool(name=name, path=path) for name, path in _conda_tool_paths().items()}
    ask = []
    for tool in tools.values():
        found = version_from_files(tool.name, Path(tool.path))
        if found:
            tool.version, tool.version_source = found.version, found.source
        else:
            ask.append(tool)
    if ask:
        with ThreadPoolExecutor(max_workers=len(ask)) as pool:
            for tool, version in zip(ask, pool.map(lambda t: _version_by_process(t.path, timeout), ask)):
                tool.version, tool.version_source = version, "process" if version else None
    return list(tools.values())


def installed_toolkits(oneapi: OneApiInfo) -> list[str]:
    """Every oneAPI toolkit release installed (for the pair policy)."""
    return sorted({r for i in oneapi.installs for r in (i.releases or ([i.version] if i.version else [])) if r})


def toolchain_facts(timeout: float = 15.0) -> tuple[OneApiInfo, MsvcInfo | None]:
    """oneAPI installs and (on Windows) MSVC, for commands that write launchers; a failed probe means 'none found'."""
    try:
        oneapi = _oneapi(timeout)
    except (ProbeFailed, OSError):
        oneapi = OneApiInfo()
    if sys.platform != "win32":
        return oneapi, None
    try:
        return oneapi, _msvc(timeout)
    except (ProbeFailed, OSError, ValueError):
        return oneapi, MsvcInfo(cl_on_path=which("cl"))


def _level_zero() -> LevelZeroInfo:
    searched = []
    for var in ("LEVEL_ZERO_V1_SDK_PATH", "ZE_PATH"):
        if os.environ.get(var):
            searched.append(str(Path(os.environ[var]) / "include"))
    if sys.platform != "win32":
        searched += ["/usr/include", "/usr/local/include"]
    for inc in searched:
        header = Path(inc) / "level_zero" / "ze_api.h"
        if header.is_file():
            return LevelZeroInfo(header=str(header), searched=searched)
    return LevelZeroInfo(searched=searched)


def _sycl_ls(timeout: float) -> list[SyclDevice] | None:
    exe = which("sycl-ls")
    if not exe:
        return None
    return parse.parse_sycl_ls(run_capture([exe], timeout=timeout).stdout)


# --------------------------------------------------------------------------- training env

_ENV_INFO_SCRIPT = (
    "import json, sys, sysconfig, site;"
    "paths = [sysconfig.get_paths()['purelib'], sysconfig.get_paths()['platlib']];"
    "print(json.dumps({'version': '.'.join(map(str, sys.version_info[:3])), 'paths': paths}))"
)


def _distributions(paths: list[str]) -> dict[str, str]:
    from importlib import metadata

    from packaging.utils import canonicalize_name

    found: dict[str, str] = {}
    for dist in metadata.distributions(path=[p for p in dict.fromkeys(paths) if Path(p).is_dir()]):
        name = dist.metadata["Name"]
        if name:
            found.setdefault(canonicalize_name(name), dist.version)
    return dict(sorted(found.items()))


def inspect_env(prefix: Path, python: Path, *, source: str = "flag", current: bool = False, timeout: float = 30.0) -> TrainingEnv:
    """Read an env's Python version and installed distributions (metadata only: nothing is imported)."""
    env = TrainingEnv(prefix=str(prefix), source=source, python=str(python))
    if not python.is_file():
        env.error = f"no Python interpreter in {prefix}"
        return env
    layout = None if current else env_layout_from_files(prefix)
    if current:
        info: dict[str, Any] = {
            "version": platform.python_version(),
            "paths": [p for p in sys.path if p.endswith("site-packages")],
        }
    elif layout is not None:  # read from pyvenv.cfg / conda-meta: no interpreter started
        info = {"version": layout[0], "paths": layout[1]}
    else:
        try:
            info = loads_json(run_capture([str(python), "-I", "-c", _ENV_INFO_SCRIPT], timeout=timeout).stdout)
        except (ProbeFailed, ValueError) as exc:
            env.error = str(exc)
            return env
    env.python_version = info["version"]
    env.site_packages = [p for p in dict.fromkeys(info["paths"]) if Path(p).is_dir()]
    env.distributions = _distributions(env.site_packages)
    return env


def modified_files(site_packages: list[str], names: set[str] | None = None) -> dict[str, list[str]]:
    """Installed files whose sha256 differs from their distribution's RECORD (or that are gone), by
    distribution; only the named distributions when `names` is given. Reads files; imports nothing."""
    import base64
    import hashlib
    from importlib import metadata

    from packaging.utils import canonicalize_name

    changed: dict[str, list[str]] = {}
    for dist in metadata.distributions(path=site_packages):
        name = canonicalize_name(dist.metadata["Name"] or "")
        if not name or (names is not None and name not in names):
            continue
        for f in dist.files or []:
            if f.hash is None or f.hash.mode != "sha256":
                continue
            path = Path(cast("os.PathLike[str]", dist.locate_file(f)))  # a PathDistribution's: a pathlib.Path
            try:
                digest = hashlib.sha256(path.read_bytes()).digest()
            except OSError:
                changed.setdefault(name, []).append(str(f))
                continue
            if base64.urlsafe_b64encode(digest).rstrip(b"=").decode() != f.hash.value:
                changed.setdefault(name, []).append(str(f))
    return changed


def _training_env(seen: EnvSeen, timeout: float) -> TrainingEnv:
    if seen.error is not None or seen.python is None:  # a flag or a built env without an interpreter: a fact
        return TrainingEnv(prefix=str(seen.prefix), source=seen.source, error=seen.error or "no Python interpreter")
    env = inspect_env(seen.prefix, seen.python, source=seen.source, current=seen.current, timeout=timeout)
    if seen.pair is not None or seen.built_at is not None:
        env.pair, env.built_at = seen.pair, seen.built_at
    return env


DEVICE_PROBE_SCRIPT = r"""
import json, time
t0 = time.time()
out = {}
try:
    import torch
    out["torch_version"] = torch.__version__
    out["torch_version_xpu"] = getattr(torch.version, "xpu", None)
    xpu = getattr(torch, "xpu", None)
    out["xpu_available"] = bool(xpu and xpu.is_available())
    out["cuda_available"] = bool(torch.cuda.is_available())
    devices = []
    if out["xpu_available"]:
        for i in range(xpu.device_count()):
            p = xpu.get_device_properties(i)
            devices.append({"index": i, "type": "xpu", "name": p.name,
                            "total_memory": int(getattr(p, "total_memory", 0))})
    elif out["cuda_available"]:
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            devices.append({"index": i, "type": "cuda", "name": p.name, "total_memory": int(p.total_memory)})
    out["devices"] = devices
except Exception as exc:
    out["error"] = f"torch: {type(exc).__name__}: {exc}"
try:
    import bitsandbytes as bnb
    out["bnb_version"] = bnb.__version__
    cext = getattr(bnb, "cextension", None)
    name = type(getattr(cext, "lib", None)).__name__
    backend = str(getattr(cext, "BNB_BACKEND", "") or "").lower()
    out["bnb_backend"] = ("triton-or-pytorch" if name == "ErrorHandlerMockBNBNativeLibrary"
                          else f"{backend}-native" if backend else "native")
except Exception as exc:
    out["bnb_error"] = f"{type(exc).__name__}: {exc}"
out["seconds"] = round(time.time() - t0, 2)
print("AIPC_PROBE " + json.dumps(out))
"""


def _device_probe(env: TrainingEnv | None, timeout: float) -> DeviceProbe:
    if env is None or not env.python or env.error:
        return DeviceProbe(ran=False, error="no usable training env to probe")
    try:
        out = run_capture([env.python, "-c", DEVICE_PROBE_SCRIPT], timeout=timeout)
    except ProbeFailed as exc:
        return DeviceProbe(ran=False, error=str(exc))
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("AIPC_PROBE ")), None)
    if line is None:
        return DeviceProbe(ran=False, error="the probe printed no result")
    data = loads_json(line.removeprefix("AIPC_PROBE "))
    error = data.pop("error", None) or data.pop("bnb_error", None)
    return DeviceProbe(ran=True, error=error, **data)


# --------------------------------------------------------------------------- model, caches


def _dir_size(path: Path, limit: int = 20000) -> int:
    total = 0
    for i, entry in enumerate(path.rglob("*")):
        if i > limit:
            break
        try:
            if entry.is_file():
                total += entry.stat().st_size
        except OSError:
            pass
    return total


def _model_dir(path: Path) -> ModelDirInfo:
    info = ModelDirInfo(path=str(path), exists=path.is_dir())
    if not info.exists:
        return info
    info.present = [p for p in parse.MODEL_PARTS if (path / p).exists()]
    info.missing = [p for p in parse.MODEL_PARTS if p not in info.present]
    if (path / "model_index.json").is_file():
        from aipc_env.core.fileio import read_json

        index = read_json(path / "model_index.json", "model_index.json")
        tcfg_path = path / "transformer" / "config.json"
        tcfg = read_json(tcfg_path, "the transformer's config.json") if tcfg_path.is_file() else None
        info.pipeline_class, info.variant = parse.model_variant(index, tcfg)
    info.size_bytes = _dir_size(path)
    return info


def _kernel_caches() -> list[KernelCache]:
    triton = Path(os.environ.get("TRITON_CACHE_DIR") or Path.home() / ".triton" / "cache")
    try:
        user = getpass.getuser()
    except Exception:  # noqa: BLE001 - no user name in some service contexts
        user = "unknown"
    inductor = Path(tempfile.gettempdir()) / f"torchinductor_{user}"
    caches = []
    for kind, path in (("triton", triton), ("torchinductor", inductor)):
        cache = KernelCache(kind=kind, path=str(path), exists=path.is_dir())
        if cache.exists:
            try:
                cache.newest_mtime = max((p.stat().st_mtime for p in path.iterdir()), default=None)
            except OSError:
                pass
        caches.append(cache)
    return caches


def _container() -> ContainerInfo | None:
    """Whether this runs inside a container, and the GPU device nodes it was given."""
    if Path("/run/.containerenv").exists():
        engine = "podman"
    elif Path("/.dockerenv").exists():
        engine = "docker"
    elif os.environ.get("container"):
        engine = os.environ["container"]
    else:
        return None
    import grp

    nodes = []
    for node in sorted(Path("/dev/dri").glob("*")) if Path("/dev/dri").is_dir() else []:
        try:
            gid = node.stat().st_gid
        except OSError:
            gid = None
        try:
            group = grp.getgrgid(gid).gr_name if gid is not None else None
        except KeyError:
            group = None
        nodes.append(DriNode(path=str(node), group=group, gid=gid, readable_writable=os.access(node, os.R_OK | os.W_OK)))
    groups = []
    for gid in os.getgroups():
        try:
            groups.append(grp.getgrgid(gid).gr_name)
        except KeyError:
            groups.append(str(gid))
    return ContainerInfo(engine=engine, dri_nodes=[n.path for n in nodes], nodes=nodes, groups=sorted(set(groups)))


# --------------------------------------------------------------------------- assembly


def gather_facts(opts: GatherOptions | None = None) -> Facts:
    """Read the machine. Never raises for a failed probe: it is recorded in facts.probe_errors."""
    opts = opts or GatherOptions()
    errors: list[ProbeError] = []
    is_windows = sys.platform == "win32"
    t = opts.command_timeout
    model_dir = opts.model_dir

    def guard(name: str, fn: Callable[[], Any], default: Any = None) -> Any:
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - every probe failure becomes a recorded fact
            errors.append(
                ProbeError(probe=name, error=f"{type(exc).__name__}: {exc}" if not isinstance(exc, ProbeFailed) else str(exc))
            )
            return default

    slow: dict[str, Callable[[], Any]] = {
        "oneapi": lambda: _oneapi(t),
        "conda": lambda: _conda(t),
        "sycl_ls": lambda: _sycl_ls(t),
    }
    if opts.env is not None:
        seen = opts.env
        slow["training_env"] = lambda: _training_env(seen, t)
    if is_windows:
        slow["gpus"] = lambda: _windows_gpus(t)
        slow["msvc"] = lambda: _msvc(t)
    with ThreadPoolExecutor(max_workers=len(slow)) as pool:
        futures = {name: pool.submit(guard, name, fn) for name, fn in slow.items()}
        os_info = guard("os", _os_info) or OsInfo(system=platform.system())
        facts = Facts(
            collected_at=timestamp(),
            aipc_env_version=__version__,
            os=os_info,
            machine=guard("machine", _machine),
            cpu=guard("cpu", _cpu_info, CpuInfo()),
            memory=guard("memory", _memory_info, MemoryInfo()),
            disk=guard("disk", lambda: _disk_info(opts.work_dir)),
            gpus=[] if is_windows else guard("gpus", _linux_gpus, []),
            registry=guard("registry", _registry) if is_windows else None,
            env_vars={name: os.environ.get(name) for name in ENV_VARS},
            level_zero=guard("level_zero", _level_zero, LevelZeroInfo()),
            kernel_caches=guard("kernel_caches", _kernel_caches, []),
            model=guard("model", lambda: _model_dir(model_dir)) if model_dir else None,
            last_verify=guard("last_verify", opts.read_last_verify) if opts.read_last_verify else None,
            container=None if is_windows else guard("container", _container),
        )
        results = {name: f.result() for name, f in futures.items()}
    facts.oneapi = results["oneapi"] or OneApiInfo()
    facts.conda = results["conda"] or []
    facts.training_env = results.get("training_env")
    facts.sycl_devices = results["sycl_ls"]
    if is_windows:
        facts.gpus = results.get("gpus") or []
        facts.msvc = results.get("msvc") or MsvcInfo(cl_on_path=which("cl"))
    if opts.probe_device:
        facts.device_probe = guard("device_probe", lambda: _device_probe(facts.training_env, opts.probe_timeout))
    facts.probe_errors = errors
    return facts
