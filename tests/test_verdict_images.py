"""The judge's and compare's verdict on images (aipc_env.workers.compare.measure_images): each distance is measured in
pixels at the generated image's size, beside the baselines; outputs that cheat (the control copied, the mean of the
other targets, one constant image) are each judged not learned by the baseline that names the cheat, and an output
that does the edit passes."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from aipc_env.workers.compare import measure_images


def _img(a: np.ndarray) -> Image.Image:
    return Image.fromarray(np.clip(a, 0, 255).astype(np.uint8))


def _edit_set(n: int = 4, size: int = 32):
    """n samples of an edit: the control is a textured colour, the target the same image with its colours inverted
    and a bar painted across it (far from the control, different per sample)."""
    rng = np.random.default_rng(5)
    out = []
    for i in range(n):
        colour = rng.integers(40, 215, 3)
        control = colour + rng.normal(0, 25, (size, size, 3))
        target = 255 - control
        target[size // 3 : size // 2] = rng.integers(0, 255, 3)
        out.append((f"s{i}", _img(control), _img(target)))
    return out


def _judge(outputs):
    return measure_images(outputs, margin=0.2)


def test_an_output_that_does_the_edit_passes_against_every_baseline():
    rng = np.random.default_rng(0)
    samples = _edit_set()
    # the base returns the control slightly changed; the LoRA the target with a little noise
    outputs = [
        (sid, _img(np.asarray(c, float) + 10), _img(np.asarray(t, float) + rng.normal(0, 4, (32, 32, 3))), c, t)
        for sid, c, t in samples
    ]
    v = _judge(outputs)
    assert v.learned and v.outcome == "learned" and v.not_beaten == []
    assert v.metric == "mean absolute pixel difference, 0-255" and v.mean_target_mean is not None
    assert v.lora_mean < 0.8 * min(v.base_mean, v.copy_mean, v.mean_target_mean)


@pytest.mark.parametrize("cheat", ["copy", "mean_target", "constant"])
def test_cheating_outputs_are_not_learned_by_the_named_baseline(cheat):
    samples = _edit_set()
    targets = [np.asarray(t, float) for *_, t in samples]
    outputs = []
    for j, (sid, c, t) in enumerate(samples):
        if cheat == "copy":
            lora = c
        elif cheat == "mean_target":
            lora = _img(np.mean([x for k, x in enumerate(targets) if k != j], axis=0))
        else:
            lora = _img(np.full((32, 32, 3), 128.0))
        base = _img(np.asarray(c, float) * 0.5)  # a base that does something else
        outputs.append((sid, base, lora, c, t))
    v = _judge(outputs)
    assert not v.learned and v.outcome == "not_learned"
    expected = "mean_target" if cheat == "constant" else cheat
    assert expected in v.not_beaten, v
    if cheat != "constant":
        assert v.not_beaten[0] == cheat and v.reason.startswith(
            {
                "copy": "the LoRA is no closer than returning the control",
                "mean_target": "the LoRA is no closer than the mean of the other targets",
            }[cheat]
        )


def test_distances_are_at_the_generated_size_and_one_sample_has_no_mean_target():
    sid, control, target = _edit_set(1, size=48)[0]
    small = control.resize((32, 32))
    v = _judge([(sid, small, small, control, target)])
    s = v.samples[0]
    # the control resized to the output's size is the output itself: the copy's distance equals the LoRA's
    assert s.copy_control == s.lora == s.base
    assert s.mean_target is None and v.mean_target_mean is None
    expected = np.abs(np.asarray(small, float) - np.asarray(target.resize((32, 32)), float)).mean()
    assert s.lora == round(float(expected), 3)


def test_the_judge_says_judge_at_least_every_interval_while_busy():
    import time

    from aipc_env.workers.heldout_phase import PROGRESS_SECONDS, HeldOutProgress

    assert PROGRESS_SECONDS <= 10
    lines: list[str] = []
    with HeldOutProgress(lines.append, every=0.05) as progress:
        progress.say("compare: base 1/3 (12.0 s)")
        time.sleep(0.4)
    said = len(lines)
    time.sleep(0.15)
    assert len(lines) == said  # silent once the work is done
    assert lines[0] == "judge: base 1/3 (12.0 s)"
    beats = lines[1:]
    assert len(beats) >= 3 and all(b.startswith("judge: base 1/3 (12.0 s) ... still working (") for b in beats)
