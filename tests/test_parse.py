"""Parsers against recorded tool outputs (xpu-stack.md §3)."""

import json

import pytest

from aipc_env.facts.memory import parse_meminfo
from aipc_env.facts.parse import (
    model_variant,
    oneapi_version_from_path,
    parse_cim_gpus,
    parse_compiler_version,
    parse_sycl_ls,
    parse_vswhere,
)
from tests.conftest import OUTPUTS


def test_icpx_installed_dir_wins_over_build_number():
    release, build = parse_compiler_version((OUTPUTS / "icpx_version_linux.txt").read_text())
    assert (release, build) == ("2025.0", "2025.0.4")


def test_windows_icx_with_crlf_and_spaces():
    release, build = parse_compiler_version((OUTPUTS / "icx_version_windows.txt").read_text())
    assert release == "2025.3"
    assert build is None  # the Windows banner has no "Compiler X.Y.Z" first line


def test_release_from_paths():
    assert oneapi_version_from_path(r"C:\Program Files (x86)\Intel\oneAPI\compiler\2025.3\bin") == "2025.3"
    assert oneapi_version_from_path("/opt/intel/oneapi/2025.1/bin") == "2025.1"
    assert oneapi_version_from_path("/opt/intel/oneapi/compiler/latest/bin") is None


def test_sycl_ls_current_and_old_formats():
    cur = parse_sycl_ls((OUTPUTS / "sycl_ls_current.txt").read_text())
    assert [(d.backend, d.kind, d.index) for d in cur] == [("level_zero", "gpu", 0), ("opencl", "cpu", 1), ("opencl", "gpu", 2)]
    assert cur[0].name == "Intel(R) Arc(TM) Graphics" and cur[0].version == "12.71.4" and cur[0].driver == "1.6.34303"
    assert cur[2].name == "Intel(R) Arc(TM) Graphics" and cur[2].driver == "25.27.34303"
    win = parse_sycl_ls((OUTPUTS / "sycl_ls_windows_u.txt").read_text())
    assert win[1].driver == "32.0.101.6874" and win[0].name == "Intel(R) Graphics"
    old = parse_sycl_ls((OUTPUTS / "sycl_ls_old.txt").read_text())
    assert old[0].backend == "level_zero" and old[0].name == "Intel(R) Arc(TM) A770 Graphics"


def test_cim_single_object_and_list():
    one = {
        "Name": "Intel(R) Arc(TM) Graphics",
        "DriverVersion": "32.0.101.6874",
        "PNPDeviceID": "PCI\\VEN_8086&DEV_7D55&SUBSYS_0C2D1028&REV_08\\3&11583659&0&10",
        "Status": "OK",
    }
    gpus = parse_cim_gpus(json.dumps(one))
    assert gpus[0].vendor_id == "8086" and gpus[0].device_id == "7d55"
    two = parse_cim_gpus(json.dumps([one, {"Name": "Microsoft Basic Display Adapter", "PNPDeviceID": "ROOT\\X"}]))
    assert len(two) == 2 and two[1].vendor_id is None


def test_vswhere_marks_installs_without_cpp_tools():
    rows = [
        {"installationPath": r"C:\VS\Community", "installationVersion": "17.14", "displayName": "VS 2022"},
        {"installationPath": r"C:\VS\BuildTools", "installationVersion": "17.10", "displayName": "Build Tools"},
    ]
    installs = parse_vswhere(json.dumps(rows), with_vc_tools={r"C:\VS\BuildTools"})
    assert [i.has_vc_tools for i in installs] == [False, True]
    assert installs[1].vcvars64.endswith(r"VC\Auxiliary\Build\vcvars64.bat")


def test_meminfo_and_model_variant():
    assert parse_meminfo("MemTotal:       32768000 kB\nMemAvailable:  1024 kB\n") == (32768000 * 1024, 1024 * 1024)
    assert model_variant({"_class_name": "QwenImageEditPipeline"}, {})[1] == "edit"
    assert model_variant({"_class_name": "QwenImageEditPlusPipeline"}, {"zero_cond_t": True})[1] == "edit-2511"
    assert model_variant({"_class_name": "QwenImageEditPlusPipeline"}, {"zero_cond_t": False})[1] == "edit-2509"
    assert model_variant({"_class_name": "FluxPipeline"}, None)[1] == "unknown"


@pytest.mark.parametrize(
    "vendor, name, intel",
    [
        ("8086", "Display adapter", True),
        ("0x8086", "Display adapter", True),
        (None, "Intel(R) Arc(TM) Graphics", True),
        (None, "INTEL GPU 7d55", True),
        ("10de", "NVIDIA GeForce RTX 4090", False),
        ("80860", "GPU", False),
        ("808", "GPU", False),
        (None, "Microsoft Basic Display Adapter", False),
    ],
)
def test_one_rule_tells_an_intel_gpu(vendor, name, intel):
    """The one Intel-GPU rule the doctor's GPU checks, the fleet report and recommend all use."""
    from aipc_env.facts.model import GpuInfo

    assert GpuInfo(name=name, vendor_id=vendor).is_intel is intel


@pytest.mark.parametrize(
    "gpus, sycl, intel",
    [
        ([], None, False),
        ([("10de", "NVIDIA GeForce RTX 4090")], [("gpu", "NVIDIA CUDA device")], False),
        ([("8086", "Display adapter")], None, True),
        ([], [("gpu", "Intel(R) Arc(TM) B580 Graphics")], True),  # sycl-ls alone is enough
        ([], [("cpu", "Intel(R) Core(TM) Ultra 7 155H")], False),  # an Intel CPU is no GPU
    ],
)
def test_facts_tell_an_intel_gpu_from_the_listing_or_sycl(gpus, sycl, intel):
    """The doctor's answer (Facts.has_intel_gpu) is the same rule over both listings."""
    from aipc_env.facts.model import Facts, GpuInfo, OsInfo, SyclDevice

    facts = Facts(
        collected_at="2026-01-01T00:00:00Z",
        os=OsInfo(system="Linux"),
        gpus=[GpuInfo(name=name, vendor_id=vendor) for vendor, name in gpus],
        sycl_devices=None if sycl is None else [SyclDevice(backend="level_zero", kind=k, index=0, name=n) for k, n in sycl],
    )
    assert facts.has_intel_gpu is intel
    assert len(facts.intel_gpus) == int(intel)
