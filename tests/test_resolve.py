import json

import pytest

from aipc_env.errors import InputError
from aipc_env.matrix.piplist import parse_pip_list, read_pip_list
from aipc_env.matrix.resolve import resolve_pair
from tests.conftest import OUTPUTS, run_cli


def test_pip_list_table_and_freeze_formats():
    table = read_pip_list(OUTPUTS / "pip_list_torch211_xpu_win.txt")
    assert table["torch"] == "2.11.0+xpu" and table["intel-sycl-rt"] == "2025.3.2"
    freeze = read_pip_list(OUTPUTS / "pip_freeze_torch210_mixed_linux.txt")
    assert freeze["torch"] == "2.10.0+xpu" and "qflux" not in freeze  # an editable -e line has no version
    assert freeze["tokenizers"] == "0.22.1"  # a direct-URL line: the version of its wheel
    assert parse_pip_list('[{"name": "Intel_PTI", "version": "0.15.0"}]') == {"intel-pti": "0.15.0"}


def test_utf16_paste_from_powershell(tmp_path):
    path = tmp_path / "list.txt"
    path.write_bytes("torch 2.12.0+xpu\r\nintel-sycl-rt 2025.3.2\r\n".encode("utf-16"))
    assert read_pip_list(path)["torch"] == "2.12.0+xpu"


def test_empty_list_is_a_clear_error(tmp_path):
    path = tmp_path / "list.txt"
    path.write_text("hello world\n")
    with pytest.raises(InputError, match="no packages found"):
        read_pip_list(path)


def test_exact_pair(matrix):
    res = resolve_pair(read_pip_list(OUTPUTS / "pip_list_torch211_xpu_win.txt"), matrix, "win-64")
    assert (res.status, res.pair, res.mismatches) == ("exact", "xpu-2.11", [])


def test_mixed_runtime_names_the_odd_ones(matrix):
    res = resolve_pair(read_pip_list(OUTPUTS / "pip_freeze_torch210_mixed_linux.txt"), matrix, "linux-64")
    assert res.status == "mixed" and res.pair == "xpu-2.10"
    odd = {m.name: m for m in res.mismatches}
    assert set(odd) == {"intel-sycl-rt", "umf"}
    assert odd["intel-sycl-rt"].belongs_to == ["xpu-2.11", "xpu-2.12"]


def test_runtime_only_is_ambiguous_between_2_11_and_2_12(matrix):
    res = resolve_pair({"intel-sycl-rt": "2025.3.2", "umf": "1.0.3", "intel-pti": "0.16.0"}, matrix, "win-64")
    assert res.status == "ambiguous" and res.candidates == ["xpu-2.11", "xpu-2.12"]
    res = resolve_pair({"intel-sycl-rt": "2025.3.2", "triton-xpu": "3.7.1"}, matrix, "win-64")
    assert res.pair == "xpu-2.12"


def test_platform_specific_runtime(matrix):
    win = resolve_pair({"torch": "2.7.1+xpu", "intel-sycl-rt": "2025.0.5"}, matrix, "win-64")
    lin = resolve_pair({"torch": "2.7.1+xpu", "intel-sycl-rt": "2025.0.5"}, matrix, "linux-64")
    assert win.mismatches == [] and [m.name for m in lin.mismatches] == ["intel-sycl-rt"]


def test_cpu_torch_and_nothing(matrix):
    assert resolve_pair({"torch": "2.13.0+cpu"}, matrix, "linux-64").status == "not-xpu"
    assert resolve_pair({"numpy": "2.0"}, matrix, "linux-64").status == "none"
    assert resolve_pair({"intel-sycl-rt": "2099.1.0"}, matrix, "linux-64").status == "unknown"


def test_torch_version_xpu_contradiction(matrix):
    res = resolve_pair({"torch": "2.8.0+xpu"}, matrix, "linux-64", torch_version_xpu="20260100")
    assert res.status == "mixed" and res.mismatches[0].name == "torch.version.xpu"


def test_resolve_command(tmp_path):
    ok = run_cli("resolve", "--json", "--pip-list", str(OUTPUTS / "pip_list_torch211_xpu_win.txt"), "--platform", "win-64")
    assert ok.returncode == 0, ok.stderr
    assert '"pair": "xpu-2.11"' in ok.stdout and '"oneapi": "2025.3"' in ok.stdout
    mixed = run_cli(
        "resolve", "--json", "--pip-list", str(OUTPUTS / "pip_freeze_torch210_mixed_linux.txt"), "--platform", "linux-64"
    )
    assert mixed.returncode == 1 and '"status": "mixed"' in mixed.stdout
    missing = run_cli("resolve", "--pip-list", str(tmp_path / "nope.txt"))
    assert missing.returncode == 2 and "Traceback" not in missing.stderr and "nope.txt" in missing.stderr
    tk = run_cli("resolve", "--toolkit", "2025.3")
    assert tk.returncode == 0 and "xpu-2.12" in tk.stdout


def test_direct_url_lines_are_read(tmp_path):
    path = tmp_path / "freeze.txt"
    path.write_text(
        "torch @ file:///C:/wheels/torch-2.8.0%2Bxpu-cp312-cp312-win_amd64.whl\n"
        "intel-sycl-rt==2025.1.1\n"
        "bitsandbytes @ https://example.invalid/bitsandbytes-0.50.2-py3-none-win_amd64.whl\n"
    )
    found = read_pip_list(path)
    assert found["torch"] == "2.8.0+xpu" and found["bitsandbytes"] == "0.50.2"
    result = run_cli("resolve", "--json", "--pip-list", str(path), "--platform", "win-64")
    assert '"torch": "2.8.0+xpu"' in result.stdout and '"pair": "xpu-2.8"' in result.stdout
    assert "pinned packages not installed" not in result.stdout


def test_two_different_torch_lines_are_a_named_error(tmp_path):
    path = tmp_path / "freeze.txt"
    path.write_text("torch==2.8.0+xpu\nnumpy==2.0\ntorch==2.13.0+xpu\n")
    result = run_cli("resolve", "--pip-list", str(path))
    assert result.returncode == 2 and "torch appears twice with different versions" in result.stderr
    assert "line 1" in result.stderr and "line 3" in result.stderr and "Traceback" not in result.stderr


# Whole verdicts as literals (reviewed by hand against environments/matrix.yaml): every field a user or the doctor
# reads, so a dropped field, a swapped flag or a lost evidence line fails here.


def _verdict(installed, matrix, platform, tv=None):
    res = resolve_pair(installed, matrix, platform, tv)
    return (
        res.status,
        res.pair,
        res.candidates,
        res.torch,
        res.torch_is_xpu,
        len(res.matched),
        len(res.missing),
        [(m.name, m.installed, m.expected, m.belongs_to) for m in res.mismatches],
        res.evidence,
        res.summary,
    )


WIN_211_RUNTIME = {
    "intel-cmplr-lib-rt": "2025.3.2",
    "intel-cmplr-lib-ur": "2025.3.2",
    "intel-cmplr-lic-rt": "2025.3.2",
    "intel-sycl-rt": "2025.3.2",
    "onemkl-license": "2025.3.1",
    "onemkl-sycl-blas": "2025.3.1",
    "onemkl-sycl-dft": "2025.3.1",
    "onemkl-sycl-lapack": "2025.3.1",
    "onemkl-sycl-rng": "2025.3.1",
    "onemkl-sycl-sparse": "2025.3.1",
    "dpcpp-cpp-rt": "2025.3.2",
    "intel-opencl-rt": "2025.3.2",
    "intel-openmp": "2025.3.2",
    "mkl": "2025.3.1",
    "tbb": "2022.3.1",
    "tcmlib": "1.4.1",
    "umf": "1.0.3",
    "intel-pti": "0.16.0",
    "triton-xpu": "3.7.0",
}


@pytest.mark.parametrize(
    "installed, platform, tv, expected",
    [
        (
            {**WIN_211_RUNTIME, "torch": "2.11.0+xpu"},
            "win-64",
            None,
            (
                "exact",
                "xpu-2.11",
                ["xpu-2.11"],
                "2.11.0+xpu",
                True,
                19,
                0,
                [],
                ["torch 2.11.0+xpu belongs to xpu-2.11"],
                "xpu-2.11: every runtime pin matches",
            ),
        ),
        (
            {**WIN_211_RUNTIME, "torch": "2.11.0+cpu"},
            "win-64",
            None,
            (
                "not-xpu",
                "xpu-2.11",
                ["xpu-2.11"],
                "2.11.0+cpu",
                False,
                19,
                0,
                [],
                ["torch 2.11.0+cpu belongs to xpu-2.11", "torch 2.11.0+cpu has no '+xpu' local version"],
                "torch 2.11.0+cpu is not an XPU build",
            ),
        ),
        (
            {"torch": "2.13.0+cpu"},
            "linux-64",
            None,
            (
                "not-xpu",
                None,
                [],
                "2.13.0+cpu",
                False,
                0,
                0,
                [],
                ["torch 2.13.0+cpu belongs to xpu-2.13", "torch 2.13.0+cpu has no '+xpu' local version"],
                "torch 2.13.0+cpu is not an XPU build",
            ),
        ),
        (
            {"torch": "2.13.0+cpu", "intel-sycl-rt": "2026.0.0", "tcmlib": "1.5.0"},
            "linux-64",
            None,
            (
                "partial",
                "xpu-2.13",
                ["xpu-2.13"],
                "2.13.0+cpu",
                False,
                2,
                21,
                [],
                ["torch 2.13.0+cpu belongs to xpu-2.13", "torch 2.13.0+cpu has no '+xpu' local version"],
                "xpu-2.13: matches, but 21 pinned package(s) are not installed",
            ),
        ),
        (
            {"torch": "banana", "tcmlib": "1.5.0"},
            "win-64",
            None,
            (
                "ambiguous",
                None,
                ["xpu-2.13", "xpu-2.14"],
                "banana",
                False,
                0,
                0,
                [],
                ["torch version 'banana' is not a PEP 440 version"],
                "runtime matches several pairs: xpu-2.13, xpu-2.14 (torch not installed)",
            ),
        ),
        (
            {"tcmlib": "1.4.1", "onemkl-license": "2099.1.0", "intel-pti": "0.15.0"},
            "win-64",
            None,
            (
                "mixed",
                "xpu-2.10",
                ["xpu-2.10"],
                None,
                False,
                2,
                16,
                [("onemkl-license", "2099.1.0", ["2025.3.0"], [])],
                ["2 runtime fingerprint(s) match xpu-2.10"],
                "xpu-2.10: 1 package(s) differ from its pins: onemkl-license 2099.1.0 (expected 2025.3.0)",
            ),
        ),
        (
            {"torch": "2.8.0+xpu"},
            "win-64",
            "20250101",
            (
                "partial",
                "xpu-2.8",
                ["xpu-2.8"],
                "2.8.0+xpu",
                True,
                0,
                18,
                [],
                ["torch 2.8.0+xpu belongs to xpu-2.8"],
                "xpu-2.8: matches, but 18 pinned package(s) are not installed",
            ),
        ),
        (
            {"torch": "2.8.0+xpu"},
            "win-64",
            "19990101",
            (
                "mixed",
                "xpu-2.8",
                ["xpu-2.8"],
                "2.8.0+xpu",
                True,
                0,
                18,
                [("torch.version.xpu", "19990101", ["20250101"], [])],
                ["torch 2.8.0+xpu belongs to xpu-2.8", "torch.version.xpu is 19990101, xpu-2.8 was built with 20250101"],
                "xpu-2.8: 1 package(s) differ from its pins: torch.version.xpu 19990101 (expected 20250101)",
            ),
        ),
        (
            {"torch": "2.13.0+xpu"},
            "linux-64",
            "20990101",  # the row records no torch.version.xpu: nothing to compare
            (
                "partial",
                "xpu-2.13",
                ["xpu-2.13"],
                "2.13.0+xpu",
                True,
                0,
                23,
                [],
                ["torch 2.13.0+xpu belongs to xpu-2.13"],
                "xpu-2.13: matches, but 23 pinned package(s) are not installed",
            ),
        ),
        (
            {"torch": "2.99.0+xpu", "tcmlib": "1.4.1"},
            "win-64",
            None,  # an XPU torch no row lists
            (
                "ambiguous",
                None,
                ["xpu-2.10", "xpu-2.11", "xpu-2.12"],
                "2.99.0+xpu",
                True,
                0,
                0,
                [],
                [],
                "runtime matches several pairs: xpu-2.10, xpu-2.11, xpu-2.12 (torch not installed)",
            ),
        ),
        # contradictions counted, not flagged: 2.10 has three (onemkl-license, umf, mkl) and one match, 2.11 and 2.12
        # two each and two matches (tcmlib, their onemkl-license)
        (
            {"tcmlib": "1.4.1", "onemkl-license": "2025.3.1", "umf": "9.9", "mkl": "9.9"},
            "win-64",
            None,
            (
                "ambiguous",
                None,
                ["xpu-2.11", "xpu-2.12"],
                None,
                False,
                0,
                0,
                [],
                [],
                "runtime matches several pairs: xpu-2.11, xpu-2.12 (torch not installed)",
            ),
        ),
    ],
)
def test_whole_verdicts(matrix, installed, platform, tv, expected):
    assert _verdict(installed, matrix, platform, tv) == expected


def test_resolve_report_fields(matrix):
    from aipc_env.matrix.resolve import resolve_report

    report = resolve_report(
        {"torch": "2.13.0+xpu", "triton-xpu": "3.7.2", "pytorch-triton-xpu": "3.7.2", "numpy": "2.1"}, matrix, "linux-64"
    )
    assert (report.platform, report.oneapi, report.certainty) == ("linux-64", "2026.0", "confirmed")
    assert report.triton_packages == {"pytorch-triton-xpu": "3.7.2", "triton-xpu": "3.7.2"}
    assert report.summary == report.resolution.summary and report.resolution.pair == "xpu-2.13"
    assert not report.consistent  # two Triton packages
    single = resolve_report({"torch": "2.13.0+xpu", "triton-xpu": "3.7.2"}, matrix, "linux-64")
    assert single.consistent and single.triton_packages == {"triton-xpu": "3.7.2"}
    none = resolve_report({"numpy": "2.1"}, matrix, "linux-64")
    assert (none.resolution.status, none.oneapi, none.certainty, none.triton_packages) == ("none", None, None, {})
    assert not none.consistent
    built = resolve_report({"torch": "2.8.0+xpu"}, matrix, "win-64", torch_version_xpu="19990101")
    assert [m.name for m in built.resolution.mismatches] == ["torch.version.xpu"]


# -- the platform a list was made on (issue 33) ------------------------------------------------------------------

WIN_27_LIST = """Package            Version
------------------ ----------
accelerate         1.15.0
bitsandbytes       0.50.2
intel-cmplr-lib-rt 2025.0.5
intel-cmplr-lib-ur 2025.0.5
intel-cmplr-lic-rt 2025.0.5
intel-pti          0.10.1
intel-sycl-rt      2025.0.5
pytorch-triton-xpu 3.3.0
setuptools         80.9.0
tcmlib             1.2.0
torch              2.7.0+xpu
torchvision        0.22.0+xpu
umf                0.9.1
"""


def test_a_windows_2_7_list_resolves_on_linux_by_the_platform_it_shows(tmp_path):
    path = tmp_path / "pip list.txt"
    path.write_text(WIN_27_LIST, encoding="utf-16")  # what PowerShell 5.1's `pip list > file` writes
    result = run_cli("resolve", "--pip-list", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[0] == "✓ xpu-2.7: every runtime pin matches"
    assert "platform: win-64 (the list shows win-64: intel-cmplr-lib-rt 2025.0.5 (xpu-2.7's win-64 pin)" in result.stdout
    report = json.loads(run_cli("resolve", "--json", "--pip-list", str(path)).stdout)
    assert (report["platform"], report["resolution"]["status"], report["fix"]) == ("win-64", "exact", None)


def test_a_mixed_list_names_each_expected_version_and_the_fix(tmp_path):
    path = tmp_path / "list.txt"
    path.write_text(WIN_27_LIST.replace("umf                0.9.1", "umf                0.10.0"))
    result = run_cli("resolve", "--pip-list", str(path))
    assert result.returncode == 1
    assert result.stdout.splitlines()[:2] == [
        "✗ xpu-2.7: 1 package(s) differ from its pins: umf 0.10.0 (expected 0.9.1)",
        "    umf 0.10.0: xpu-2.7 pins 0.9.1; 0.10.0 belongs to xpu-2.8",
    ]
    assert (
        '    fix: in the training env: pip install "umf==0.9.1" (or rebuild the env from the pair\'s lock: aipc-env '
        "env --pair xpu-2.7)"
    ) in result.stdout


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("torch @ file:///C:/w/torch-2.8.0%2Bxpu-cp312-cp312-win_amd64.whl\n", ("win-64", "a win_amd64 wheel")),
        ("torch @ https://x/torch-2.8.0%2Bxpu-cp312-cp312-linux_x86_64.whl\n", ("linux-64", "a linux wheel")),
        ("numpy 2.0 C:\\Users\\Zoë\\env\\Lib\\site-packages pip\n", ("win-64", "Windows paths")),
        ("numpy 2.0 /home/z/env/lib/python3.12/site-packages pip\n", ("linux-64", "Linux paths")),
        ("pywin32==311\n", ("win-64", "pywin32")),
        ("oneccl==2021.17.2\n", ("linux-64", "oneccl")),
        ("numpy==2.0\n", (None, "the list does not show its platform")),
        ("numpy==2.0 \n", (None, "the list does not show its platform")),
    ],
)
def test_what_a_list_says_of_its_platform(matrix, text, found):
    from aipc_env.matrix.piplist import platform_of_list

    platform, why = platform_of_list(text, parse_pip_list(text), matrix)
    assert platform == found[0] and found[1] in why


def test_a_list_showing_both_platforms_says_so_and_this_machines_is_assumed(tmp_path, matrix):
    from aipc_env.matrix.piplist import platform_of_list

    text = "pywin32==311\noneccl==2021.17.2\n"
    assert platform_of_list(text, parse_pip_list(text), matrix) == (
        None,
        "the list shows both platforms (win-64: pywin32; linux-64: oneccl)",
    )
    path = tmp_path / "l.txt"
    path.write_text("torch==2.12.0+xpu\n" + text)
    out = run_cli("resolve", "--json", "--pip-list", str(path)).stdout
    assert json.loads(out)["platform_source"].startswith("assumed: this machine's (the list shows both platforms")
