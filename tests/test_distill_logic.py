"""The distill decisions that need no model, in-process, as literals: the grid (model sample_sigmas, config,
default), the step-count rule of G2, G3's mode and judgement at their bounds, the train stage's outcome bounds,
per-stage input hashes and staleness, the report's current-verdict rule, the ComfyUI export's key layout and
refusals, and `distill init --profile`."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
import yaml

from aipc_env.distill.config import default_distill_config, load_distill_config
from aipc_env.distill.grid import Grid, check_sigmas, model_sample_sigmas, resolve_grid
from aipc_env.errors import InputError
from tests.conftest import run_cli

TURBO_LIKE = [1.0, 0.977, 0.954, 0.92, 0.87, 0.8, 0.7, 0.45]
"""A non-uniform 8-step grid shaped like the real Turbo's: first student pair delta 0.046, last 0.70."""


def _model(folder: Path, sample_sigmas=None, *, tiny: bool = False) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    index = {"_class_name": "QwenImage21Pipeline"}
    if sample_sigmas is not None:
        index["sample_sigmas"] = sample_sigmas
    (folder / "model_index.json").write_text(json.dumps(index))
    if tiny:
        (folder / "aipc_tiny.json").write_text("{}")
    return folder


def _cfg(tmp_path: Path, **changes):
    data = default_distill_config(tmp_path / "run")
    data["model"] = str(_model(tmp_path / "model", TURBO_LIKE))
    for key, value in changes.items():
        section, _, name = key.rpartition("__")
        (data[section] if section else data)[name] = value
    path = tmp_path / "distill.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_distill_config(path)


# --- the grid ---------------------------------------------------------------------------------------------------


def test_the_teacher_grid_is_the_models_sample_sigmas(tmp_path):
    grid = resolve_grid(None, 2, _model(tmp_path / "m", TURBO_LIKE))
    assert grid == Grid(teacher=TURBO_LIKE, student=[1.0, 0.954, 0.87, 0.7], stride=2, source="model sample_sigmas")
    deltas = [a - b for a, b in zip(grid.student, grid.student[1:] + [0.0])]  # each student step's delta-sigma
    assert [round(d, 3) for d in deltas] == [0.046, 0.084, 0.17, 0.7]  # the recorded first and last


def test_a_config_grid_wins_and_no_grid_means_the_pipeline_default(tmp_path):
    model = _model(tmp_path / "m", TURBO_LIKE)
    assert resolve_grid([1.0, 0.5], 2, model) == Grid(teacher=[1.0, 0.5], student=[1.0], stride=2, source="config")
    plain = resolve_grid(None, 2, _model(tmp_path / "plain"))
    assert plain.source == "pipeline default linspace"
    assert plain.teacher == [1.0, 0.875, 0.75, 0.625, 0.5, 0.375, 0.25, 0.125]


@pytest.mark.parametrize(
    "sigmas, problem",
    [
        ([1.0], "at least 2"),
        ([1.0, 0.5, 0.25], "multiple of student_stride 2"),
        ([1.0, 0.5, 0.5, 0.25], "fall strictly"),
        ([1.0, 0.6, 0.3, 0.0], "within (0, 1]"),  # the terminal 0 is the scheduler's
        ([1.01, 0.6, 0.3, 0.1], "within (0, 1]"),
        ([1.0, "0.6", 0.3, 0.1], "numbers"),
        ([1.0, True, 0.3, 0.1], "numbers"),
    ],
)
def test_unusable_grids_are_named(sigmas, problem):
    assert problem in check_sigmas(sigmas, 2)


def test_bounds_of_a_grid():
    assert check_sigmas([1.0, 0.5], 2) is None  # 2 entries: the least, and a multiple of the stride
    assert check_sigmas([1.0, 1e-9], 2) is None  # just above 0
    assert check_sigmas([1.0, 0.5, 0.25, 0.1, 0.05, 0.01], 3) is None


def test_a_model_grid_that_cannot_be_used_names_model_index_json(tmp_path):
    model = _model(tmp_path / "m", [1.0, 0.8, 0.6])
    with pytest.raises(InputError, match="multiple of student_stride") as err:
        resolve_grid(None, 2, model)
    assert err.value.key == "sample_sigmas" and "model_index.json" in str(err.value.path)
    (model / "model_index.json").write_text('{"sample_sigmas": "fast"}')
    with pytest.raises(InputError, match="str, not a list"):
        model_sample_sigmas(model)
    (model / "model_index.json").write_text("{not json")
    with pytest.raises(InputError, match="not valid JSON"):
        model_sample_sigmas(model)
    (model / "model_index.json").write_text(" " * (1 << 20) + "{}")
    with pytest.raises(InputError, match="larger than 1 MiB"):
        model_sample_sigmas(model)
    (model / "model_index.json").write_text(" " * ((1 << 20) - 2) + "{}")  # at the bound: read
    assert model_sample_sigmas(model) is None


# --- G2's step count --------------------------------------------------------------------------------------------


def test_an_ignored_num_inference_steps_is_the_expected_behaviour_not_a_fault():
    from aipc_env.workers.distill.lessons import check_step_count

    assert (
        check_step_count(4, 8, passed=TURBO_LIKE, sample_sigmas=None)
        == "num_inference_steps=4 ignored; sigmas= used verbatim (8 steps)"
    )
    assert (
        check_step_count(4, 8, passed=None, sample_sigmas=TURBO_LIKE)
        == "num_inference_steps=4 ignored; the model's sample_sigmas (8 steps, model_index.json) used verbatim"
    )
    assert (
        check_step_count(4, 4, passed=None, sample_sigmas=None) == "num_inference_steps=4 honoured (no sample_sigmas configured)"
    )


@pytest.mark.parametrize("ran", [7, 9])
def test_a_step_count_off_by_one_either_way_is_a_grid_fault(ran):
    from aipc_env.distill.lesson_errors import GridNotHonoured
    from aipc_env.workers.distill.lessons import check_step_count

    with pytest.raises(GridNotHonoured, match=f"ran {ran} steps, expected 8"):
        check_step_count(4, ran, passed=TURBO_LIKE, sample_sigmas=None)
    with pytest.raises(GridNotHonoured, match=f"ran {ran} steps, expected 8"):
        check_step_count(4, ran, passed=None, sample_sigmas=TURBO_LIKE)
    with pytest.raises(GridNotHonoured, match=f"ran {ran - 4} steps, expected 4"):
        check_step_count(4, ran - 4, passed=None, sample_sigmas=None)


# --- G3's mode and judgement ------------------------------------------------------------------------------------


def test_g3_mode_comes_from_the_flag_or_the_models_identity_never_its_path():
    from aipc_env.distill.g3_verdict import decide_mode

    assert decide_mode("auto", lpips=True, tiny_random=False) == ("quality", "LPIPS weights and a real model")
    assert decide_mode("auto", lpips=True, tiny_random=True) == (
        "plumbing",
        "the model is a tiny random pipeline (aipc_tiny.json)",
    )
    assert decide_mode("auto", lpips=False, tiny_random=False) == ("plumbing", "no LPIPS weights configured (eval.lpips_weights)")
    assert decide_mode("plumbing", lpips=True, tiny_random=False) == ("plumbing", "eval.mode: plumbing")
    assert decide_mode("quality", lpips=True, tiny_random=False) == ("quality", "eval.mode: quality")
    with pytest.raises(InputError, match="tiny random pipeline"):
        decide_mode("quality", lpips=True, tiny_random=True)
    with pytest.raises(InputError, match="no LPIPS weights"):
        decide_mode("quality", lpips=False, tiny_random=False)


def test_a_tiny_model_saved_under_a_real_looking_name_is_still_tiny(tmp_path):
    from aipc_env.workers.distill.models import is_tiny_random

    assert is_tiny_random(_model(tmp_path / "Qwen-Image-2.1-Turbo", tiny=True))
    assert not is_tiny_random(_model(tmp_path / "tiny-qwen-image-2.1"))


@pytest.mark.parametrize(
    "margin, pairs, beats",
    [
        (0.0, [(0.20, 0.30), (0.20, 0.30)], True),
        (0.25, [(0.25, 0.5), (0.25, 0.5)], True),  # at the margin (binary-exact values)
        (0.25 + 1e-9, [(0.25, 0.5), (0.25, 0.5)], False),  # just above it
        (0.0, [(0.30, 0.30), (0.30, 0.30)], False),  # a tie does not beat naive
        (0.0, [(0.10, 0.30), (0.40, 0.30)], True),  # win rate 0.5: at the bound
        (0.0, [(0.05, 0.30), (0.40, 0.30), (0.40, 0.30)], False),  # mean better, win rate 1/3 below 0.5
    ],
)
def test_g3_judges_on_mean_margin_and_win_rate(margin, pairs, beats):
    from aipc_env.distill.g3_verdict import decide

    got, stats = decide(pairs, margin=margin, min_win_rate=0.5)
    assert got is beats
    assert stats["pairs"] == len(pairs) and stats["wins"] == sum(1 for s, n in pairs if s < n)


@pytest.mark.parametrize(
    "student, reference, margin, ok",
    [
        (0.25, 0.25, 0.0, True),  # equal: not worse
        (0.25, 0.5, 0.0, True),  # better
        (0.5, 0.25, 0.25, True),  # worse by exactly the margin (binary-exact values): at the bound
        (0.5 + 1e-9, 0.25, 0.25, False),  # just above it
        (0.25 + 1e-9, 0.25, 0.0, False),  # worse with no margin
        (float("nan"), 0.25, 0.0, False),  # a NaN distance never passes
    ],
)
def test_g3_holds_the_student_to_the_reference_lora_within_the_margin(student, reference, margin, ok):
    from aipc_env.distill.g3_verdict import not_worse_than_reference
    from aipc_env.distill.lesson_errors import StudentWorseThanReference

    if ok:
        assert not_worse_than_reference(student, reference, margin=margin, metric="lpips").startswith(
            f"student lpips {student:.4g} vs reference {reference:.4g}"
        )
    else:
        with pytest.raises(StudentWorseThanReference) as err:
            not_worse_than_reference(student, reference, margin=margin, metric="lpips")
        assert err.value.message.startswith("[student-worse-than-reference] the student is worse than the reference")
        assert "public 4-step LoRA" in err.value.fix


def test_the_reference_lora_is_a_path_key_and_an_input_of_g3(tmp_path):
    from aipc_env.distill.grid import Grid
    from aipc_env.distill.inputs import reference_lora_file, stage_inputs

    cfg = _cfg(tmp_path, eval__reference_lora="refs/lightning.safetensors")
    assert cfg.eval.reference_lora == str(tmp_path / "refs" / "lightning.safetensors")
    grid = Grid(teacher=[1.0, 0.5], student=[1.0], stride=2, source="config")
    assert stage_inputs(cfg, "g3", model_key="m", grid=grid)["reference_lora"] == "none"
    (tmp_path / "refs").mkdir()
    (tmp_path / "refs" / "lightning.safetensors").write_bytes(b"weights")
    assert stage_inputs(cfg, "g3", model_key="m", grid=grid)["reference_lora"] == hashlib.sha256(b"weights").hexdigest()
    assert "reference_lora" not in stage_inputs(cfg, "g2", model_key="m", grid=grid)
    assert "reference_lora" not in stage_inputs(_cfg(tmp_path / "b"), "g3", model_key="m", grid=grid)
    assert reference_lora_file(str(tmp_path / "refs")) == tmp_path / "refs" / "pytorch_lora_weights.safetensors"


def test_g3_win_rate_bound():
    from aipc_env.distill.g3_verdict import decide

    pairs = [(0.1, 0.3), (0.1, 0.3), (0.1, 0.3), (0.4, 0.3)]  # 3/4 wins
    assert decide(pairs, margin=0.0, min_win_rate=0.75)[0] is True
    assert decide(pairs, margin=0.0, min_win_rate=0.76)[0] is False
    with pytest.raises(ValueError):
        decide([], margin=0.0, min_win_rate=0.5)


# --- the train stage's outcome ----------------------------------------------------------------------------------


def test_a_rising_or_flat_objective_fails_the_train_stage_by_name():
    from aipc_env.distill.lesson_errors import ObjectiveRose
    from aipc_env.workers.distill.lessons import check_training_outcome

    check_training_outcome(objective_start=1.0, objective_end=0.999, velocity_on=1.0, velocity_off=1.0, tolerance=1.5)
    for end in (1.0, 1.001):
        with pytest.raises(ObjectiveRose, match="did not fall"):
            check_training_outcome(objective_start=1.0, objective_end=end, velocity_on=1.0, velocity_off=1.0, tolerance=1.5)


def test_a_diverged_velocity_fails_the_train_stage_by_name():
    from aipc_env.distill.lesson_errors import VelocityDiverged
    from aipc_env.workers.distill.lessons import check_training_outcome

    ok = {"objective_start": 1.0, "objective_end": 0.5, "velocity_off": 2.0, "tolerance": 1.5}
    check_training_outcome(velocity_on=3.0, **ok)  # at the bound
    with pytest.raises(VelocityDiverged, match=r"more than 1\.5 x"):
        check_training_outcome(velocity_on=3.0000001, **ok)


def test_loss_spikes_are_judged_per_student_step():
    from aipc_env.workers.distill.student import _spike

    rows = [{"pairs": [[0, k]], "velocity_errors": [e]} for k, e in [(0, 1.0), (3, 100.0)] * 3]
    # k=3's errors are 100x k=0's (a non-uniform grid): not a spike at k=3, one at k=0
    assert _spike(rows, [(0, 3)], [100.0], 3, 4.0) is None
    assert _spike(rows, [(0, 3)], [400.0], 3, 4.0) is None  # at the bound
    assert "k=3" in _spike(rows, [(0, 3)], [400.1], 3, 4.0)
    assert "k=0" in _spike(rows, [(0, 0)], [4.01], 3, 4.0)
    assert _spike(rows[:4], [(0, 0)], [50.0], 3, 4.0) is None  # 2 errors of k=0 so far: below the window
    assert "is nan" in _spike(rows, [(0, 0)], [float("nan")], 3, 4.0)


def test_gathered_errors_come_back_in_pick_order():
    import torch

    from aipc_env.workers.distill.student import _in_pick_order

    # 2 processes x 2 accumulation steps x 1 pair: chunk a * 2 + rank holds pick a * 2 + rank
    gathered = torch.tensor([0.0, 2.0, 1.0, 3.0])  # rank 0: picks 0, 2; rank 1: picks 1, 3
    assert _in_pick_order(gathered, 2, 2, 1) == [0.0, 1.0, 2.0, 3.0]


# --- inputs and staleness ---------------------------------------------------------------------------------------


def test_each_stage_hashes_only_the_config_it_reads(tmp_path):
    from aipc_env.distill.inputs import config_hash

    base = _cfg(tmp_path / "a")
    stages = ("g0", "g2", "trajectories", "train", "g3")
    before = {s: config_hash(base, s) for s in stages}

    def changed(**kw):
        cfg = _cfg(tmp_path / f"c{len(kw)}{min(kw)}", **kw)
        return {s for s in stages if config_hash(cfg, s) != before[s]}

    assert changed(student__learning_rate=1e-4) == {"g0", "train", "g3"}
    assert changed(eval__seeds=[5]) == {"g3"}
    assert changed(height=128) == set(stages)
    assert changed(threads=2) == set()
    assert changed(teacher_sigmas=[1.0, 0.5]) == set()  # the grid is hashed on its own


def test_stale_reasons_name_what_changed():
    from aipc_env.distill.inputs import stale_reasons

    now = {"config": "a", "model": "m", "grid": "g", "lora": "l"}
    assert stale_reasons(now, now) == []
    assert stale_reasons({**now, "grid": "x"}, now) == ["the sigma grid changed"]
    assert stale_reasons({**now, "lora": "x", "config": "y"}, now) == ["the config changed", "the student LoRA changed"]
    assert stale_reasons({"config": "a", "model": "m", "grid": "g"}, now) == ["the student LoRA changed"]
    assert stale_reasons(now, None) == ["the model folder is gone"]


def _write(out: Path, stage: str, status: str, inputs: dict, mode=None) -> None:
    from aipc_env.distill.verdict import Verdict, write_verdict

    write_verdict(out, Verdict(stage=stage, status=status, mode=mode, model="m", when="t", seconds=0.0, inputs=inputs))


def test_the_report_counts_only_current_verdicts_in_stage_order(tmp_path):
    from aipc_env.distill.inputs import current_inputs
    from aipc_env.distill.report import current_verdicts, status_line

    cfg = _cfg(tmp_path)
    (cfg.out / "lora").mkdir(parents=True)
    (cfg.out / "lora" / "pytorch_lora_weights.safetensors").write_bytes(b"lora")
    now = {s: current_inputs(cfg, s) for s in ("g0", "g2", "trajectories", "train", "g3")}
    for stage, inputs in now.items():
        _write(cfg.out, stage, "ok" if stage == "g3" else "pass", inputs, "plumbing" if stage == "g3" else None)
    shown, ignored = current_verdicts(cfg)
    assert list(shown) == ["g0", "g2", "trajectories", "train", "g3"] and ignored == {}
    assert status_line(shown).startswith("every stage ran without a failure; G3 ran as a plumbing check only")
    # a failed G2 (as an injected fault leaves it): nothing after it counts, whatever is on disk
    _write(cfg.out, "g2", "fail", now["g2"])
    shown, ignored = current_verdicts(cfg)
    assert list(shown) == ["g0", "g2"] and status_line(shown) == "paused at G2-FAIL"
    assert ignored == dict.fromkeys(("trajectories", "train", "g3"), "not current: G2 sampler parity failed")
    # the LoRA replaced after G3 ran: G3 is stale
    _write(cfg.out, "g2", "pass", now["g2"])
    (cfg.out / "lora" / "pytorch_lora_weights.safetensors").write_bytes(b"another lora")
    shown, ignored = current_verdicts(cfg)
    assert list(shown) == ["g0", "g2", "trajectories"]
    assert ignored == {"train": "stale: the student LoRA changed since it ran", "g3": "not current: student training is stale"}
    assert status_line(shown) == "in progress: train, g3 not run or not current"


def test_a_failed_stage_takes_the_later_verdicts_out(tmp_path):
    from aipc_env.distill.verdict import take_out_after

    for stage in ("g0", "g2", "trajectories", "train", "g3"):
        _write(tmp_path, stage, "pass", {})
    assert take_out_after(tmp_path, "g2") == ["trajectories", "train", "g3"]
    assert sorted(p.name for p in (tmp_path / "verdicts").iterdir()) == ["g0.json", "g0.txt", "g2.json", "g2.txt"]
    assert take_out_after(tmp_path, "g3") == []


def test_a_plumbing_verdict_never_says_quality_or_passed(tmp_path):
    from aipc_env.distill.verdict import Verdict, summary

    v = Verdict(stage="g3", status="ok", mode="plumbing", model="m", when="t", seconds=1.0)
    text = summary(v) + v.model_dump_json()
    assert summary(v).startswith("G3 plumbing check: OK")
    assert "quality" not in text.lower() and "pass" not in text.lower()
    assert Verdict(stage="g3", status="pass", mode="quality", model="m", when="t", seconds=1.0).title == "G3 quality gate"


# --- ComfyUI export ---------------------------------------------------------------------------------------------

_A = "transformer.transformer_blocks.0.attn.to_q.lora_A.weight"
_B = "transformer.transformer_blocks.0.attn.to_q.lora_B.weight"


def _prov(tmp_path: Path, **kw):
    """An export's provenance: a model folder with a licence text."""
    from aipc_env.workers.distill.export import Provenance

    model = tmp_path / "model-with-licence"
    model.mkdir(parents=True, exist_ok=True)
    (model / "LICENSE").write_text("Qwen RESEARCH LICENSE AGREEMENT (test copy)\n", encoding="utf-8")
    return Provenance(
        **{
            "model_dir": model,
            "base_model": "Qwen-Image-2.1-Turbo",
            "config_sha256": "c" * 64,
            "student_steps": 4,
            "teacher_steps": 8,
            **kw,
        }
    )


def _lora(tmp_path: Path, tensors: dict, meta: dict | None) -> Path:
    from safetensors.torch import save_file

    folder = tmp_path / "lora"
    folder.mkdir(parents=True, exist_ok=True)
    metadata = {"format": "pt"}
    if meta is not None:
        metadata["lora_adapter_metadata"] = json.dumps(meta)
    save_file(tensors, str(folder / "pytorch_lora_weights.safetensors"), metadata=metadata)
    return folder


def test_the_comfyui_layout_is_lightnings(tmp_path):
    import torch
    from safetensors.torch import load_file

    from aipc_env.workers.distill.export import export_lora

    a, b = torch.randn(4, 16), torch.randn(16, 4)
    folder = _lora(
        tmp_path,
        {
            "transformer.transformer_blocks.0.attn.to_out.0.lora_A.weight": a,
            "transformer.transformer_blocks.0.attn.to_out.0.lora_B.weight": b,
        },
        {"transformer.r": 4, "transformer.lora_alpha": 8.0},
    )
    result = export_lora(folder, tmp_path / "out" / "x.safetensors", provenance=_prov(tmp_path))
    got = load_file(str(tmp_path / "out" / "x.safetensors"))
    assert sorted(got) == [
        "diffusion_model.transformer_blocks.0.attn.to_out.0.alpha",
        "diffusion_model.transformer_blocks.0.attn.to_out.0.lora_down.weight",
        "diffusion_model.transformer_blocks.0.attn.to_out.0.lora_up.weight",
    ]
    assert torch.equal(got["diffusion_model.transformer_blocks.0.attn.to_out.0.lora_down.weight"], a)
    assert torch.equal(got["diffusion_model.transformer_blocks.0.attn.to_out.0.lora_up.weight"], b)
    assert float(got["diffusion_model.transformer_blocks.0.attn.to_out.0.alpha"]) == 8.0
    assert result["modules"] == 1 and result["rank"] == 4 and result["alpha"] == 8.0


@pytest.mark.parametrize(
    "tensors, meta, message",
    [
        ({_A: (4, 8), _B: (8, 4)}, None, "no adapter metadata"),
        ({_A: (4, 8), _B: (8, 4)}, {"transformer.r": 4}, "unreadable"),
        (
            {_A: (4, 8), _B: (8, 4)},
            {"transformer.r": 4, "transformer.lora_alpha": 8, "transformer.rank_pattern": {"to_q": 2}},
            "rank_pattern",
        ),
        ({_A: (4, 8), _B: (8, 4)}, {"transformer.r": 4, "transformer.lora_alpha": 8, "transformer.use_dora": True}, "DoRA"),
        ({_A: (4, 8)}, {"transformer.r": 4, "transformer.lora_alpha": 8}, "without its pair"),
        ({_A: (3, 8), _B: (8, 3)}, {"transformer.r": 4, "transformer.lora_alpha": 8}, "do not have rank 4"),
        (
            {"text_encoder.a.lora_A.weight": (4, 8), "text_encoder.a.lora_B.weight": (8, 4)},
            {"transformer.r": 4, "transformer.lora_alpha": 8},
            "not a transformer LoRA weight",
        ),
        (
            {"transformer.../x.lora_A.weight": (4, 8)},
            {"transformer.r": 4, "transformer.lora_alpha": 8},
            "not a transformer LoRA weight",
        ),
        ({_A: (4, 8), _B: (8, 4)}, {"transformer.r": 4, "transformer.lora_alpha": 0}, "not usable"),
    ],
)
def test_the_export_refuses_what_it_cannot_carry_over(tmp_path, tensors, meta, message):
    import torch

    from aipc_env.workers.distill.export import export_lora

    folder = _lora(tmp_path, {k: torch.zeros(*shape) for k, shape in tensors.items()}, meta)
    dest = tmp_path / "out.safetensors"
    with pytest.raises(InputError, match=message):
        export_lora(folder, dest, provenance=_prov(tmp_path))
    assert not dest.exists()


def test_export_of_a_missing_or_damaged_lora(tmp_path):
    from aipc_env.workers.distill.export import export_lora

    with pytest.raises(InputError, match="no published LoRA"):
        export_lora(tmp_path, tmp_path / "o.safetensors", provenance=_prov(tmp_path))
    (tmp_path / "pytorch_lora_weights.safetensors").write_bytes(b"\x00" * 12)
    with pytest.raises(InputError, match="not a readable safetensors file"):
        export_lora(tmp_path, tmp_path / "o.safetensors", provenance=_prov(tmp_path))


# --- init profiles ----------------------------------------------------------------------------------------------


def test_init_turbo_writes_the_seeds_settings_and_refuses_to_run_until_filled(tmp_path):
    result = run_cli("distill", "init", str(tmp_path / "turbo"), "--profile", "turbo")
    assert result.returncode == 0, result.stderr
    data = yaml.safe_load((tmp_path / "turbo" / "distill.yaml").read_text())
    assert data["student"]["rank"] == 64 and data["student"]["alpha"] == 128
    assert data["student"]["learning_rate"] == 1e-4 and data["student"]["loss_weighting"] == "endpoint"
    assert "teacher_sigmas" not in data and data["teacher"] == {"base": "nf4", "offload": "none", "offload_text_encoder": True}
    assert data["eval"]["mode"] == "quality" and (data["height"], data["width"]) == (512, 512)
    with pytest.raises(InputError, match="placeholder left to fill") as err:
        load_distill_config(tmp_path / "turbo" / "distill.yaml")
    assert err.value.key == "model"
    again = run_cli("distill", "init", str(tmp_path / "turbo"), "--profile", "tiny")
    assert again.returncode == 2 and "already there" in again.stderr
    assert yaml.safe_load((tmp_path / "turbo" / "distill.yaml").read_text()) == data  # untouched


def test_init_tiny_keeps_the_cpu_template(tmp_path):
    result = run_cli("distill", "init", str(tmp_path / "tiny"))
    assert result.returncode == 0, result.stderr
    data = yaml.safe_load((tmp_path / "tiny" / "distill.yaml").read_text())
    assert data["model"] == "builtin:tiny-qwen-image-2.1" and data["student"]["learning_rate"] == 3e-3
    assert data["student"]["rank"] == 8 and "teacher_sigmas" not in data


def test_init_tiny_trained_writes_the_judged_profile(tmp_path):
    result = run_cli("distill", "init", str(tmp_path / "t"), "--profile", "tiny-trained")
    assert result.returncode == 0, result.stderr
    data = yaml.safe_load((tmp_path / "t" / "distill.yaml").read_text())
    assert data["model"] == "builtin:tiny-qwen-image-2.1-trained" and "teacher_sigmas" not in data
    assert {
        k: data["student"][k]
        for k in ("max_train_steps", "learning_rate", "loss_weighting", "rank", "alpha", "batch_size", "base")
    } == {
        "max_train_steps": 400,
        "learning_rate": 3e-4,
        "loss_weighting": "endpoint",
        "rank": 8,
        "alpha": 16,
        "batch_size": 16,
        "base": "full",
    }
    assert "on_policy" not in data["student"]
    assert load_distill_config(tmp_path / "t" / "distill.yaml").eval.mode == "quality"


@pytest.mark.parametrize(
    "student, ok",
    [
        ({"batch_size": 4, "processes": 2, "gradient_accumulation_steps": 2}, True),
        ({"batch_size": 2, "processes": 2, "gradient_accumulation_steps": 2}, False),
        ({"batch_size": 6, "processes": 2, "gradient_accumulation_steps": 2}, False),
        ({"batch_size": 8, "processes": 2, "gradient_accumulation_steps": 2}, True),
    ],
)
def test_the_batch_must_split_into_equal_micro_batches(tmp_path, student, ok):
    if ok:
        assert _cfg(tmp_path, student={**default_distill_config(tmp_path)["student"], **student})
    else:
        with pytest.raises(InputError, match="does not split"):
            _cfg(tmp_path, student={**default_distill_config(tmp_path)["student"], **student})


def test_quality_mode_on_the_builtin_tiny_model_is_refused(tmp_path):
    data = default_distill_config(tmp_path / "run")
    data["eval"] = {"mode": "quality", "lpips_weights": str(tmp_path)}
    (tmp_path / "d.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(InputError, match="random weights") as err:
        load_distill_config(tmp_path / "d.yaml")
    assert err.value.key == "eval.mode"
    data["eval"] = {"mode": "quality"}
    data["model"] = str(_model(tmp_path / "real"))
    (tmp_path / "d.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(InputError, match="needs LPIPS") as err:
        load_distill_config(tmp_path / "d.yaml")
    assert err.value.key == "eval.lpips_weights"


def test_the_accelerate_config_for_the_train_stage():
    from aipc_env.launch.accelerate import accelerate_config_text

    one = yaml.safe_load(accelerate_config_text("cpu", 1, 29501))
    assert one["distributed_type"] == "NO" and one["num_processes"] == 1 and one["use_cpu"] is True
    two = yaml.safe_load(accelerate_config_text("cpu", 2, 29501))
    assert two["distributed_type"] == "MULTI_GPU" and two["num_processes"] == 2 and two["use_cpu"] is False
    assert yaml.safe_load(accelerate_config_text("xpu", 2, 1))["distributed_type"] == "MULTI_XPU"
    assert two["main_process_port"] == 29501 and two["mixed_precision"] == "no"


def test_the_stages_run_in_the_seeds_order_with_train_under_accelerate(tmp_path):
    from aipc_env.distill.phases import worker_phases
    from aipc_env.distill.verdict import STAGES

    ALL = list(STAGES)

    assert ALL == ["g0", "g2", "trajectories", "train", "g3"]
    phases = worker_phases(
        "py", tmp_path / "c.yaml", ALL + ["report"], run_id="r1", inject=["rgba"], accelerate_config=tmp_path / "a.yaml"
    )
    assert [p.name for p in phases] == ["distill-1", "distill-2-train", "distill-3"]
    assert phases[0].argv[:5] == ["py", "-m", "aipc_env.workers.distill.worker", "--stages", "g0,g2,trajectories"]
    assert phases[1].argv[:8] == [
        "py",
        "-m",
        "accelerate.commands.launch",
        "--quiet",
        "--config_file",
        str(tmp_path / "a.yaml"),
        "-m",
        "aipc_env.workers.distill.worker",
    ]
    assert phases[2].argv[4] == "g3,report"
    assert all(p.argv[-4:] == ["--run-id", "r1", "--inject", "rgba"] for p in phases)


# --- the distillation lessons as checks, on small real tensors, modules and files --------------------------------------


def test_embeddings_with_a_graph_are_refused():
    import torch

    from aipc_env.distill.lesson_errors import EmbeddingsAttachedToGraph
    from aipc_env.workers.distill.lessons import check_embeddings_detached

    leaf = torch.ones(2, requires_grad=True)
    check_embeddings_detached(torch.ones(2), None, leaf.detach())
    with pytest.raises(EmbeddingsAttachedToGraph, match="grad_fn MulBackward0"):
        check_embeddings_detached(torch.ones(2), leaf * 2)
    with pytest.raises(EmbeddingsAttachedToGraph, match="the prompt embeddings carry"):
        check_embeddings_detached(leaf)


@pytest.mark.parametrize(
    "shape, ok",
    [
        ((1, 3, 8, 8), True),
        ((2, 3, 4, 4), True),
        ((1, 4, 8, 8), False),
        ((1, 2, 8, 8), False),
        ((3, 8, 8), False),
        ((1, 1, 3, 8, 8), False),
    ],
)
def test_only_rgb_batches_pass(shape, ok):
    import torch

    from aipc_env.distill.lesson_errors import RgbaNotSliced
    from aipc_env.workers.distill.lessons import check_rgb

    if ok:
        check_rgb(torch.zeros(shape))
    else:
        with pytest.raises(RgbaNotSliced, match=rf"shape {re.escape(str(shape))}, expected \[B, 3, H, W\]"):
            check_rgb(torch.zeros(shape))


def test_a_stochastic_scheduler_is_refused():
    from aipc_env.distill.lesson_errors import StochasticSampler
    from aipc_env.workers.distill.lessons import check_deterministic_sampler

    check_deterministic_sampler({})
    check_deterministic_sampler({"stochastic_sampling": False})
    with pytest.raises(StochasticSampler, match="stochastic_sampling on"):
        check_deterministic_sampler({"stochastic_sampling": True})


def test_sigmas_must_be_used_verbatim_to_the_last_float():
    import numpy as np

    from aipc_env.distill.lesson_errors import SigmasNotVerbatim
    from aipc_env.workers.distill.lessons import check_sigmas_verbatim

    passed = [1.0, 0.75, 0.5, 0.25]
    check_sigmas_verbatim(passed, passed + [0.0], {}, grid="teacher")
    one_ulp = float(np.nextafter(np.float32(0.5), np.float32(1)))
    for effective in ([1.0, 0.75, one_ulp, 0.25, 0.0], passed, passed + [0.0, 0.0], [1.0, 0.75, 0.5, 0.25, 0.01]):
        with pytest.raises(SigmasNotVerbatim, match="the scheduler warps the student grid") as err:
            check_sigmas_verbatim(passed, effective, {"use_dynamic_shifting": True, "shift": 3.0}, grid="student")
        assert "'use_dynamic_shifting': True, 'shift': 3.0" in err.value.message
        assert "use_dynamic_shifting: false" in err.value.fix


def test_sigmas_are_compared_as_the_scheduler_holds_them_float32():
    """The scheduler keeps float32 sigmas: a passed 0.1 (float64) is used verbatim when it runs float32(0.1)."""
    import numpy as np

    from aipc_env.distill.lesson_errors import SigmasNotVerbatim
    from aipc_env.workers.distill.lessons import check_sigmas_verbatim

    passed = [1.0, 0.1, 0.123456]
    check_sigmas_verbatim(passed, [float(np.float32(x)) for x in passed] + [0.0], {}, grid="teacher")
    check_sigmas_verbatim(passed, passed + [0.0], {}, grid="teacher")  # float64 values equal once float32
    with pytest.raises(SigmasNotVerbatim) as err:
        check_sigmas_verbatim(passed, [1.0, 0.1, 0.12344, 0.0], {"shift": 1.0}, grid="teacher")
    assert err.value.message.startswith(
        "[sigmas-not-verbatim] the scheduler warps the teacher grid: passed "
        "[1.0, 0.1, 0.1235], it runs [1.0, 0.1, 0.1234, 0.0] (scheduler config "
    )


def _tiny_student(lora_names=("lora_A", "lora_B")):
    import torch

    module = torch.nn.Module()
    module.base = torch.nn.Parameter(torch.zeros(2), requires_grad=False)
    for name in lora_names:
        setattr(module, name, torch.nn.Parameter(torch.zeros(2)))
    return module


def test_the_lora_must_exist_before_prepare_and_be_what_the_optimizer_holds():
    import torch

    from aipc_env.distill.lesson_errors import LoraAfterPrepare
    from aipc_env.workers.distill.lessons import check_lora_before_prepare, mark_prepared

    model = _tiny_student()
    with pytest.raises(LoraAfterPrepare, match="never prepared"):
        check_lora_before_prepare(model, torch.optim.SGD([model.lora_A], lr=1))
    mark_prepared(model)
    assert check_lora_before_prepare(model, torch.optim.SGD([model.lora_A, model.lora_B], lr=1)) == 2
    with pytest.raises(LoraAfterPrepare, match="the optimizer holds 1 tensors, the LoRA has 2"):
        check_lora_before_prepare(model, torch.optim.SGD([model.lora_A], lr=1))
    with pytest.raises(LoraAfterPrepare, match="the optimizer holds 3 tensors, the LoRA has 2"):
        check_lora_before_prepare(model, torch.optim.SGD([model.lora_A, model.lora_B, model.base], lr=1))
    model.lora_C = torch.nn.Parameter(torch.zeros(2))  # added after prepare
    with pytest.raises(LoraAfterPrepare, match="prepare saw 2 LoRA tensors, the model now has 3"):
        check_lora_before_prepare(model, torch.optim.SGD([model.lora_A], lr=1))
    frozen = _tiny_student()
    frozen.lora_A.requires_grad_(False)
    mark_prepared(frozen)
    with pytest.raises(LoraAfterPrepare, match="prepare saw 2 LoRA tensors, the model now has 1"):
        check_lora_before_prepare(frozen, torch.optim.SGD([frozen.lora_B], lr=1))
    empty = _tiny_student(())
    mark_prepared(empty)
    with pytest.raises(LoraAfterPrepare, match="prepare saw 0 LoRA tensors, the model now has 0"):
        check_lora_before_prepare(empty, torch.optim.SGD([empty.base], lr=1))


@pytest.mark.parametrize(
    "meta, error, message",
    [
        ({"transformer.r": 4, "transformer.lora_alpha": 8.0}, None, None),
        (None, "LoraMetadataMissing", "alpha = rank \\(4\\) instead of 8, a 0.5x-strength adapter"),
        ({"transformer.r": 4, "transformer.lora_alpha": 4.0}, "LoraAlphaLost", "rank 4, alpha 4.0; trained with rank 4, alpha 8"),
        ({"transformer.r": 8, "transformer.lora_alpha": 8.0}, "LoraAlphaLost", "rank 8, alpha 8.0; trained with rank 4"),
    ],
)
def test_lora_metadata_is_read_through_diffusers(tmp_path, meta, error, message):
    import torch

    from aipc_env.workers.distill import lessons

    folder = _lora(tmp_path, {_A: torch.zeros(4, 16), _B: torch.zeros(16, 4)}, meta)
    if error is None:
        assert lessons.check_lora_metadata(folder, rank=4, alpha=8)["transformer.lora_alpha"] == 8.0
    else:
        with pytest.raises(getattr(lessons, error), match=message):
            lessons.check_lora_metadata(folder, rank=4, alpha=8)


# --- whole answers: every refusal's message, key and fix; the hashes as computed from their definition ----------


def _error(exc: InputError) -> tuple:
    return exc.message, exc.key, exc.fix


def test_g3_mode_refusals_whole():
    from aipc_env.distill.g3_verdict import decide_mode

    with pytest.raises(InputError) as err:
        decide_mode("quality", lpips=True, tiny_random=True)
    assert _error(err.value) == (
        "eval.mode is quality, but the model is a tiny random pipeline (it has aipc_tiny.json): nothing about its "
        "student can be judged",
        "eval.mode",
        "set eval.mode: plumbing (or auto), or point model at the real Qwen-Image-2.1-Turbo",
    )
    with pytest.raises(InputError) as err:
        decide_mode("quality", lpips=False, tiny_random=False)
    assert _error(err.value) == (
        "eval.mode is quality, but no LPIPS weights are configured",
        "eval.lpips_weights",
        "set eval.lpips_weights, or eval.mode: plumbing",
    )
    with pytest.raises(ValueError, match=r"^no prompt x seed pairs to judge$"):
        from aipc_env.distill.g3_verdict import decide

        decide([], margin=0.0, min_win_rate=0.5)


def test_g3_statistics_whole_and_a_tie_never_beats():
    from aipc_env.distill.g3_verdict import decide

    assert decide([(0.25, 0.5), (0.75, 0.5)], margin=0.0, min_win_rate=0.5) == (
        False,
        {"student_mean": 0.5, "naive_mean": 0.5, "margin": 0.0, "wins": 1, "pairs": 2, "win_rate": 0.5, "min_win_rate": 0.5},
    )
    assert decide([(0.5, 0.5)], margin=0.0, min_win_rate=0.0)[0] is False  # a tie, whatever the win-rate bound
    assert decide([(0.25, 0.5)], margin=0.0, min_win_rate=0.0) == (
        True,
        {"student_mean": 0.25, "naive_mean": 0.5, "margin": 0.0, "wins": 1, "pairs": 1, "win_rate": 1.0, "min_win_rate": 0.0},
    )


def test_grid_messages_whole():
    assert check_sigmas([1.0], 2) == "a grid needs at least 2 sigmas"
    assert check_sigmas([1.0, "x"], 2) == "sigmas must be numbers"
    assert check_sigmas([0.5, 1.0], 2) == ("sigmas must fall strictly, within (0, 1] (the terminal 0 is added by the scheduler)")
    assert check_sigmas([1.0, 0.5, 0.25], 2) == "3 sigmas is not a multiple of student_stride 2"


def test_the_default_grid_for_one_to_four_steps():
    from aipc_env.distill.grid import default_teacher_sigmas

    assert default_teacher_sigmas(1) == [1.0]
    assert default_teacher_sigmas(2) == [1.0, 0.5]
    assert default_teacher_sigmas(4) == [1.0, 0.75, 0.5, 0.25]
    assert default_teacher_sigmas(3)[1] == pytest.approx(2 / 3, rel=1e-7) and default_teacher_sigmas(3)[2] == pytest.approx(
        1 / 3, rel=1e-7
    )


def test_model_index_refusals_whole(tmp_path):
    model = _model(tmp_path / "m")
    index = model / "model_index.json"
    fix = "point model at a diffusers model folder with its model_index.json"
    cases = [
        (" " * ((1 << 20) - 2) + "{}", None),  # at the size bound: read
        (" " * ((1 << 20) - 1) + "{}", ("model_index.json is larger than 1 MiB", None, fix)),  # above it
        ("{not json", ("not valid JSON at line 1, column 2: Expecting property name enclosed in double quotes", None, fix)),
        ("[" * 64 + "]" * 64, None),  # at the depth bound: read (not a mapping: no grid)
        ("[" * 65 + "]" * 65, ("model_index.json is nested deeper than 64 levels", None, fix)),
        ("[" * 100_000 + "]" * 100_000, ("model_index.json is nested deeper than 64 levels", None, fix)),
        ('{"sample_sigmas": [' + "1" * 4300 + "]}", None),  # at the digit bound: read (the grid check refuses it)
        ('{"sample_sigmas": [' + "1" * 4301 + "]}", ("model_index.json holds a number of more than 4300 digits", None, fix)),
        (
            '{"sample_sigmas": 3}',
            (
                "sample_sigmas is int, not a list",
                "sample_sigmas",
                "restore the model's model_index.json, or set teacher_sigmas in the config",
            ),
        ),
    ]
    for text, expected in cases:
        index.write_text(text)
        if expected is None:
            model_sample_sigmas(model)
            continue
        with pytest.raises(InputError) as err:
            model_sample_sigmas(model)
        assert _error(err.value) == expected and err.value.path == str(index)
    index.write_text('["sample_sigmas"]')  # JSON, but not a mapping: no grid configured
    assert model_sample_sigmas(model) is None
    index.write_text('{"sample_sigmas": [1.0, 0.5]}', encoding="utf-16")  # with a BOM (PowerShell's): read
    assert model_sample_sigmas(model) == [1.0, 0.5]
    index.write_text('{"sample_sigmas": [1.0, 0.5]}', encoding="utf-16-le")  # no BOM: NULs between the characters
    with pytest.raises(InputError, match="not valid JSON"):
        model_sample_sigmas(model)
    with pytest.raises(InputError) as err:
        model_sample_sigmas(tmp_path / "nowhere")
    assert err.value.message == "model_index.json not found"
    assert err.value.fix == fix
    assert err.value.path == str(tmp_path / "nowhere" / "model_index.json")
    index.write_text('{"sample_sigmas": [1.0, 0.8, 0.6]}')
    with pytest.raises(InputError) as err:
        resolve_grid(None, 2, model)
    assert _error(err.value) == (
        "its sample_sigmas [1.0, 0.8, 0.6] cannot be the teacher grid: 3 sigmas is not a multiple of student_stride 2",
        "sample_sigmas",
        "set teacher_sigmas (and student_stride) in the distillation config",
    )
    assert err.value.path == str(index)


def test_input_hashes_from_their_definition(tmp_path):
    """Each hash is the first 16 hex digits of sha256 over sorted-key JSON of what the stage reads."""
    import hashlib

    from aipc_env.core.runfolder import RunFolder
    from aipc_env.distill.inputs import config_hash, file_sha256, grid_hash, stage_inputs

    def digest(data) -> str:
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]

    cfg = _cfg(tmp_path)
    dumped = json.loads(cfg.model_dump_json())
    g2_keys = ("compute_dtype", "height", "width", "student_stride", "use_kv_cache", "seed", "prompts", "teacher")
    assert config_hash(cfg, "g2") == digest({k: dumped[k] for k in g2_keys})
    assert config_hash(cfg, "g3") == digest({k: dumped[k] for k in (*g2_keys, "student", "eval")})
    grid = Grid(teacher=[1.0, 0.5], student=[1.0], stride=2, source="config")
    assert grid_hash(grid) == digest({"teacher": [1.0, 0.5], "stride": 2})
    assert stage_inputs(cfg, "g2", model_key="mk", grid=grid) == {
        "config": config_hash(cfg, "g2"),
        "model": "mk",
        "grid": grid_hash(grid),
    }
    assert stage_inputs(cfg, "g3", model_key="mk", grid=grid)["lora"] == "none"
    (cfg.out / "lora").mkdir(parents=True)
    big = bytes(range(256)) * 8193  # more than one 1 MiB block
    (RunFolder(cfg.out).lora_file).write_bytes(big)
    assert file_sha256(RunFolder(cfg.out).lora_file) == hashlib.sha256(big).hexdigest()
    assert stage_inputs(cfg, "g3", model_key="mk", grid=grid)["lora"] == hashlib.sha256(big).hexdigest()
    assert file_sha256(tmp_path / "none") is None


def test_export_main_writes_beside_the_run_and_says_what_it_wrote(tmp_path, capsys):
    import torch
    from safetensors import safe_open

    from aipc_env.workers.distill.export import main

    cfg = _cfg(tmp_path)
    _lora(cfg.out, {_A: torch.zeros(4, 16), _B: torch.zeros(16, 4)}, {"transformer.r": 4, "transformer.lora_alpha": 8.0})
    dest = cfg.out / "export" / "student-comfyui.safetensors"
    # no licence in the model folder: refused, naming the file and the fix; nothing written
    assert main(["--config", str(tmp_path / "distill.yaml")]) == 2
    err = capsys.readouterr().err
    assert f"{cfg.model}/LICENSE: the model folder has no licence file" in err
    assert "fix: copy the licence text from the model's repository into the model folder as LICENSE" in err
    assert not (cfg.out / "export").exists()
    licence = "Qwen RESEARCH LICENSE AGREEMENT\nRelease Date: (test copy)\n"
    (Path(cfg.model) / "LICENSE").write_text(licence, encoding="utf-8")
    assert main(["--config", str(tmp_path / "distill.yaml")]) == 0
    assert capsys.readouterr().out == (
        f"distill: exported 1 LoRA modules (rank 4, alpha 8) in the comfyui layout to "
        f"{dest}, with the base model's licence (LICENSE) and the change notice "
        "(NOTICE.md) beside it\n"
    )
    assert dest.is_file() and (dest.parent / "LICENSE").read_text(encoding="utf-8") == licence
    notice = (dest.parent / "NOTICE.md").read_text(encoding="utf-8")
    config_sha = hashlib.sha256((tmp_path / "distill.yaml").read_bytes()).hexdigest()
    assert "\nBuilt with Qwen\n" in notice and f"Training config: sha256 `{config_sha}`" in notice
    assert f"base model `{Path(cfg.model).name}`" in notice and "a rank-4 LoRA (alpha 8)" in notice
    with safe_open(str(dest), framework="pt") as fh:
        meta = fh.metadata()
    assert meta["built_with"] == "Built with Qwen" and meta["training_config_sha256"] == config_sha
    assert meta["license_sha256"] == hashlib.sha256(licence.encode()).hexdigest()
    other = tmp_path / "elsewhere" / "x.safetensors"
    assert (
        main(
            [
                "--config",
                str(tmp_path / "distill.yaml"),
                "--format",
                "comfyui",
                "--out",
                str(other),
                "--repo",
                "my-org/turbo-4step",
            ]
        )
        == 0
    )
    assert other.is_file() and "to " + str(other) + ", with" in capsys.readouterr().out
    assert "- Repository: `my-org/turbo-4step`" in (other.parent / "NOTICE.md").read_text(encoding="utf-8")
    assert main(["--config", str(tmp_path / "distill.yaml"), "--out", str(other), "--repo", "me/Qwen-Turbo"]) == 2
    assert 'starts with "Qwen"' in capsys.readouterr().err
    (cfg.out / "lora" / "pytorch_lora_weights.safetensors").unlink()
    assert main(["--config", str(tmp_path / "distill.yaml")]) == 2
    err = capsys.readouterr().err
    assert "no published LoRA there" in err and "run `aipc-env distill train` first" in err
    assert main(["--config", str(tmp_path / "missing.yaml")]) == 2


def test_export_refusals_whole(tmp_path):
    import torch

    from aipc_env.workers.distill.export import export_lora

    def refused(tensors, meta) -> tuple:
        folder = _lora(tmp_path / str(len(list(tmp_path.iterdir()))), tensors, meta)
        with pytest.raises(InputError) as err:
            export_lora(folder, tmp_path / "o.safetensors", provenance=_prov(tmp_path))
        return err.value.message, err.value.fix

    pair = {_A: torch.zeros(4, 8), _B: torch.zeros(8, 4)}
    meta = {"transformer.r": 4, "transformer.lora_alpha": 8}
    again = "publish it again with `aipc-env distill train`"
    assert refused(pair, None) == (
        "the LoRA has no adapter metadata: its alpha is unknown, and an export would load at the wrong strength",
        again,
    )
    assert refused(pair, {"transformer.r": 4}) == (
        "its adapter metadata is unreadable (KeyError: 'transformer.lora_alpha')",
        again,
    )
    assert refused(pair, {**meta, "transformer.alpha_pattern": {"a": 2}}) == (
        "per-module ranks or alphas (rank_pattern/alpha_pattern) are not exported",
        "train with one rank and alpha for every module",
    )
    assert refused(pair, {**meta, "transformer.use_rslora": True}) == (
        "DoRA or rsLoRA adapters have no ComfyUI LoRA layout",
        "train a plain LoRA (use_dora and use_rslora off)",
    )
    assert refused(pair, {**meta, "transformer.r": 0}) == ("rank 0 / alpha 8 in its metadata are not usable", again)
    assert refused({_B: torch.zeros(8, 4)}, meta) == (
        "module transformer_blocks.0.attn.to_q has lora_B without its pair",
        "publish the LoRA again",
    )
    assert refused({_A: torch.zeros(4, 8, 1), _B: torch.zeros(8, 4)}, meta) == (
        "module transformer_blocks.0.attn.to_q: lora_A (4, 8, 1) / lora_B (8, 4) do not have rank 4",
        "publish the LoRA again",
    )
    assert refused({_A: torch.zeros(4, 8), _B: torch.zeros(8, 3)}, meta) == (
        "module transformer_blocks.0.attn.to_q: lora_A (4, 8) / lora_B (8, 3) do not have rank 4",
        "publish the LoRA again",
    )
    assert refused({"unet.a.lora_A.weight": torch.zeros(4, 8)}, meta) == (
        "tensor 'unet.a.lora_A.weight' is not a transformer LoRA weight (transformer.<module>.lora_A/B.weight)",
        "export only LoRAs published by `aipc-env distill train`",
    )
    from aipc_env.workers.distill.export import comfyui_state_dict

    with pytest.raises(InputError, match="100001 tensors: more than any Qwen-Image LoRA has"):
        comfyui_state_dict(dict.fromkeys(range(100_001)), 4, 8.0, path=tmp_path)
    with pytest.raises(InputError, match="unknown export format 'kohya'"):
        export_lora(tmp_path, tmp_path / "o.safetensors", "kohya", provenance=_prov(tmp_path))
    assert not (tmp_path / "o.safetensors").exists()


def test_every_lesson_error_whole():
    """Each distillation lesson's error: its name in brackets, the message and the fix, written out."""
    import numpy as np
    import torch

    from aipc_env.distill import lesson_errors
    from aipc_env.workers.distill import lessons

    def caught(fn, *args, **kwargs) -> tuple:
        with pytest.raises(lesson_errors.LessonError) as err:
            fn(*args, **kwargs)
        return type(err.value).__name__, err.value.message, err.value.fix

    assert caught(lessons.check_deterministic_sampler, {"stochastic_sampling": True}) == (
        "StochasticSampler",
        "[stochastic-sampler] the scheduler has stochastic_sampling on: trajectories and parity "
        "need the deterministic Euler step",
        "set stochastic_sampling: false in scheduler/scheduler_config.json",
    )
    config = {
        "use_dynamic_shifting": True,
        "shift": 1.0,
        "shift_terminal": 0.02,
        "time_shift_type": "exponential",
        "use_karras_sigmas": False,
        "use_exponential_sigmas": False,
        "use_beta_sigmas": False,
        "other": 1,
    }
    assert caught(lessons.check_sigmas_verbatim, [1.0, 0.123456], [1.0, np.float32(0.5), 0.0], config, grid="teacher") == (
        "SigmasNotVerbatim",
        "[sigmas-not-verbatim] the scheduler warps the teacher grid: passed [1.0, 0.1235], it "
        "runs [1.0, 0.5, 0.0] (scheduler config {'use_dynamic_shifting': True, 'shift': 1.0, 'shift_terminal': 0.02, "
        "'time_shift_type': 'exponential', 'use_karras_sigmas': False, 'use_exponential_sigmas': False, "
        "'use_beta_sigmas': False})",
        "use the real Turbo scheduler config (use_dynamic_shifting: false, shift: 1.0, shift_terminal: null) in "
        "scheduler/scheduler_config.json",
    )
    assert caught(lessons.check_step_count, 4, 5, passed=[1.0, 0.5], sample_sigmas=None) == (
        "GridNotHonoured",
        "[grid-not-honoured] pipe(num_inference_steps=4, sigmas=<2>) ran 5 steps, expected 2 (sample_sigmas: None)",
        "use a QwenImage21Pipeline whose scheduler takes sigmas= as given (diffusers >= 0.42)",
    )
    assert caught(lessons.check_step_count, 4, 5, passed=None, sample_sigmas=None)[1] == (
        "[grid-not-honoured] pipe(num_inference_steps=4) ran 5 steps, expected 4 (sample_sigmas: None)"
    )
    assert caught(
        lessons.check_training_outcome, objective_start=1.0, objective_end=2.0, velocity_on=0.0, velocity_off=1.0, tolerance=1.5
    ) == (
        "ObjectiveRose",
        "[objective-rose] the student objective on the training pairs did not fall: 1 -> 2",
        "lower student.learning_rate, or train longer at a lower one; the LoRA was published for inspection only",
    )
    assert caught(
        lessons.check_training_outcome, objective_start=1.0, objective_end=0.5, velocity_on=4.0, velocity_off=2.0, tolerance=1.5
    ) == (
        "VelocityDiverged",
        "[velocity-diverged] with the adapter on, the velocity MSE on the training pairs is 4, more than 1.5 x the adapter-off 2",
        "lower student.learning_rate (the recorded diverged run: 2.2 vs 0.025)",
    )
    assert caught(lessons.check_rgb, torch.zeros(1, 4, 2, 2)) == (
        "RgbaNotSliced",
        "[rgba-not-sliced] the decoded images have shape (1, 4, 2, 2), expected [B, 3, H, W] (the "
        "2.1 VAE decodes 4 channels: RGBA)",
        "slice the decode as vae.decode(z)[0][:, :3, 0] (aipc_env.workers.distill.sampler.decode_rgb)",
    )
    leaf = torch.ones(1, requires_grad=True)
    assert caught(lessons.check_embeddings_detached, leaf * 2, where="test embeddings") == (
        "EmbeddingsAttachedToGraph",
        "[embeddings-attached-to-graph] the test embeddings carry the text encoder's autograd graph (grad_fn MulBackward0)",
        "compute embeddings under torch.no_grad() (aipc_env.workers.distill.sampler.encode does), or detach them",
    )
    model = _tiny_student()
    assert caught(lessons.check_lora_before_prepare, model, torch.optim.SGD([model.lora_A], lr=1)) == (
        "LoraAfterPrepare",
        "[lora-added-after-prepare] the student was never prepared through aipc_env.workers.distill.student.prepare_student",
        "add the LoRA, build the optimizer, then prepare",
    )
    lessons.mark_prepared(model)
    model.lora_C = torch.nn.Parameter(torch.zeros(1))
    assert (
        caught(lessons.check_lora_before_prepare, model, torch.optim.SGD([model.lora_A], lr=1))[2]
        == "add the LoRA (transformer.add_adapter) before accelerator.prepare"
    )
    del model.lora_C
    assert (
        caught(lessons.check_lora_before_prepare, model, torch.optim.SGD([model.lora_A], lr=1))[2]
        == "build the optimizer from the LoRA parameters after add_adapter"
    )


def test_lora_metadata_errors_whole(tmp_path):
    import torch

    from aipc_env.distill import lesson_errors
    from aipc_env.workers.distill import lessons

    tensors = {_A: torch.zeros(4, 16), _B: torch.zeros(16, 4)}
    bare = _lora(tmp_path / "bare", tensors, None)
    with pytest.raises(lesson_errors.LoraMetadataMissing) as err:
        lessons.check_lora_metadata(bare, rank=4, alpha=8)
    assert (err.value.message, err.value.fix, err.value.path) == (
        f"[lora-metadata-missing] the LoRA in {bare} has no adapter metadata: diffusers would load it with alpha = "
        "rank (4) instead of 8, a 0.5x-strength adapter",
        "save with pipe.save_lora_weights(..., **_collate_lora_metadata({'transformer': transformer}))",
        str(bare),
    )
    lost = _lora(tmp_path / "lost", tensors, {"transformer.r": 4, "transformer.lora_alpha": 4.0})
    with pytest.raises(lesson_errors.LoraAlphaLost) as err:
        lessons.check_lora_metadata(lost, rank=4, alpha=8)
    assert (err.value.message, err.value.fix, err.value.path) == (
        f"[lora-alpha-lost] the LoRA in {lost} loads with rank 4, alpha 4.0; trained with rank 4, alpha 8",
        "publish from the trained module's peft_config (aipc_env.workers.distill.student.publish)",
        str(lost),
    )


def test_export_bounds_paths_and_what_it_writes(tmp_path):
    import torch
    from safetensors import safe_open

    from aipc_env.workers.distill.export import comfyui_state_dict, export_lora

    folder = _lora(
        tmp_path / "r1", {_A: torch.ones(1, 8), _B: torch.ones(8, 1)}, {"transformer.r": 1, "transformer.lora_alpha": 0.5}
    )  # rank 1 and alpha below 1: both usable
    dest = tmp_path / "out.safetensors"
    src = folder / "pytorch_lora_weights.safetensors"
    assert export_lora(folder, dest, provenance=_prov(tmp_path)) == {
        "format": "comfyui",
        "path": str(dest),
        "modules": 1,
        "rank": 1,
        "alpha": 0.5,
        "source": str(src),
        "licence": str(tmp_path / "LICENSE"),
        "notice": str(tmp_path / "NOTICE.md"),
    }
    licence_sha = hashlib.sha256(b"Qwen RESEARCH LICENSE AGREEMENT (test copy)\n").hexdigest()
    with safe_open(str(dest), framework="pt") as fh:
        assert fh.metadata() == {
            "format": "pt",
            "aipc_env_export": "comfyui",
            "lora_rank": "1",
            "lora_alpha": "0.5",
            "built_with": "Built with Qwen",
            "license_file": "LICENSE",
            "license_sha256": licence_sha,
            "base_model": "Qwen-Image-2.1-Turbo",
            "training_config_sha256": "c" * 64,
            "notice": "Built with Qwen. A LoRA derivative of Qwen-Image-2.1-Turbo (rank 1, alpha 0.5, 4-step "
            "distillation of its 8-step output); the base model's licence applies: see LICENSE.",
        }
        assert fh.get_tensor("diffusion_model.transformer_blocks.0.attn.to_q.alpha").dtype == torch.float32
    with pytest.raises(InputError, match="not a transformer LoRA weight"):  # 100000 tensors: at the bound, read on
        comfyui_state_dict({f"x{i}": None for i in range(100_000)}, 1, 1.0, path=tmp_path)
    bad = {_A: torch.zeros(4, 8), _B: torch.zeros(8, 4, 1)}
    with pytest.raises(InputError, match=r"lora_B \(8, 4, 1\) do not have rank 4") as err:
        comfyui_state_dict(bad, 4, 8.0, path=tmp_path / "p")
    assert err.value.path == str(tmp_path / "p")
    for meta, tensors in (
        (None, bad),
        ({"transformer.r": 4}, bad),
        ({"transformer.r": 4, "transformer.lora_alpha": 8, "transformer.use_dora": True}, bad),
        ({"transformer.r": 4, "transformer.lora_alpha": 8, "transformer.rank_pattern": {"a": 1}}, bad),
        ({"transformer.r": 0, "transformer.lora_alpha": 8}, bad),
        ({"transformer.r": 4, "transformer.lora_alpha": 8}, bad),
        ({"transformer.r": 4, "transformer.lora_alpha": 8}, {"u.lora_A.weight": torch.zeros(1)}),
        ({"transformer.r": 4, "transformer.lora_alpha": 8}, {_A: torch.zeros(4, 8)}),
    ):
        folder = _lora(tmp_path / f"m{len(list(tmp_path.iterdir()))}", tensors, meta)
        with pytest.raises(InputError) as err:
            export_lora(folder, dest, provenance=_prov(tmp_path))
        assert err.value.path == str(folder / "pytorch_lora_weights.safetensors")
    with pytest.raises(InputError) as err:
        export_lora(tmp_path / "nowhere", dest, provenance=_prov(tmp_path))
    assert err.value.path == str(tmp_path / "nowhere" / "pytorch_lora_weights.safetensors")
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    (damaged / "pytorch_lora_weights.safetensors").write_bytes(b"\x00" * 12)
    with pytest.raises(InputError) as err:
        export_lora(damaged, dest, provenance=_prov(tmp_path))
    assert err.value.message.startswith("not a readable safetensors file (SafetensorError: ")
    assert (err.value.fix, err.value.path) == (
        "publish the LoRA again with `aipc-env distill train`",
        str(damaged / "pytorch_lora_weights.safetensors"),
    )
    with pytest.raises(InputError) as err:
        export_lora(damaged, dest, "kohya", provenance=_prov(tmp_path))
    assert err.value.fix == "use one of: comfyui"


def test_export_main_needs_a_config_and_knows_one_format(capsys):
    from aipc_env.workers.distill.export import main

    with pytest.raises(SystemExit) as exc:
        main([])
    assert exc.value.code == 2 and "the following arguments are required: --config" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--config", "x", "--format", "kohya"])
    err = capsys.readouterr().err
    assert "invalid choice: 'kohya'" in err and err.startswith("usage: aipc_env.workers.distill.export ")


def test_current_inputs_and_the_model_changing(tmp_path):
    from aipc_env.distill.inputs import current_inputs, grid_hash, stale_reasons
    from aipc_env.distill.model_paths import model_key

    cfg = _cfg(tmp_path, teacher_sigmas=[1.0, 0.5])
    now = current_inputs(cfg, "train")
    assert now["lora"] == "none" and now["model"] == model_key(tmp_path / "model")
    assert now["grid"] == grid_hash(Grid(teacher=[1.0, 0.5], student=[1.0], stride=2, source="config"))
    assert "lora" not in current_inputs(cfg, "g2")
    assert stale_reasons({**now, "model": "other"}, now) == ["the model changed"]
    assert stale_reasons({**now, "new": "x"}, {**now, "new": "y"}) == ["new changed"]


# --- G3's checks on what it wrote and measured (judge.py) --------------------------------------------------------


def _g3_out(tmp_path: Path, runs: int = 2, lora: str = "ab" * 32) -> Path:
    from aipc_env.core.formats import write_model
    from aipc_env.distill.verdict import G3Entry, G3Manifest

    out = tmp_path / "g3"
    out.mkdir()
    entries = []
    for i in range(runs):
        files = {k: f"{i:03d}-seed7-{k}.png" for k in ("teacher", "naive", "student")}
        for name in files.values():
            (out / name).write_bytes(b"png")
        entries.append(G3Entry(prompt=f"p{i}", seed=7, files=files, distance_to_teacher={}))
    (out / "grid.png").write_bytes(b"png")
    write_model(
        out / "manifest.json",
        G3Manifest(
            mode="plumbing",
            metric="psnr",
            metric_note="",
            lora="l",
            lora_sha256=lora,
            teacher_sigmas=[1.0],
            student_sigmas=[1.0],
            height=32,
            width=32,
            entries=entries,
            grid="grid.png",
            mean={},
        ),
    )
    return out


def test_g3_artifacts_read_back_whole_and_each_gap_named(tmp_path):
    from aipc_env.distill.g3_verdict import artifacts_read_back
    from aipc_env.errors import AipcError

    out = _g3_out(tmp_path)
    assert artifacts_read_back(out, 2, "ab" * 32) == "2 comparisons, every image and the grid on disk, manifest reads back"
    for runs in (1, 3):  # one entry fewer or more than the runs
        with pytest.raises(
            AipcError,
            match=rf"^the G3 artifacts are incomplete: 2 of {runs} entries, missing "
            r"grid\.png$",
        ):
            artifacts_read_back(out, runs, "ab" * 32)
    with pytest.raises(AipcError, match=r"^the manifest names another LoRA than the one evaluated$"):
        artifacts_read_back(out, 2, "cd" * 32)
    (out / "001-seed7-naive.png").unlink()
    with pytest.raises(
        AipcError,
        match=r"^the G3 artifacts are incomplete: 2 of 2 entries, missing "
        r"\['001-seed7-naive\.png'\]$",
    ):
        artifacts_read_back(out, 2, "ab" * 32)
    for name in ("000-seed7-teacher.png", "000-seed7-naive.png", "000-seed7-student.png"):
        (out / name).unlink()
    with pytest.raises(
        AipcError,
        match=r"missing \['000-seed7-teacher\.png', '000-seed7-naive\.png', "
        r"'000-seed7-student\.png'\]$",
    ):
        artifacts_read_back(out, 2, "ab" * 32)
    (tmp_path / "again").mkdir()
    fresh = _g3_out(tmp_path / "again")
    (fresh / "grid.png").unlink()
    with pytest.raises(AipcError, match=r"2 of 2 entries, missing grid\.png$"):
        artifacts_read_back(fresh, 2, "ab" * 32)


def test_g3_lora_must_move_the_output_finite_images_and_beating_naive():
    from aipc_env.distill.g3_verdict import lora_changes_output, outputs_finite, student_beats_naive
    from aipc_env.distill.lesson_errors import StudentNotBetter
    from aipc_env.errors import AipcError

    with pytest.raises(
        StudentNotBetter,
        match=r"^\[student-not-better-than-naive\] with the LoRA on, the 4-step output equals "
        r"naive@4 bit for bit: the adapter is inactive or all zeros$",
    ):
        lora_changes_output(0.0)
    assert lora_changes_output(5e-45) == "the LoRA moves the 4-step latents (max |student - naive| 5e-45)"
    assert lora_changes_output(0.25) == "the LoRA moves the 4-step latents (max |student - naive| 0.25)"
    assert outputs_finite(True) == "every teacher/naive/student image is finite"
    with pytest.raises(AipcError, match=r"^an output image holds NaN or Inf values$"):
        outputs_finite(False)
    assert student_beats_naive(True, "d", margin=0.01, min_win_rate=0.5) == "d"
    with pytest.raises(
        StudentNotBetter,
        match=r"^\[student-not-better-than-naive\] the student does not beat naive@4 by "
        r"margin 0\.01 with win rate "
        r">= 0\.5: d$",
    ) as info:
        student_beats_naive(False, "d", margin=0.01, min_win_rate=0.5)
    assert info.value.name == "student-not-better-than-naive"
    assert (
        info.value.fix == "see the velocity diagnostic in `aipc-env distill report`; try endpoint weighting, a "
        "lower lr, or the on-policy phase (student.on_policy)"
    )
    with pytest.raises(StudentNotBetter) as info:
        lora_changes_output(0.0)
    assert info.value.fix == "check the train stage's verdict (did the LoRA change?) and the LoRA file's keys"


def test_a_check_list_records_lessons_and_input_errors_by_name_and_stops_nothing_else():
    from aipc_env.distill.lesson_errors import ParityBroken
    from aipc_env.workers.distill.gates import CheckList

    checks = CheckList()
    assert checks.ok is True
    assert checks.run("a", lambda: (41, "fine")) == 41

    def broken():
        raise ParityBroken("off by one ulp", fix="mirror it")

    def bad_input():
        raise InputError("no such file", fix="make it")

    assert checks.run("b", broken) is None and checks.ok is False
    assert checks.run("c", bad_input) is None
    assert [(c.name, c.ok, c.detail, c.error, c.fix) for c in checks.items] == [
        ("a", True, "fine", None, None),
        ("b", False, "[sampler-parity-broken] off by one ulp", "sampler-parity-broken", "mirror it"),
        ("c", False, "no such file", "input", "make it"),
    ]
    with pytest.raises(ZeroDivisionError):  # a bug is not a verdict
        checks.run("d", lambda: (1 / 0, ""))


@pytest.mark.parametrize("diff", [5e-324, 1e-7, 0.5, float("inf"), float("nan")])
def test_g2_parity_refuses_any_difference_even_one_float_step(diff):
    from aipc_env.distill.lesson_errors import ParityBroken
    from aipc_env.workers.distill.lessons import check_parity

    with pytest.raises(
        ParityBroken,
        match=r"^\[sampler-parity-broken\] the own 4-step loop differs from pipe\(\.\.\.\) "
        r"by up to \S+$",
    ) as info:
        check_parity(diff, steps=4, batch=2)
    assert info.value.fix == "mirror the pipeline exactly (see aipc_env.workers.distill.sampler)"


def test_g2_parity_holds_at_zero():
    from aipc_env.workers.distill.lessons import check_parity

    assert check_parity(0.0, steps=8, batch=2) == "own 8-step Euler loop == pipe(...) bit-exact (max diff 0.0, batch 2)"
    assert check_parity(-0.0, steps=4, batch=1) == "own 4-step Euler loop == pipe(...) bit-exact (max diff 0.0, batch 1)"


# --- the trained tiny teacher: G3 in quality mode on the latent distance -----------------------------------------


def test_g3_judges_the_trained_tiny_teacher_in_quality_mode_without_lpips():
    from aipc_env.distill.g3_verdict import decide_mode, g3_metric

    assert decide_mode("auto", lpips=False, tiny_random=False, tiny_trained=True) == (
        "quality",
        "the model is the trained tiny teacher (aipc_tiny.json): latent distance to teacher@8",
    )
    assert decide_mode("quality", lpips=False, tiny_random=False, tiny_trained=True) == (
        "quality",
        "eval.mode: quality (the trained tiny teacher: latent distance to teacher@8)",
    )
    assert decide_mode("plumbing", lpips=False, tiny_random=False, tiny_trained=True) == ("plumbing", "eval.mode: plumbing")
    assert g3_metric("quality", lpips=False, tiny_trained=True) == "latent_mse"
    assert g3_metric("quality", lpips=True, tiny_trained=True) == "latent_mse"  # LPIPS on a random VAE: no
    assert g3_metric("quality", lpips=True, tiny_trained=False) == "lpips"
    assert g3_metric("plumbing", lpips=True, tiny_trained=False) == "psnr"
    assert g3_metric("plumbing", lpips=False, tiny_trained=True) == "psnr"


def _entries(pairs: list[tuple[float, float]]) -> list[dict]:
    """G3 entries whose pixel MSE says the opposite of the latent MSE (the judged distance on this model)."""
    return [
        {
            "distance_to_teacher": {
                "student": {"latent_mse": s, "mse": n, "psnr": 1.0},
                "naive": {"latent_mse": n, "mse": s, "psnr": 2.0},
            }
        }
        for s, n in pairs
    ]


@pytest.mark.parametrize(
    "pairs, margin, beats",
    [
        ([(0.25, 0.5), (0.25, 0.5)], 0.25, True),  # at the margin (binary-exact values)
        ([(0.125, 0.5), (0.125, 0.5)], 0.25, True),  # below it: better than the margin asks
        ([(0.25 + 1e-9, 0.5), (0.25 + 1e-9, 0.5)], 0.25, False),  # just above it
        ([(0.375, 0.5), (0.375, 0.5)], 0.25, False),  # closer than naive, but not by the margin
        ([(0.5, 0.5), (0.5, 0.5)], 0.0, False),  # a tie with no margin
        ([(0.625, 0.5), (0.0625, 0.5)], 0.0, True),  # mean 0.34375 < 0.5, win rate 0.5: at the win-rate bound
        ([(0.625, 0.5), (0.625, 0.5), (0.0625, 0.5)], 0.0, False),  # mean 0.4375 < 0.5, win rate 1/3: below it
    ],
)
def test_g3_on_the_trained_tiny_teacher_passes_only_beating_naive_by_the_margin_in_latent_mse(pairs, margin, beats):
    from aipc_env.distill.g3_verdict import decide_entries

    got, stats = decide_entries(_entries(pairs), "latent_mse", margin=margin, min_win_rate=0.5)
    assert got is beats
    assert stats["student_mean"] == sum(s for s, _ in pairs) / len(pairs)
    assert stats["naive_mean"] == 0.5 and stats["margin"] == margin


def test_the_judged_distance_follows_the_metric():
    from aipc_env.distill.g3_verdict import METRICS, decide_entries

    assert {m: k for m, (k, _) in METRICS.items()} == {"lpips": "lpips", "latent_mse": "latent_mse", "psnr": "mse"}
    entries = _entries([(0.25, 0.5)])  # latent: the student is closer; pixel: naive is
    assert decide_entries(entries, "latent_mse", margin=0.0, min_win_rate=0.5)[0] is True
    assert decide_entries(entries, "psnr", margin=0.0, min_win_rate=0.5)[0] is False


def test_the_tiny_trained_profile_is_quality_mode_with_its_margin(tmp_path):
    from aipc_env.distill.config import TINY_TRAINED_MARGIN

    data = default_distill_config(tmp_path / "run", profile="tiny-trained")
    assert data["model"] == "builtin:tiny-qwen-image-2.1-trained"
    assert data["prompts"] == {"train": "builtin:shapes-prompts", "eval": "builtin:shapes-eval-prompts"}
    assert data["eval"] == {"mode": "quality", "seeds": list(range(1000, 1016)), "margin": 0.0005}
    assert TINY_TRAINED_MARGIN == 0.0005
    assert (data["height"], data["width"], data["threads"]) == (64, 64, 1)
    (tmp_path / "d.yaml").write_text(yaml.safe_dump(data))
    cfg = load_distill_config(tmp_path / "d.yaml")  # quality mode without LPIPS weights: accepted on this model
    assert cfg.eval.mode == "quality" and cfg.eval.lpips_weights is None
    data["model"] = "builtin:tiny-qwen-image-2.1-trainedx"
    (tmp_path / "d.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(InputError) as err:
        load_distill_config(tmp_path / "d.yaml")
    assert err.value.message == "unknown built-in model 'builtin:tiny-qwen-image-2.1-trainedx'"
    assert err.value.fix == ("use builtin:tiny-qwen-image-2.1 or builtin:tiny-qwen-image-2.1-trained, or a model folder")


@pytest.mark.parametrize(
    "mark, kind",
    [
        (None, None),  # no mark: a real model
        ("{}", "random"),
        ('{"kind": "qwen-image-2.1", "version": 2}', "random"),
        ('{"kind": "qwen-image-2.1", "version": 1, "trained": {"steps": 1500}}', "trained"),
        ('{"trained": true}', "random"),  # not a training record
        ('{"trained": {}', "random"),  # unreadable: counts as random (nothing is judged)
        ("[1, 2]", "random"),
    ],
)
def test_a_tiny_models_mark_says_whether_it_was_trained(tmp_path, mark, kind):
    from aipc_env.workers.distill.models import is_tiny_random, is_tiny_trained, tiny_kind

    folder = _model(tmp_path / "Qwen-Image-2.1-Turbo")
    if mark is not None:
        (folder / "aipc_tiny.json").write_text(mark)
    assert tiny_kind(folder) == kind
    assert is_tiny_random(folder) is (kind == "random") and is_tiny_trained(folder) is (kind == "trained")


def test_quality_mode_without_lpips_only_on_a_folder_marked_trained(tmp_path):
    data = default_distill_config(tmp_path / "run")
    data["eval"] = {"mode": "quality"}
    data["model"] = str(_model(tmp_path / "m"))
    (tmp_path / "m" / "aipc_tiny.json").write_text('{"trained": {"steps": 1}}')
    (tmp_path / "d.yaml").write_text(yaml.safe_dump(data))
    assert load_distill_config(tmp_path / "d.yaml").eval.mode == "quality"
    (tmp_path / "m" / "aipc_tiny.json").write_text("{}")  # a random tiny model under the same folder
    with pytest.raises(InputError, match="needs LPIPS"):
        load_distill_config(tmp_path / "d.yaml")


def test_the_shapes_prompts_have_one_length_and_a_seed_per_line():
    from aipc_env.distill.prompts import load_prompts

    train = load_prompts("builtin:shapes-prompts")
    assert len(train) == 512 and [r.seed for r in train] == list(range(512))
    assert {r.prompt for r in train} == {"a blue square", "a blue stripe", "a gold square", "a gold stripe"}
    assert {len(r.prompt) for r in train} == {13}  # byte-level tokens: one length, no padding in training
    assert [(r.prompt, r.seed) for r in load_prompts("builtin:shapes-eval-prompts")] == [
        ("a blue square", None),
        ("a blue stripe", None),
        ("a gold square", None),
        ("a gold stripe", None),
    ]
    assert load_prompts("builtin:shapes-prompts", limit=3)[2].seed == 2


@pytest.mark.parametrize(
    "teacher, untrained, ok",
    [
        (0.25, 1.0, True),  # at the bound (ratio 0.25, binary-exact)
        (0.125, 1.0, True),  # below it
        (0.25 + 1e-9, 1.0, False),  # just above it
        (float("nan"), 1.0, False),
    ],
)
def test_the_tiny_teacher_is_cached_only_when_its_samples_are_structured(teacher, untrained, ok):
    from aipc_env.distill.shapes import STRUCTURED_RATIO, check_structured
    from aipc_env.errors import AipcError

    assert STRUCTURED_RATIO == 0.1
    if ok:
        assert check_structured(teacher, untrained, 0.25) == (
            f"teacher@8 distance to the data {teacher:.4g} vs an untrained transformer's 1 (bound: at most 0.25 times)"
        )
    else:
        with pytest.raises(AipcError, match=r"^the tiny teacher did not learn its distribution: teacher@8"):
            check_structured(teacher, untrained, 0.25)


def test_the_trained_builtin_is_built_once_into_the_cache(tmp_path, monkeypatch):
    """model_dir builds the trained teacher only when the cached one is missing, of another version or not the one
    its record hashed (aipc_env.train.buildcache), and publishes it whole."""
    import sys
    import types

    from aipc_env.distill import shapes
    from aipc_env.distill.model_paths import trained_tiny_path
    from aipc_env.workers.distill.models import TRAINED_RECORD, model_dir

    monkeypatch.setenv("AIPC_ENV_CACHE_DIR", str(tmp_path / "cache"))
    built: list[Path] = []

    def build(out, log=print):
        built.append(out)
        _model(out)
        (out / "aipc_tiny.json").write_text('{"version": 1, "trained": {"steps": 1500}}')
        return out

    monkeypatch.setitem(sys.modules, "aipc_env.workers.distill.tinytrained21", types.SimpleNamespace(build_tiny21_trained=build))
    data = default_distill_config(tmp_path / "run", profile="tiny-trained")
    (tmp_path / "d.yaml").write_text(yaml.safe_dump(data))
    cfg = load_distill_config(tmp_path / "d.yaml")
    where = tmp_path / "cache" / "models" / "tiny-qwen-image-2.1-trained-v1"
    assert trained_tiny_path() == where
    assert model_dir(cfg, log=lambda m: None) == where and len(built) == 1 and built[0] != where  # built aside
    assert (where / TRAINED_RECORD).is_file() and (where / "aipc_tiny.json").is_file()
    assert model_dir(cfg, log=lambda m: None) == where and len(built) == 1  # cached: not built again
    (where / "aipc_tiny.json").write_text('{"version": 0, "trained": {"steps": 1500}}')  # an edited mark
    assert model_dir(cfg, log=lambda m: None) == where and len(built) == 2
    (where / "extra.json").write_text("{}")  # a file the build did not write
    assert model_dir(cfg, log=lambda m: None) == where and len(built) == 3
    assert not (where / "extra.json").exists()
    monkeypatch.setattr(shapes, "TRAINED21_VERSION", 2)  # another version of the teacher: another folder
    assert model_dir(cfg, log=lambda m: None) == trained_tiny_path() != where and len(built) == 4


def test_only_the_five_stages_write_verdicts():
    from aipc_env.distill.verdict import is_stage

    names = ("g0", "g2", "trajectories", "train", "g3", "report", "G0", "g1", "")
    assert [n for n in names if is_stage(n)] == ["g0", "g2", "trajectories", "train", "g3"]


def test_the_worker_refuses_an_unknown_stage_by_name_before_loading_anything():
    from aipc_env.workers.distill.worker import run_stage

    with pytest.raises(InputError, match="unknown distill stage 'g1'"):
        run_stage(None, "g1", frozenset())


def test_every_injectable_fault_is_planted_somewhere_and_offered_by_the_command() -> None:
    """One table of faults (distill.verdict.INJECTABLE): the command offers exactly it, and each fault is read by the
    stage code that plants it (a fault nobody plants would prove nothing)."""
    import argparse

    from aipc_env.commands import distill as command
    from aipc_env.distill.verdict import INJECTABLE, STAGES

    parser = argparse.ArgumentParser()
    command.add_parser(parser.add_subparsers())
    sub = parser._subparsers._group_actions[0].choices["distill"]  # type: ignore[union-attr]
    stage = sub._subparsers._group_actions[0].choices["all"]  # type: ignore[union-attr]
    inject = next(a for a in stage._actions if a.dest == "inject")
    assert list(inject.choices) == list(INJECTABLE)
    assert set(INJECTABLE.values()) <= set(STAGES)
    src = Path(command.__file__).parents[1] / "workers" / "distill"  # the stage code runs in the training env
    planted = "".join(p.read_text(encoding="utf-8") for p in src.glob("*.py"))
    for fault in INJECTABLE:
        assert f'"{fault}" in inject' in planted or f'"{fault}" not in inject' in planted, fault
