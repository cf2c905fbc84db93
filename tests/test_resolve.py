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
    ok = run_cli("resolve", "--pip-list", str(OUTPUTS / "pip_list_torch211_xpu_win.txt"), "--platform", "win-64")
    assert ok.returncode == 0, ok.stderr
    assert '"pair": "xpu-2.11"' in ok.stdout and '"oneapi": "2025.3"' in ok.stdout
    mixed = run_cli("resolve", "--pip-list", str(OUTPUTS / "pip_freeze_torch210_mixed_linux.txt"),
                    "--platform", "linux-64")
    assert mixed.returncode == 1 and '"status": "mixed"' in mixed.stdout
    missing = run_cli("resolve", "--pip-list", str(tmp_path / "nope.txt"))
    assert missing.returncode == 2 and "Traceback" not in missing.stderr and "nope.txt" in missing.stderr
    tk = run_cli("resolve", "--toolkit", "2025.3")
    assert tk.returncode == 0 and "xpu-2.12" in tk.stdout


def test_direct_url_lines_are_read(tmp_path):
    path = tmp_path / "freeze.txt"
    path.write_text("torch @ file:///C:/wheels/torch-2.8.0%2Bxpu-cp312-cp312-win_amd64.whl\n"
                    "intel-sycl-rt==2025.1.1\n"
                    "bitsandbytes @ https://example.invalid/bitsandbytes-0.50.2-py3-none-win_amd64.whl\n")
    found = read_pip_list(path)
    assert found["torch"] == "2.8.0+xpu" and found["bitsandbytes"] == "0.50.2"
    result = run_cli("resolve", "--pip-list", str(path), "--platform", "win-64")
    assert '"torch": "2.8.0+xpu"' in result.stdout and '"pair": "xpu-2.8"' in result.stdout
    assert "pinned packages not installed" not in result.stdout


def test_two_different_torch_lines_are_a_named_error(tmp_path):
    path = tmp_path / "freeze.txt"
    path.write_text("torch==2.8.0+xpu\nnumpy==2.0\ntorch==2.13.0+xpu\n")
    result = run_cli("resolve", "--pip-list", str(path))
    assert result.returncode == 2 and "torch appears twice with different versions" in result.stderr
    assert "line 1" in result.stderr and "line 3" in result.stderr and "Traceback" not in result.stderr
