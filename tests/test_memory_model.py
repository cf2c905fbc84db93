"""The memory model: the shipped coefficients are the committed benchmark's, the estimate behaves as memory does
(more tokens, controls, batch or rank cost more; checkpointing saves), its weight part agrees with the runbook's
NF4 transformer size, and the benchmark reader returns coefficients or a named error for any input."""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aipc_env.core.formats import dump_json
from aipc_env.errors import InputError
from aipc_env.facts.memory import GIB
from aipc_env.train import memory_model
from aipc_env.train.memory_model import (
    COEFFICIENTS,
    MODEL_BLOCKS,
    MemoryCoefficients,
    estimate,
    fit_coefficients,
    load_coefficients,
)
from tests.conftest import ROOT

BENCHMARK = ROOT / memory_model.BENCHMARK_FILE
MP = 1024 * 1024


def bench() -> dict:
    return json.loads(BENCHMARK.read_text(encoding="utf-8"))


def test_the_shipped_coefficients_are_the_committed_benchmarks():
    fitted = fit_coefficients(bench())
    assert COEFFICIENTS.read_text(encoding="utf-8") == dump_json(fitted), (
        "src/aipc_env/train/memory-coefficients.json is stale: python benchmarks/memory_model.py --refit"
    )
    assert load_coefficients() == fitted


def test_the_fit_reproduces_every_measured_point():
    """The coefficients are per block and fixed parts at two lengths: at 1 and 2 blocks they give back what was
    measured (the arithmetic of the extrapolation, on the recorded numbers)."""
    co = fit_coefficients(bench())
    for point in bench()["points"].values():
        n, tokens = point["blocks"], point["tokens"]
        transient = co.fixed_transient_bytes + co.fixed_transient_per_token * tokens
        transient += n * (co.block_transient_bytes + co.block_transient_per_token * tokens)
        assert transient == pytest.approx(point["transient_bytes"], rel=1e-9, abs=1)
        weights = co.fixed_weight_bytes + n * co.block_weight_bytes
        assert weights == point["frozen_weight_bytes"] + point["quant_state_bytes"]


def test_the_weights_agree_with_the_runbooks_nf4_transformer():
    """Runbook §2: the NF4 transformer is ~10 GB on disk and "needs ~10 GB of GPU allocation"; the measured NF4
    blocks extrapolated to 60 land there (an independent check of the per-block extrapolation)."""
    est = estimate([384, 672], control_pixels=MP)
    assert 9 * GIB <= est.weights_bytes <= 12 * GIB
    assert est.lora_bytes < 0.5 * GIB  # rank 16 on 4 projections of 60 blocks: ~24 M fp32 weights + 8-bit state


def test_more_work_costs_more_and_checkpointing_saves():
    base = estimate([384, 672], control_pixels=MP)
    assert estimate([512, 768], control_pixels=MP).total_bytes > base.total_bytes
    assert estimate([384, 672], control_pixels=512 * 512).total_bytes < base.total_bytes
    assert estimate([384, 672], control_pixels=MP, controls=2).total_bytes > base.total_bytes
    assert estimate([384, 672], control_pixels=MP, batch=2).total_bytes > base.total_bytes
    assert estimate([384, 672], control_pixels=MP, rank=32).lora_bytes == pytest.approx(2 * base.lora_bytes, abs=1)
    off = estimate([384, 672], control_pixels=MP, checkpointing=False)
    assert off.total_bytes > base.total_bytes and off.inferred
    assert base.tokens == 24 * 42 + 4096 + memory_model.text_tokens(1)
    assert base.source == memory_model.BENCHMARK_FILE and base.measured_at == bench()["machine"]["measured_at"]


def test_the_measured_lengths_are_the_recommended_ones():
    """The benchmark measured the default target with a 1 MP and with the reduced control, and the text assumed."""
    tokens = sorted({p["tokens"] for p in bench()["points"].values()})
    text = memory_model.text_tokens(1)
    assert tokens == [24 * 42 + 32 * 32 + text, 24 * 42 + 64 * 64 + text]
    assert {p["blocks"] for p in bench()["points"].values()} == {1, 2}
    assert MODEL_BLOCKS == 60


def test_a_bad_argument_is_refused():
    for kwargs in ({"batch": 0}, {"rank": 0}, {"controls": -1}, {"control_pixels": -1}):
        with pytest.raises(ValueError):
            estimate([384, 672], **{"control_pixels": MP, **kwargs})


@pytest.mark.parametrize(
    "breakage",
    [
        lambda b: b["points"].pop("full-2"),
        lambda b: b["points"]["full-2"].update(tokens=b["points"]["reduced-2"]["tokens"]),
        lambda b: b["points"]["full-1"].update(transient_bytes=-1),
        lambda b: b.update(benchmark="engine"),
        lambda b: b["points"]["full-1"].pop("blocks"),
    ],
)
def test_a_broken_benchmark_is_a_named_error(breakage):
    raw = copy.deepcopy(bench())
    breakage(raw)
    with pytest.raises(InputError) as err:
        fit_coefficients(raw)
    assert str(err.value.path) == str(memory_model.BENCHMARK_FILE)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_any_json_is_coefficients_or_a_named_error(raw):
    try:
        assert isinstance(fit_coefficients(raw), MemoryCoefficients)
    except InputError:
        pass


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(["full-1", "full-2", "reduced-1", "reduced-2"]),
    st.sampled_from(["tokens", "transient_bytes", "frozen_weight_bytes", "blocks", "step_seconds"]),
    st.one_of(st.integers(-(2**70), 2**70), st.floats(allow_nan=True), st.text(max_size=4), st.none()),
)
def test_a_mutated_benchmark_is_coefficients_or_a_named_error(name, key, value):
    raw = copy.deepcopy(bench())
    raw["points"][name][key] = value
    try:
        assert isinstance(fit_coefficients(raw), MemoryCoefficients)
    except InputError:
        pass


def test_a_tampered_coefficients_file_is_a_named_error(tmp_path):
    bad = tmp_path / "memory-coefficients.json"
    bad.write_text(COEFFICIENTS.read_text(encoding="utf-8").replace('"schema_version": 1', '"schema_version": 9'))
    with pytest.raises(InputError, match="schema_version"):
        load_coefficients(bad)
    bad.write_text('{"schema_version": 1, "source": 3}')
    with pytest.raises(InputError, match="source") as err:
        load_coefficients(bad)
    assert err.value.path == str(bad)


def test_the_budget_is_the_share_less_the_margin():
    from aipc_env.facts.memory import GPU_MARGIN, gpu_budget_bytes

    assert 0 < GPU_MARGIN < 0.5
    assert gpu_budget_bytes(32, 75) == int(32 * GIB * 0.75 * (1 - GPU_MARGIN)) < 32 * GIB * 0.75
    assert gpu_budget_bytes(32, 100, 0) == 32 * GIB
    for share, margin in ((0, 0.1), (101, 0.1), (57, -0.01), (57, 1.0)):
        with pytest.raises(ValueError):
            gpu_budget_bytes(32, share, margin)
