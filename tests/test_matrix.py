from pathlib import Path

import pytest
import yaml
from packaging.version import Version

from aipc_env.errors import InputError
from aipc_env.matrix import load_matrix
from tests.conftest import ROOT, run_cli


def test_every_release_of_the_stack_is_a_row(matrix):
    torches = {v for p in matrix.pairs for v in p.torch}
    for v in ["2.6.0", "2.7.0", "2.7.1", "2.8.0", "2.9.0", "2.9.1", "2.10.0", "2.11.0", "2.12.0", "2.13.0", "2.14.0", "2.14.1"]:
        assert v in torches
    assert all(p.source and p.certainty for p in matrix.pairs)
    assert matrix.get("xpu-2.14").certainty == "provisional"


def test_platform_markers_select_pins(matrix):
    p27 = matrix.get("xpu-2.7")
    win = {p.key: p.version for p in p27.pins_for("win-64")}
    lin = {p.key: p.version for p in p27.pins_for("linux-64")}
    assert win["intel-sycl-rt"] == "2025.0.5" and lin["intel-sycl-rt"] == "2025.0.4"
    p210 = matrix.get("xpu-2.10")
    assert "oneccl" in {p.key for p in p210.pins_for("linux-64")}
    assert "oneccl" not in {p.key for p in p210.pins_for("win-64")}


def test_bitsandbytes_is_at_least_0_50_2_and_native_only_on_a_2025_1_runtime_or_newer(matrix):
    """0.50.2 fixes the Triton 4-bit quantize kernels writing past absmax (PR #2043); the native XPU library is built
    with DPC++ 2025.1 and does not load against the 2025.0 runtime of xpu-2.6 and xpu-2.7."""
    assert {p.bitsandbytes_min for p in matrix.pairs} == {"0.50.2"}
    sycl = {
        p.id: next(pin.version for pin in p.pins_for("linux-64") if pin.key == "intel-sycl-rt")
        for p in matrix.pairs
        if p.runtime_pins
    }
    assert {p.id for p in matrix.pairs if not p.bitsandbytes_native} == {"xpu-2.6", "xpu-2.7"}
    assert all(Version(v) >= Version("2025.1") for pid, v in sycl.items() if matrix.get(pid).bitsandbytes_native)


def test_toolkit_and_newest(matrix):
    assert [p.id for p in matrix.for_toolkit("2025.3")] == ["xpu-2.12", "xpu-2.11", "xpu-2.10"]
    assert matrix.newest("win-64").id == "xpu-2.13"  # 2.14 is provisional
    assert not matrix.get("xpu-2.6").compiles_kernels_on("win-64")


def _broken(tmp_path: Path, mutate) -> Path:
    raw = yaml.safe_load((ROOT / "environments" / "matrix.yaml").read_text())
    mutate(raw)
    path = tmp_path / "matrix.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_malformed_row_names_file_row_and_key(tmp_path):
    path = _broken(tmp_path, lambda raw: raw["pairs"][3].__setitem__("bitsandbytes_min", "not-a-version"))
    with pytest.raises(InputError) as exc:
        load_matrix(path)
    text = exc.value.render()
    assert str(path) in text and "pairs[3]" in text and "xpu-2.9" in text and "bitsandbytes_min" in text


def test_unknown_key_and_missing_version(tmp_path):
    path = _broken(tmp_path, lambda raw: raw["pairs"][0].__setitem__("tritn", "x"))
    with pytest.raises(InputError, match=r"pairs\[0\]\.tritn: unknown key"):
        load_matrix(path)
    path = _broken(tmp_path, lambda raw: raw.pop("schema_version"))
    with pytest.raises(InputError, match="missing 'schema_version'"):
        load_matrix(path)
    bad = tmp_path / "bad.yaml"
    bad.write_text("pairs: [\n")
    with pytest.raises(InputError, match="not valid YAML at line"):
        load_matrix(bad)


def test_matrix_table_fits_80_columns():
    result = run_cli("matrix", env={"COLUMNS": "80"})
    assert result.returncode == 0
    assert max(len(line) for line in result.stdout.splitlines()) <= 80
    assert "xpu-2.14*" in result.stdout and "pytorch-triton-xpu" in result.stdout
