"""Dataset validation on scans built in the test (validate_scan is pure given the images): the messages of broken,
non-RGB and missing images, empty prompts per format, vague prompts with a trailing dot, the ellipsis of the
control-count detail at exactly three, and the list of small images cut at five. Expected texts are literals."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from aipc_env.dataset.scan import Sample, Scan
from aipc_env.dataset.validate import validate_scan

PROMPT = "Add the small red character to the left side of the image please"


def _png(path: Path, size=(64, 64), mode="RGB") -> Path:
    Image.new(mode, size).save(path)
    return path


def _sample(
    root: Path,
    sid: str,
    *,
    controls: int = 1,
    size=(64, 64),
    prompt: str | None = PROMPT,
    mode="RGB",
    prompt_file: Path | None = None,
) -> Sample:
    return Sample(
        id=sid,
        target=_png(root / f"{sid}.png", size, mode),
        controls=[_png(root / f"{sid}_c{i}.png") for i in range(controls)],
        prompt=prompt,
        prompt_file=prompt_file,
        where=f"{sid}.png",
    )


def _verdict(tmp_path, samples, fmt="csv", target_size=(64, 64)):
    return validate_scan(Scan(fmt, tmp_path, samples), target_size)


def test_broken_missing_and_non_rgb_images(tmp_path):
    broken = _sample(tmp_path, "a")
    (tmp_path / "a.png").write_bytes(b"\x89PNG\r\n\x1a\n not really")
    grey = _sample(tmp_path, "b", mode="L")
    gone = _sample(tmp_path, "c")
    gone.controls = [tmp_path / "missing.png"]
    in_memory = _sample(tmp_path, "d")
    in_memory.target = b"GIF89a broken"
    masked = _sample(tmp_path, "e")
    masked.mask = _png(tmp_path / "e_mask.png", mode="L")  # a mask need not be RGB
    verdict = _verdict(tmp_path, [broken, grey, gone, in_memory, masked])
    assert verdict.issues == [
        "a.png: target is not an image aipc-env reads (PNG, JPEG, WEBP, BMP)",
        "b.png: target is L, not RGB (convert it: RGBA, greyscale and palette images are not handled like RGB)",
        f"c.png: control 0 {tmp_path / 'missing.png'} does not exist",
        "d.png: target is not an image aipc-env reads (PNG, JPEG, WEBP, BMP)",
    ]
    assert verdict.valid is False


@pytest.mark.parametrize(
    ("fmt", "prompt_file", "issue"),
    [
        ("csv", None, "s.png: empty prompt"),
        ("parquet", None, "s.png: empty prompt"),
        ("local", None, "s.png: no prompt (upstream silently drops such a sample); add s.txt with the edit instruction"),
        ("local", "s.txt", "s.png: its prompt file s.txt is empty; write the edit instruction into it"),
    ],
)
def test_a_sample_without_a_prompt_per_format(tmp_path, fmt, prompt_file, issue):
    sample = _sample(tmp_path, "s", prompt=None, prompt_file=tmp_path / prompt_file if prompt_file else None)
    assert _verdict(tmp_path, [sample], fmt).issues == [issue, "1 sample(s): at least 5 are needed"]


@pytest.mark.parametrize(
    ("prompt", "vague"),
    [
        ("Edit the image.", True),
        ("  make it better...  ", True),
        ("EDIT", True),
        (".edit", False),
        ("edit the images", False),
    ],
)
def test_vague_prompts_ignore_case_spaces_and_final_dots(tmp_path, prompt, vague):
    warnings = _verdict(tmp_path, [_sample(tmp_path, "s", prompt=prompt)]).warnings
    assert (f"s.png: prompt {prompt!r} is too vague to teach an edit" in warnings) is vague


@pytest.mark.parametrize(
    ("in_group", "shown"),
    [
        (2, "1 control(s): s0, s1"),
        (3, "1 control(s): s0, s1, s2"),
        (4, "1 control(s): s0, s1, s2…"),
    ],
)
def test_the_control_count_detail_cuts_after_three(tmp_path, in_group, shown):
    samples = [_sample(tmp_path, f"s{i}") for i in range(in_group)] + [_sample(tmp_path, "t", controls=2)]
    assert _verdict(tmp_path, samples).issues[0] == (
        f"samples have different numbers of control images ({shown}; 2 control(s): t); upstream takes the count "
        "from the first sample (s0) and fails or ignores controls on the others"
    )


def test_small_targets_are_listed_up_to_five(tmp_path):
    samples = [_sample(tmp_path, f"s{i}", size=(32 + i, 48)) for i in range(6)]
    warnings = _verdict(tmp_path, samples).warnings
    assert warnings[0] == (
        "6 target image(s) smaller than target_size [64, 64] (height 64 px, width 64 px) will be upscaled: "
        "s0 (32 wide, 48 high), s1 (33 wide, 48 high), s2 (34 wide, 48 high), s3 (35 wide, 48 high), "
        "s4 (36 wide, 48 high)"
    )
    assert _verdict(tmp_path, samples, target_size=None).warnings[0] == (
        "6 samples: enough for a smoke test only (20–50 for a narrow task)"
    )


def test_the_small_target_warning_says_which_side_is_the_width(tmp_path):
    """target_size is height then width (384 672: 384 high, 672 wide); a picture 90 wide and 60 high misses a
    (48, 96) target on its width alone, and the warning says so in words."""
    samples = [_sample(tmp_path, f"s{i}", size=(90, 60)) for i in range(6)]
    warnings = _verdict(tmp_path, samples, target_size=(48, 96)).warnings
    assert warnings[0] == (
        "6 target image(s) smaller than target_size [48, 96] (height 48 px, width 96 px) will be upscaled: "
        "s0 (90 wide, 60 high), s1 (90 wide, 60 high), s2 (90 wide, 60 high), s3 (90 wide, 60 high), "
        "s4 (90 wide, 60 high)"
    )
    assert not any("upscaled" in w for w in _verdict(tmp_path, samples, target_size=(48, 80)).warnings)
