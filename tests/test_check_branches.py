"""Every `warn` and `fail` branch of every doctor check, each reached from a whole-machine fixture by a minimal
mutation of its facts, with the status, what was seen and the fix asserted. coverage.py (branch mode) proves
the table takes an arc into every such call in the source."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from aipc_env.doctor import run_checks
from aipc_env.doctor.checks import Status
from aipc_env.facts import load_facts
from aipc_env.facts.model import CondaTool, DeviceProbe, Facts, GpuInfo, MsvcInstall, ProbeError, VerifyRecord
from aipc_env.matrix import load_matrix
from tests.conftest import MACHINES, ROOT

W = "win11_core_ultra_32gb"  # every check ok
L = "linux_arc_a770"
GIB = 2**30
MATRIX = load_matrix()


def _pkgs(facts: Facts, **changes: str | None) -> None:
    pkgs = dict(facts.training_env.distributions)
    for name, version in changes.items():
        name = name.replace("_", "-")
        if version is None:
            pkgs.pop(name, None)
        else:
            pkgs[name] = version
    facts.training_env.distributions = pkgs


def _only_pkgs(facts: Facts, pkgs: dict[str, str]) -> None:
    facts.training_env.distributions = pkgs
    facts.training_env.pair = None


def _env_of(pair_id: str, platform: str = "win-64", **changes: str | None) -> Callable[[Facts], None]:
    from tests.fixtures.build_machines import env_packages

    def mutate(f: Facts) -> None:
        f.training_env.distributions = env_packages(pair_id, platform)
        f.training_env.pair = pair_id
        _pkgs(f, **changes)

    return mutate


def _only_the_a770_and_no_env(f: Facts) -> None:
    f.training_env = None
    f.gpus = [g for g in f.gpus if "A770" in g.name]
    f.sycl_devices = [d for d in f.sycl_devices if "A770" in d.name]


def _set(path: str, value: object) -> Callable[[Facts], None]:
    def mutate(f: Facts) -> None:
        obj = f
        *parents, last = path.split(".")
        for part in parents:
            obj = obj[int(part)] if part.isdigit() else getattr(obj, part)  # type: ignore[index]
        setattr(obj, last, value)

    return mutate


def _all(*mutations: Callable[[Facts], None]) -> Callable[[Facts], None]:
    def mutate(f: Facts) -> None:
        for m in mutations:
            m(f)

    return mutate


def _probe(**kw) -> Callable[[Facts], None]:
    return _set("device_probe", DeviceProbe(ran=True, **kw))


def _verify(**kw) -> Callable[[Facts], None]:
    def mutate(f: Facts) -> None:
        base = dict(
            when="2026-11-20T10:00:00+00:00",
            passed=True,
            device="xpu:0",
            env_prefix=f.training_env.prefix,
            summary="7/7 steps passed",
        )
        base.update(kw)
        f.last_verify = VerifyRecord(**base)

    return mutate


def _in_container(nodes: list[tuple], groups: list[str]) -> Callable[[Facts], None]:
    """nodes: (path, group name, readable_writable[, numeric gid])."""
    from aipc_env.facts.model import ContainerInfo, DriNode

    def mutate(f: Facts) -> None:
        f.container = ContainerInfo(
            engine="podman",
            dri_nodes=[n[0] for n in nodes],
            groups=groups,
            nodes=[DriNode(path=n[0], group=n[1], readable_writable=n[2], gid=n[3] if len(n) > 3 else None) for n in nodes],
        )

    return mutate


# (check, fixture, mutation, status, in `seen`, in `fix`)
CASES: list[tuple[str, str, Callable[[Facts], None], Status, str, str]] = [
    ("os", W, _set("os.version", "10.0.19045"), Status.WARN, "Windows 11", "upgrade to Windows 11"),
    ("os", W, _all(_set("os.system", "Darwin"), _set("os.pretty_name", "macOS 15")), Status.FAIL, "macOS", "Windows 11 or Linux"),
    (
        "cpu",
        W,
        _all(_set("cpu.brand", "Intel(R) Core(TM) i7-1165G7"), _set("gpus.0.name", "Intel(R) UHD Graphics")),
        Status.WARN,
        "i7-1165G7",
        "Core Ultra",
    ),
    ("ram", W, _set("memory.total_bytes", None), Status.WARN, "unknown", "Task Manager"),
    ("ram", W, _set("memory.total_bytes", 16 * GIB), Status.FAIL, "16 GB class", "32 GB or more"),
    ("disk", W, _set("disk", None), Status.WARN, "unknown", "65 GB"),
    ("disk", W, _set("disk.free_bytes", 20 * GIB), Status.FAIL, "20 GiB free", "--work-dir"),
    ("disk", W, _set("disk.free_bytes", 70 * GIB), Status.WARN, "70 GiB free", "pre-quantize both"),
    (
        "long-paths",
        W,
        _set("registry.errors", {"LongPathsEnabled": "PermissionError: denied"}),
        Status.WARN,
        "unreadable",
        "HKLM",
    ),
    ("long-paths", W, _set("registry.long_paths_enabled", 0), Status.FAIL, "LongPathsEnabled = 0", "LongPathsEnabled' -Value 1"),
    ("gpu-memory-ceiling", W, _set("registry.commit_limit_percentage", 57), Status.WARN, "= 57", "/d 75"),
    ("tdr", W, _set("registry.tdr_delay", None), Status.WARN, "not set", "TdrDelay /t REG_DWORD /d 60"),
    (
        "probes",
        W,
        _set("probe_errors", [ProbeError(probe="sycl_ls", error="timeout")]),
        Status.WARN,
        "1 probe(s) failed",
        "re-run with -v",
    ),
    ("intel-gpu", W, _all(_set("gpus", []), _set("sycl_devices", [])), Status.FAIL, "no Intel GPU", "Core Ultra AI PC"),
    ("intel-gpu", W, _set("gpus.0.status", "Error"), Status.FAIL, "status Error", "reinstall the driver"),
    ("gpu-driver", W, _set("gpus.0.driver_version", "31.0.101.4972"), Status.WARN, "31.0.101.4972", "latest driver"),
    ("gpu-driver", L, _set("sycl_devices", None), Status.WARN, "no compute runtime seen", "libze1"),
    (
        "gpu-driver",
        L,
        _all(_set("sycl_devices", None), _set("gpus", [GpuInfo(name="Intel GPU 56a0", vendor_id="8086", driver="vfio-pci")])),
        Status.WARN,
        "kernel driver vfio-pci",
        "xe/i915",
    ),
    ("multi-gpu", L, lambda f: None, Status.WARN, "2 Intel GPUs", "ONEAPI_DEVICE_SELECTOR=level_zero:"),
    (
        "device-probe",
        W,
        _set("device_probe", DeviceProbe(ran=False, error="torch: ImportError")),
        Status.FAIL,
        "probe failed",
        "aipc-env env",
    ),
    (
        "device-probe",
        W,
        _probe(torch_version="2.11.0+xpu", xpu_available=False),
        Status.FAIL,
        "is_available() is False",
        "render",
    ),
    ("device-probe", W, _probe(torch_version="2.11.0+cpu", xpu_available=False), Status.FAIL, "not an XPU build", "aipc-env env"),
    ("bnb-backend", W, _probe(torch_version="2.11.0+xpu", xpu_available=True), Status.FAIL, "did not import", "aipc-env env"),
    (
        "bnb-backend",
        W,
        _probe(torch_version="2.11.0+xpu", xpu_available=True, bnb_version="0.50.2", bnb_backend="triton-or-pytorch"),
        Status.WARN,
        "triton-or-pytorch",
        ">= 0.50.2",
    ),
    (
        "bnb-backend",
        W,
        _all(
            _env_of("xpu-2.7"),
            _probe(torch_version="2.7.1+xpu", xpu_available=True, bnb_version="0.50.2", bnb_backend="triton-or-pytorch"),
        ),
        Status.WARN,
        "triton-or-pytorch",
        "oneAPI >= 2025.1",
    ),
    (
        "bnb-backends",
        W,
        lambda f: _pkgs(f, pyelftools=None),
        Status.FAIL,
        "NF4 matmul: native SYCL; NF4 quantize: none; Adam8bit: none",
        "aipc-env env",
    ),
    (
        "bnb-backends",
        W,
        _all(_env_of("xpu-2.7"), _set("msvc.installs", [])),
        Status.FAIL,
        "NF4 matmul: none; NF4 quantize: none; Adam8bit: none",
        "or move to a pair with the native library: aipc-env env",
    ),
    (
        "bnb-backends",
        W,
        _env_of("xpu-2.7"),
        Status.WARN,
        "NF4 matmul: Triton fallback; NF4 quantize: Triton; Adam8bit: Triton",
        "oneAPI >= 2025.1",
    ),
    ("model-dir", W, _set("model.exists", False), Status.FAIL, "does not exist", "huggingface-cli download"),
    (
        "model-dir",
        W,
        _all(_set("model.missing", ["vae"]), _set("model.present", ["model_index.json"])),
        Status.FAIL,
        "missing vae",
        "resumes",
    ),
    (
        "model-dir",
        W,
        lambda f: _pkgs(f, diffusers="0.36.0"),
        Status.FAIL,
        "the training env has diffusers 0.36.0",
        "diffusers>=0.37",
    ),
    (
        "model-dir",
        W,
        _all(_set("model.variant", "unknown"), _set("model.pipeline_class", "FluxPipeline")),
        Status.FAIL,
        "FluxPipeline",
        "Qwen-Image-Edit repo",
    ),
    ("training-env", W, _set("training_env", None), Status.FAIL, "not found", "aipc-env env"),
    (
        "training-env",
        W,
        _set("training_env.error", "no Python interpreter in X"),
        Status.FAIL,
        "no Python interpreter",
        "--env PREFIX",
    ),
    (
        "training-env",
        W,
        _all(_set("training_env.source", "current"), lambda f: _pkgs(f, torch=None)),
        Status.WARN,
        "no training env is built or recorded",
        "nox -s train",
    ),
    ("torch-xpu", W, lambda f: _pkgs(f, torch=None), Status.FAIL, "torch not installed", "aipc-env env"),
    ("torch-xpu", W, lambda f: _pkgs(f, torch="2.11.0+cpu"), Status.FAIL, "+cpu build", "whl/xpu"),
    (
        "pair",
        W,
        lambda f: _only_pkgs(f, {"intel-sycl-rt": "2025.3.2", "umf": "1.0.3"}),
        Status.WARN,
        "several pairs",
        "lock of one pair",
    ),
    ("pair", W, lambda f: _only_pkgs(f, {"intel-sycl-rt": "2099.1.0"}), Status.FAIL, "match no known release", "rebuild the env"),
    ("pair", W, _env_of("xpu-2.14"), Status.WARN, "provisional matrix row", "report the env"),
    ("pair", W, _env_of("xpu-2.11", umf=None), Status.WARN, "pinned package(s) missing", "repair the env"),
    ("env-lock", W, _env_of("xpu-2.12", transformers="4.0.0"), Status.FAIL, "differ from the xpu-2.12 lock", "--prefix"),
    ("runtime-mix", W, lambda f: _pkgs(f, umf="1.0.2"), Status.FAIL, "another release than xpu-2.11", "reinstall"),
    ("python", W, _set("training_env.python_version", "3.9.7"), Status.FAIL, "Python 3.9.7", "pair's Python"),
    ("bitsandbytes", W, lambda f: _pkgs(f, bitsandbytes=None), Status.FAIL, "not installed", "bitsandbytes>=0.50.2"),
    ("bitsandbytes", W, lambda f: _pkgs(f, bitsandbytes="0.50.1"), Status.FAIL, "0.50.1 < 0.50.2", "bitsandbytes>=0.50.2"),
    (
        "bitsandbytes",
        W,
        lambda f: _pkgs(f, bitsandbytes="9" * 5000),
        Status.FAIL,
        "is not a version",
        "--force-reinstall",
    ),
    ("triton", W, lambda f: _pkgs(f, triton="3.5.0"), Status.FAIL, "triton 3.5.0", "pip uninstall -y triton"),
    ("triton", W, lambda f: _pkgs(f, triton_xpu=None), Status.FAIL, "triton-xpu not installed", "reinstall"),
    ("triton", W, lambda f: _pkgs(f, triton_xpu="3.5.0"), Status.FAIL, "needs triton-xpu 3.7.0", "pip uninstall"),
    (
        "kernel-cache",
        W,
        _set("training_env.built_at", "2026-11-25T00:00:00+00:00"),
        Status.WARN,
        "kernels compiled before",
        ".triton",
    ),
    ("last-verify", W, _set("last_verify", None), Status.WARN, "never verified", "aipc-env verify"),
    ("last-verify", W, _verify(injected=["frozen-optimizer"]), Status.WARN, "injected faults", "AIPC_VERIFY_INJECT"),
    ("last-verify", W, _verify(env_prefix="C:\\other env"), Status.WARN, "another env", "aipc-env verify"),
    ("last-verify", W, _verify(passed=False, summary="6/7 steps passed"), Status.FAIL, "6/7", "aipc-env verify"),
    ("conda", W, _all(_set("conda", []), _set("training_env.source", "conda")), Status.FAIL, "none of conda", "Miniforge"),
    (
        "msvc",
        W,
        _set("msvc.installs", [MsvcInstall(path="C:\\BT", display_name="Build Tools 2022")]),
        Status.FAIL,
        "Build Tools 2022 without the C++ workload",
        "Desktop development with C++",
    ),
    ("msvc", W, _set("msvc.installs", []), Status.FAIL, "no Visual Studio", "visualstudio.microsoft.com"),
    (
        "oneapi-installed",
        W,
        _all(_set("oneapi.installs", []), lambda f: _only_pkgs(f, {"numpy": "2.0"})),
        Status.WARN,
        "no oneAPI toolkit found",
        "matching your pair",
    ),
    ("oneapi-installed", W, _set("oneapi.installs", []), Status.WARN, "no oneAPI toolkit found", "oneAPI Base Toolkit 2025.3"),
    (
        "oneapi-installed",
        "win11_oneapi_2025_0_over_torch_2_10",
        lambda f: None,
        Status.WARN,
        "needs 2025.3",
        "install oneAPI Base Toolkit 2025.3",
    ),
    ("oneapi-activated", W, _set("env_vars", {"SETVARS_COMPLETED": "1"}), Status.WARN, "no compiler answers", "fresh terminal"),
    ("oneapi-activated", W, _set("oneapi.active_version", "2025.0"), Status.FAIL, "2025.0 activated over", "without setvars"),
    ("level-zero", W, _set("level_zero.header", None), Status.WARN, "ze_api.h not found", "LEVEL_ZERO_V1_SDK_PATH"),
    ("level-zero", L, _set("level_zero.header", None), Status.WARN, "ze_api.h not found", "libze-dev"),
    (
        "setvars-quirk",
        W,
        _set("env_vars", {"NoDefaultCurrentDirectoryInExePath": "1"}),
        Status.WARN,
        "set",
        "NoDefaultCurrentDirectoryInExePath=",
    ),
    ("dri-access", L, _in_container([], ["aipc"]), Status.FAIL, "no /dev/dri/renderD*", "--device /dev/dri"),
    (
        "dri-access",
        L,
        _all(_in_container([], ["aipc"]), _set("gpus", []), _set("sycl_devices", [])),
        Status.WARN,
        "no /dev/dri/renderD* node and no Intel GPU seen",
        "only if the host has an Intel GPU",
    ),
    (
        "dri-access",
        L,
        _in_container([("/dev/dri/renderD128", "render", False)], ["aipc"]),
        Status.FAIL,
        "not usable (group render",
        "--group-add <the node's numeric gid>",
    ),
    (
        "dri-access",
        L,
        _in_container([("/dev/dri/renderD128", None, False, 108)], ["aipc"]),
        Status.FAIL,
        "(gid 108)",
        "--group-add 108",
    ),
    (
        "interpreter",
        L,
        lambda f: None,
        Status.WARN,
        "Python 3.12.12; the conda layer of xpu-2.9 has 3.12.5",
        "remove /home/dev/micromamba/envs/aipc-xpu-2.9, then aipc-env env --pair xpu-2.9",
    ),
    (
        "known-issues",
        "win11_arc_a770",
        lambda f: None,
        Status.WARN,
        "pytorch/pytorch#197520, pytorch/pytorch#157714, pytorch/pytorch#190972 hit xpu-2.14 (torch 2.14.1) with Arc "
        "A-series (Alchemist) on Windows",
        "move to xpu-2.10",
    ),
]


def _verdict(check: str, fixture: str, mutate: Callable[[Facts], None]):
    facts = load_facts(MACHINES / f"{fixture}.json")
    mutate(facts)
    (finding,) = run_checks(facts, MATRIX, [check], lock_for=_shipped_lock, conda_python_for=_shipped_conda).findings
    return finding


def _shipped_conda(pair: str, platform: str):
    from aipc_env.lock.conda_layer import conda_layer_python

    return conda_layer_python(ROOT / "lockfiles" / pair, platform)


def _shipped_lock(pair: str, platform: str):
    from aipc_env.lock.lockfile import pylock_path, read_pylock

    path = pylock_path(ROOT / "lockfiles" / pair, platform)
    return read_pylock(path) if path.is_file() else None


@pytest.mark.parametrize("check,fixture,mutate,status,seen,fix", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_branch(check, fixture, mutate, status, seen, fix):
    if fixture == W:  # the mutation, not the fixture, causes the verdict
        assert _verdict(check, fixture, lambda f: None).status in (Status.OK, Status.SKIP)
    finding = _verdict(check, fixture, mutate)
    assert finding.status == status, (finding.seen, finding.fix)
    assert seen in finding.seen and fix in finding.fix and finding.why, (finding.seen, finding.fix)


def _finding_record(finding) -> dict:
    return {
        "status": finding.status.value,
        "seen": finding.seen,
        "why": finding.why,
        "fix": finding.fix,
        "details": finding.details,
    }


def all_verdicts() -> dict:
    """{"cases": {"<check>-<i>": finding}, "machines": {"<fixture>": {"<check>": finding}}} as plain data."""
    cases = {f"{c[0]}-{i}": _finding_record(_verdict(c[0], c[1], c[2])) for i, c in enumerate(CASES)}
    machines = {}
    for path in sorted(MACHINES.glob("*.json")):
        report = run_checks(load_facts(path), MATRIX, lock_for=_shipped_lock, conda_python_for=_shipped_conda)
        machines[path.stem] = {f.id: _finding_record(f) for f in report.findings}
    return {"cases": cases, "machines": machines}


RECORDED = Path(__file__).parent / "fixtures" / "doctor-verdicts.json"


def test_every_verdict_is_the_recorded_one():
    """The whole finding of every table case and of every check on every machine fixture, against the verdicts
    recorded once and reviewed (fixtures/doctor-verdicts.json): a changed message, fix or threshold is a diff to
    review. After an intended change: python tests/fixtures/record_doctor_verdicts.py, then read the diff."""
    recorded = json.loads(RECORDED.read_text(encoding="utf-8"))
    now = all_verdicts()
    assert sorted(now["cases"]) == sorted(recorded["cases"]), "the table changed: record again and review"
    assert sorted(now["machines"]) == sorted(recorded["machines"])
    for name, finding in now["cases"].items():
        assert finding == recorded["cases"][name], name
    for machine, findings in now["machines"].items():
        assert findings == recorded["machines"][machine], machine


def _problem_lines() -> set[tuple[str, int]]:
    """(file, line) of every `warn(` / `fail(` call in the check modules (the verdicts a user can get)."""
    import ast

    lines = set()
    folder = ROOT / "src" / "aipc_env" / "doctor" / "checks"
    for path in folder.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("warn", "fail"):
                lines.add((str(path), node.lineno))
    return lines


def test_the_table_reaches_every_warn_and_fail_branch():
    """coverage.py with branch measurement, run around the table: each warn/fail call is the target of an arc
    taken (the branch that leads to it was followed), in every check module."""
    import coverage

    wanted = _problem_lines()
    folder = ROOT / "src" / "aipc_env" / "doctor" / "checks"
    cov = coverage.Coverage(branch=True, data_file=None, include=[str(folder / "*.py")])
    cov.start()
    try:
        for check, fixture, mutate, *_ in CASES:
            _verdict(check, fixture, mutate)
    finally:
        cov.stop()
    data = cov.get_data()
    taken: set[tuple[str, int]] = set()
    for file in data.measured_files():
        taken |= {(str(Path(file)), to) for start, to in (data.arcs(file) or []) if to > 0 and start != to}
    assert {f for f, _ in wanted} <= {str(Path(f)) for f in data.measured_files()}, "a check module was not measured"
    missing = sorted((Path(f).name, n) for f, n in wanted - taken)
    assert not missing, f"warn/fail branches no table case reaches: {missing}"


def _gpus(*gpus: tuple[str, str | None, str | None, str | None]) -> Callable[[Facts], None]:
    """(name, vendor id, kernel driver, status) of each GPU."""
    return _set("gpus", [GpuInfo(name=n, vendor_id=v, driver=d, status=s, source="test") for n, v, d, s in gpus])


@pytest.mark.parametrize(
    ("check", "fixture", "mutate", "status", "seen"),
    [
        # the Windows driver bound (build 6000): at, below and above
        ("gpu-driver", W, _set("gpus.0.driver_version", "32.0.101.6000"), "ok", "Intel(R) Arc(TM) Graphics 32.0.101.6000"),
        ("gpu-driver", W, _set("gpus.0.driver_version", "32.0.101.5999"), "warn", "Intel(R) Arc(TM) Graphics 32.0.101.5999"),
        ("gpu-driver", W, _set("gpus.0.driver_version", "32.0.101.6001"), "ok", "Intel(R) Arc(TM) Graphics 32.0.101.6001"),
        ("gpu-driver", W, _set("gpus.0.driver_version", None), "warn", "Intel(R) Arc(TM) Graphics unknown"),
        ("gpu-driver", W, _gpus(("NVIDIA RTX 4090", "10de", None, "OK")), "skip", "no Intel GPU"),
        (
            "gpu-driver",
            L,
            _all(
                _set("sycl_devices", None),
                _gpus(
                    ("Intel GPU 56a0", "8086", "vfio-pci", None),
                    ("Intel GPU a780", "8086", "i915-old", None),
                    ("NVIDIA", "10de", "nvidia", None),
                ),
            ),
            "warn",
            "kernel driver i915-old, vfio-pci",
        ),
        (
            "gpu-driver",
            L,
            _all(_set("sycl_devices", None), _gpus(("Intel GPU 56a0", "8086", "xe", None))),
            "warn",
            "kernel driver xe; no compute runtime seen (sycl-ls missing)",
        ),
        (
            "gpu-driver",
            L,
            _all(_set("sycl_devices", None), _gpus(("Intel GPU 56a0", "8086", "i915", None))),
            "warn",
            "kernel driver i915; no compute runtime seen (sycl-ls missing)",
        ),
        (
            "multi-gpu",
            L,
            _set("env_vars", {"ONEAPI_DEVICE_SELECTOR": "level_zero:0"}),
            "ok",
            "2 Intel GPUs, ONEAPI_DEVICE_SELECTOR=level_zero:0",
        ),
        # the interpreter against the lock's conda layer (xpu-2.9: Python 3.12.5): the same release, another minor
        # (the fallback), no layer
        ("interpreter", L, _set("training_env.python_version", "3.12.5"), "ok", "Python 3.12.5, the conda layer's of xpu-2.9"),
        (
            "interpreter",
            L,
            _set("training_env.python_version", "3.13.1"),
            "ok",
            "Python 3.13.1 from the fallback: `conda create python=3.13` (unpinned) or a --base-python venv; no conda layer "
            "of xpu-2.9 for linux-64 that holds Python 3.12.5, not 3.13",
        ),
        (
            "interpreter",
            W,
            lambda f: None,
            "ok",
            "Python 3.12.12 from the fallback: `conda create python=3.12` (unpinned) "
            "or a --base-python venv; no conda layer of xpu-2.11 for win-64 exists in this checkout",
        ),
        # known issues: the A770 on Windows meets none with 2.10 (pytorch/pytorch#157714 from 2.11, #197520 on 2.14)
        (
            "known-issues",
            "win11_arc_a770",
            _env_of("xpu-2.10"),
            "ok",
            "none known for xpu-2.10 (torch 2.10.0) with Arc A-series (Alchemist) on Windows",
        ),
        (
            "known-issues",
            L,
            _only_the_a770_and_no_env,
            "ok",
            "none known for xpu-2.9 (torch 2.9.1), the pair a build would choose, with Arc A-series (Alchemist) on Linux",
        ),
        (
            "device-probe",
            W,
            _probe(
                torch_version="2.11.0+xpu",
                xpu_available=True,
                devices=[
                    {"name": "Intel(R) Arc(TM) Graphics", "total_memory": 16_000_000_000},
                    {"name": "B580", "total_memory": None},
                ],
            ),
            "ok",
            "torch 2.11.0+xpu: Intel(R) Arc(TM) Graphics (16.0 GB), B580 (0.0 GB)",
        ),
        (
            "bnb-backend",
            W,
            _probe(torch_version="2.11.0+xpu", xpu_available=True, bnb_version="0.50.2", bnb_backend="xpu-native"),
            "ok",
            "bitsandbytes 0.50.2, xpu-native library",
        ),
        (
            "bnb-backend",
            W,
            _probe(torch_version="2.11.0+xpu", xpu_available=False, bnb_version="0.50.2"),
            "ok",
            "bitsandbytes 0.50.2, unknown library",
        ),
        (
            "intel-gpu",
            W,
            _all(_set("sycl_devices", []), _gpus(("Intel(R) Arc(TM) Graphics", None, None, "OK"))),
            "ok",
            "Intel(R) Arc(TM) Graphics",
        ),
        (
            "intel-gpu",
            W,
            _all(_set("sycl_devices", []), _gpus(("NVIDIA RTX 4090", "10de", None, "OK"), ("AMD", "1002", None, None))),
            "fail",
            "no Intel GPU (NVIDIA RTX 4090, AMD)",
        ),
        (
            "intel-gpu",
            W,
            _gpus(("Intel A", "8086", None, "Error"), ("Intel B", "8086", None, "Degraded")),
            "fail",
            "Intel A: status Error, Intel B: status Degraded",
        ),
    ],
)
def test_gpu_bounds_and_ok_paths(check, fixture, mutate, status, seen):
    finding = _verdict(check, fixture, mutate)
    assert (finding.status.value, finding.seen) == (status, seen)


@pytest.mark.parametrize(
    ("check", "fixture", "mutate", "status", "seen"),
    [
        # Windows 11 starts at build 22000: at, below, above, unknown
        ("os", W, _set("os.version", "10.0.22000"), "ok", "Windows 11 (build 10.0.26100)"),
        ("os", W, _set("os.version", "10.0.21999"), "warn", "Windows 11 (build 10.0.26100)"),
        ("os", W, _set("os.version", "10.0.22001"), "ok", "Windows 11 (build 10.0.26100)"),
        ("os", W, _set("os.version", None), "ok", "Windows 11 (build 10.0.26100)"),
        ("cpu", W, _set("cpu.brand", None), "ok", "unknown CPU (with an Intel Arc GPU)"),
        (
            "cpu",
            W,
            _all(_set("cpu.brand", "Intel(R) Core(TM) ULTRA 5 125U"), _set("gpus.0.name", "Intel(R) Graphics")),
            "ok",
            "Intel(R) Core(TM) ULTRA 5 125U",
        ),
        # kernels compiled at the very second the env was built are not stale; one second before they are
        (
            "kernel-cache",
            W,
            _set("training_env.built_at", "2026-11-20T08:00:00+00:00"),
            "ok",
            "C:\\Users\\Zoë Müller\\.triton\\cache",
        ),
        (
            "kernel-cache",
            W,
            _set("training_env.built_at", "2026-11-20T08:00:01+00:00"),
            "warn",
            "kernels compiled before the env was (re)built at 2026-11-20T08:00:01+00:00",
        ),
        # bitsandbytes 0.50.2: at, below and above the floor
        ("bitsandbytes", W, _env_of("xpu-2.12", bitsandbytes="0.50.2"), "ok", "bitsandbytes 0.50.2 (≥ 0.50.2)"),
        ("bitsandbytes", W, _env_of("xpu-2.12", bitsandbytes="0.50.3"), "ok", "bitsandbytes 0.50.3 (≥ 0.50.2)"),
        (
            "bitsandbytes",
            W,
            _env_of("xpu-2.14", bitsandbytes="0.50.1"),
            "fail",
            "bitsandbytes 0.50.1 < 0.50.2 (minimum for xpu-2.14)",
        ),
        # which backend runs NF4 and Adam8bit: native SYCL from the 2025.1 runtime on, Triton fallback before it
        ("bnb-backends", W, lambda f: None, "ok", "NF4 matmul: native SYCL; NF4 quantize: Triton; Adam8bit: Triton"),
        ("bnb-backends", W, _env_of("xpu-2.9"), "ok", "NF4 matmul: native SYCL; NF4 quantize: Triton; Adam8bit: Triton"),
        (
            "bnb-backends",
            "ci_machine",
            lambda f: None,
            "ok",
            "NF4 matmul: CPU; NF4 quantize: CPU; Adam8bit: CPU (no Intel GPU: the CPU backend)",
        ),
        (
            "bnb-backends",
            L,
            _all(_env_of("xpu-2.12", "linux-64"), _set("level_zero.header", None)),
            "fail",
            "NF4 matmul: native SYCL; NF4 quantize: none; Adam8bit: none",
        ),
        # Edit-2511's zero_cond_t first appears in diffusers 0.37: at, below and above
        ("model-dir", W, lambda f: _pkgs(f, diffusers="0.37.0"), "ok", "Qwen-Image-Edit-2511 (QwenImageEditPlusPipeline, 58 GB)"),
        (
            "model-dir",
            W,
            lambda f: _pkgs(f, diffusers="0.36.9"),
            "fail",
            "Qwen-Image-Edit-2511 (QwenImageEditPlusPipeline, 58 GB); the training env has diffusers 0.36.9",
        ),
        ("model-dir", W, lambda f: _pkgs(f, diffusers="0.37.1"), "ok", "Qwen-Image-Edit-2511 (QwenImageEditPlusPipeline, 58 GB)"),
        ("python", W, _set("training_env.python_version", None), "skip", "unknown"),
        ("python", W, _set("training_env", None), "skip", "no training env"),
        (
            "torch-xpu",
            "ci_machine",
            lambda f: None,
            "ok",
            "torch 2.13.0+cpu (+cpu build); this machine has no Intel GPU, so the built-in default runs on the CPU",
        ),
        (
            "triton",
            W,
            _env_of("xpu-2.10", triton_xpu=None, triton="3.5.0", pytorch_triton_xpu="3.5.0"),
            "fail",
            "pytorch-triton-xpu 3.5.0, triton 3.5.0",
        ),
        (
            "conda",
            W,
            _set("conda", []),
            "ok",
            "none found; not needed: `nox -s train` and `aipc-env train` build their "
            "envs with uv (`aipc-env env` takes the pair's Python from conda, or from --base-python)",
        ),
        (
            "conda",
            W,
            _set(
                "conda",
                [CondaTool(name="conda-lock", path="x", version="3.0"), CondaTool(name="micromamba", path="y", version=None)],
            ),
            "ok",
            "micromamba",
        ),
        ("msvc", W, _set("msvc.installs", [MsvcInstall(path="C:\\VS", has_vc_tools=True)]), "ok", "Visual Studio with C++ tools"),
        ("msvc", W, _set("msvc.installs", [MsvcInstall(path="C:\\BT")]), "fail", "Visual Studio without the C++ workload"),
        ("oneapi-installed", W, lambda f: None, "ok", "2025.3 installed (xpu-2.11 needs 2025.3)"),
        (
            "level-zero",
            L,
            _all(_set("level_zero.header", None), _set("level_zero.searched", [])),
            "warn",
            "level_zero/ze_api.h not found (searched: nothing)",
        ),
        (
            "runtime-mix",
            W,
            lambda f: _pkgs(f, umf="1.0.2", tcmlib="1.2.0"),
            "fail",
            "2 package(s) from another release than xpu-2.11",
        ),
        (
            "pair",
            W,
            _env_of("xpu-2.11", umf=None, tcmlib=None),
            "warn",
            "xpu-2.11: torch 2.11.0 + oneAPI 2025.3 runtime; 2 pinned package(s) missing",
        ),
    ],
)
def test_system_env_and_toolchain_bounds_and_ok_paths(check, fixture, mutate, status, seen):
    finding = _verdict(check, fixture, mutate)
    assert (finding.status.value, finding.seen) == (status, seen)


def test_the_details_that_name_what_to_fix():
    mix = _verdict("runtime-mix", W, lambda f: _pkgs(f, umf="1.0.2", tcmlib="1.2.0"))
    assert mix.details == [
        "tcmlib 1.2.0 (expected 1.4.1; belongs to xpu-2.6, xpu-2.7)",
        "umf 1.0.2 (expected 1.0.3; belongs to xpu-2.10)",
    ]
    pair = _verdict("pair", W, _env_of("xpu-2.11", umf=None, tcmlib=None))
    assert pair.details[-1] == "missing: tcmlib, umf"
    bnb = _verdict("bitsandbytes", W, _env_of("xpu-2.14", bitsandbytes="0.50.1"))
    assert bnb.why == (
        "up to 0.50.1 the Triton 4-bit quantize kernels XPU uses write past the end of absmax when the "
        "block count is not a multiple of 8 (fixed in 0.50.2)"
    )
    fallback = _verdict("bnb-backends", W, _all(_env_of("xpu-2.7"), _set("msvc.installs", [])))
    assert fallback.why == (
        "the Triton path needs the pair's Triton (with its own dependencies), MSVC C++ build "
        "tools (vcvars64), SYCL headers (icpx, ONEAPI_ROOT or the intel-sycl-rt wheel) and the "
        "Level Zero headers (LEVEL_ZERO_V1_SDK_PATH); missing: MSVC C++ build tools"
    )
    no_elf = _verdict("bnb-backends", W, lambda f: _pkgs(f, pyelftools=None))
    assert no_elf.why.endswith("missing: pyelftools (required by triton-xpu 3.7.0)")
