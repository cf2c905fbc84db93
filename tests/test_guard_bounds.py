"""Guards tested at, just below and just above their bounds, with literal expected values: each case here was a
realistic one-token bug (a dropped tie-break, `>=` turned into `>`, `or` into `and`, a multiple of 8 accepted)
that the area's other tests let through."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image
from pydantic import ValidationError

from aipc_env.dataset import validate_dataset
from aipc_env.matrix.resolve import resolve_pair
from aipc_env.train.config import DataSection
from aipc_env.trainenv.requirements import edit_requirements

# -- matrix resolution: the fewest contradictions win among pairs with as many matches --------------------------


def test_fewest_contradictions_break_a_tie(matrix):
    # tcmlib 1.2.0 is in xpu-2.6 and 2.7 alike; on Windows intel-pti is fingerprinted by 2.7 alone (2.6 pins it for
    # Linux only), so a different version of it contradicts 2.7 only
    res = resolve_pair({"tcmlib": "1.2.0", "intel-pti": "2099.1.0"}, matrix, "win-64")
    assert res.pair == "xpu-2.6" and res.candidates == ["xpu-2.6"]
    # the same evidence with 2.7's own version: no contradiction, and 2.7 then matches more
    res = resolve_pair({"tcmlib": "1.2.0", "intel-pti": "0.10.1"}, matrix, "win-64")
    assert res.pair == "xpu-2.7"
    # and with nothing against either, both stay candidates
    res = resolve_pair({"tcmlib": "1.2.0"}, matrix, "win-64")
    assert res.status == "ambiguous" and res.candidates == ["xpu-2.6", "xpu-2.7"]


# -- patch-requirements: bitsandbytes is raised only when the line admits a version below the pair's minimum ----


@pytest.mark.parametrize(
    "line, edited",
    [
        ("bitsandbytes>=0.50.1", True),  # below the bound
        ("bitsandbytes>=0.50.2", False),  # at it
        ("bitsandbytes>=0.50.3", False),  # above it
        ("bitsandbytes==0.50.1", True),
        ("bitsandbytes==0.50.2", False),
        ("bitsandbytes>0.50.1", True),  # admits 0.50.1.post1, below the minimum
        ("bitsandbytes>0.50.2", False),
        ("bitsandbytes", True),
        ("bitsandbytes<=0.50", True),
    ],
)
def test_bitsandbytes_minimum_at_below_and_above(matrix, line, edited):
    pair = matrix.get("xpu-2.10")
    assert pair.bitsandbytes_min == "0.50.2"
    result = edit_requirements(f"diffusers\n{line}\n", pair=pair, xpu_index="https://download.pytorch.org/whl/xpu")
    touched = any("bitsandbytes" in e for e in result.edits)
    assert touched is edited, (line, result.edits)
    if edited:
        assert "bitsandbytes>=0.50.2" in result.text


# -- dataset: a target smaller than target_size on either side is reported -----------------------------------------


def _one_sample(root: Path, size: tuple[int, int]) -> Path:
    for folder, name in (("training_images", "s0.png"), ("control_images", "s0.png")):
        (root / folder).mkdir(parents=True, exist_ok=True)
        Image.new("RGB", size, (200, 10, 10)).save(root / folder / name)
    (root / "training_images" / "s0.txt").write_text("Add the small red character to the left side of the image")
    return root


@pytest.mark.parametrize(
    "width, height, small",
    [
        (64, 64, False),  # at the bound
        (63, 64, True),  # only the width below
        (64, 63, True),  # only the height below
        (63, 63, True),
        (65, 65, False),
    ],
)
def test_small_target_images_on_either_side(tmp_path, width, height, small):
    verdict = validate_dataset(_one_sample(tmp_path / "ds", (width, height)), (64, 64))  # (height, width)
    warned = any("smaller than target_size" in w for w in verdict.warnings)
    assert warned is small, verdict.warnings


def test_target_size_height_and_width_are_not_swapped(tmp_path):
    # target_size is (height, width): a 100 wide, 50 high image is too small for (64, 32) only in height
    assert any("smaller" in w for w in validate_dataset(_one_sample(tmp_path / "a", (100, 50)), (64, 32)).warnings)
    assert not any("smaller" in w for w in validate_dataset(_one_sample(tmp_path / "b", (50, 100)), (64, 32)).warnings)


# -- train config: image sides are multiples of 16, at least 16 --------------------------------------------------


@pytest.mark.parametrize(
    "side, ok", [(8, False), (15, False), (16, True), (17, False), (24, False), (32, True), (40, False), (48, True)]
)
def test_target_size_sides_are_multiples_of_16(side, ok):
    data = {"datasets": ["ds"], "target_size": [side, 64]}
    if ok:
        assert tuple(DataSection.model_validate(data).target_size) == (side, 64)
    else:
        with pytest.raises(ValidationError, match="multiples of 16"):
            DataSection.model_validate(data)


# -- env drift: each kind its own case, from literal lock and manifest data --------------------------------------


def _drift(installed: dict[str, str], manifest_sha: str | None = "a" * 64, modified=None, platform="linux-64"):
    from aipc_env.lock.lockfile import Pylock
    from aipc_env.trainenv.drift import Manifest, compute_drift

    lock = Pylock.model_validate(
        {
            "lock_version": "1.0",
            "packages": [
                {
                    "name": "tinydep",
                    "version": "2.0",
                    "wheels": [{"url": "https://example.org/tinydep-2.0-py3-none-any.whl", "hashes": {"sha256": "a" * 64}}],
                },
                {
                    "name": "winonly",
                    "version": "1.0",
                    "marker": "sys_platform == 'win32'",
                    "wheels": [{"url": "https://example.org/winonly-1.0-py3-none-any.whl", "hashes": {"sha256": "c" * 64}}],
                },
                {"name": "nohash", "version": "3.0", "wheels": [{"url": "https://example.org/nohash-3.0-py3-none-any.whl"}]},
                {"name": "nowheel", "version": "4.0"},
            ],
        }
    )
    manifest = (
        None
        if manifest_sha is None
        else Manifest.model_validate(
            {
                "pair": "xpu-2.13",
                "platform": "linux-64",
                "lockfile": "pylock.linux-64.toml",
                "installed_at": "2026-12-01T00:00:00+00:00",
                "packages": {
                    "tinydep": {"version": "2.0", "sha256": manifest_sha},
                    "nohash": {"version": "3.0", "sha256": ""},
                    "nowheel": {"version": "4.0", "sha256": ""},
                },
            }
        )
    )
    installed = {"nohash": "3.0", "nowheel": "4.0", **installed}
    return [
        (d.kind, d.name, d.locked, d.installed, d.files, d.describe())
        for d in compute_drift(lock, installed, manifest, platform, "3.11", modified)
    ]


def test_env_drift_kinds_one_by_one():
    assert _drift({"tinydep": "2.0"}) == []  # winonly is for Windows only: not missing on linux-64
    assert _drift({"tinydep": "2.0"}, platform="win-64") == [  # the marker is judged for the env's platform
        ("missing", "winonly", "1.0", None, [], "winonly 1.0: in the lock, not installed")
    ]
    assert _drift({}) == [("missing", "tinydep", "2.0", None, [], "tinydep 2.0: in the lock, not installed")]
    assert _drift({"tinydep": "1.0"}) == [("version", "tinydep", "2.0", "1.0", [], "tinydep: lock has 2.0, env has 1.0")]
    assert _drift({"tinydep": "2.0"}, manifest_sha="b" * 64) == [  # same version, another artifact
        (
            "hash",
            "tinydep",
            "a" * 12,
            "b" * 12,
            [],
            f"tinydep: the lock's artifact changed (sha256 {'a' * 12}), env has {'b' * 12}",
        )
    ]
    assert _drift({"tinydep": "2.0"}, manifest_sha=None) == []  # no manifest: hashes cannot be compared
    assert _drift({"tinydep": "2.0"}, modified={"tinydep": ["b.py", "a.py"]}) == [
        (
            "modified",
            "tinydep",
            "2.0",
            "2.0",
            ["a.py", "b.py"],
            "tinydep 2.0: 2 installed file(s) changed since the install (a.py, b.py)",
        )
    ]
    assert _drift({"tinydep": "2.0", "Stray_Pkg": "1"}) == [
        ("extra", "stray-pkg", None, "1", [], "stray-pkg 1: installed, not in the lock")
    ]
    # a version drift is reported as such even when the hash differs too (the version says more)
    assert [d[0] for d in _drift({"tinydep": "1.0"}, manifest_sha="b" * 64)] == ["version"]


@pytest.mark.parametrize("count, shown", [(3, "a0, a1, a2)"), (4, "a0, a1, a2 ...)"), (2, "a0, a1)")])
def test_modified_files_are_listed_up_to_three(count, shown):
    from aipc_env.trainenv.drift import DriftItem

    item = DriftItem(kind="modified", name="x", installed="1", files=[f"a{i}" for i in range(count)])
    assert item.describe() == f"x 1: {count} installed file(s) changed since the install ({shown}"


# -- requirements: which specifier pairs conflict, and the in-place edit with its backup ---------------------------


@pytest.mark.parametrize(
    "a, b, conflict",
    [
        ("", ">=1", False),  # no constraint on one side
        (">=1.0", "<1.0", True),
        ("<=1.0", ">=1.0", False),  # 1.0 satisfies both: at the bound
        ("==2.0", ">=1.5", False),
        ("<2", ">=2", True),
        ("==69.5.1", ">=77.0.3", True),  # the runbook's setuptools case
        ("~=1.4", ">=1.5", False),
        ("==1.*", ">=2", True),
        ("==1.4.*", "<1.4.1", False),
        ("==1.2.3", ">1.2.3", True),
        (">1.2.3", "<1.2.5", False),  # 1.2.4: the next micro
        (">1.2.9", "<1.4", False),  # 1.3.0: the next minor
        (">1.9.9", "<2.1", False),
        ("==2.0.0rc1", ">=1.0", False),  # a pre-release satisfies both
        (">2.0", "<2.0.2", False),  # 2.0.1: the next micro of a two-part version (padded with 0)
        (">2.0,!=2.0.0.1", "<2.0.2", False),  # 2.0.1 again: the next micro has three parts
        (">=2.0.0rc1", "<2.0.0", True),  # PEP 440: <2.0.0 excludes 2.0.0's own pre-releases
        ("===weird", ">=1", False),  # not a version: never called a conflict
    ],
)
def test_specifiers_conflict(a, b, conflict):
    from packaging.specifiers import SpecifierSet

    from aipc_env.trainenv.requirements import specifiers_conflict

    assert specifiers_conflict(SpecifierSet(a), SpecifierSet(b)) is conflict
    assert specifiers_conflict(SpecifierSet(b), SpecifierSet(a)) is conflict


ORIGINAL = b"\xef\xbb\xbftorch==2.3.0\r\nbitsandbytes==0.43.0\r\ndiffusers\r\n"


def _apply(path, matrix, dry_run=False):
    from aipc_env.trainenv.requirements import apply_edits

    return apply_edits(
        path,
        pair=matrix.get("xpu-2.10"),
        xpu_index="https://download.pytorch.org/whl/xpu",
        pip_layer=None,
        locked=None,
        dry_run=dry_run,
    )


def test_apply_edits_dry_run_then_real_then_again(tmp_path, matrix):
    import stat

    path = tmp_path / "requirements.txt"
    path.write_bytes(ORIGINAL)
    path.chmod(0o640)
    result, diff, backup = _apply(path, matrix, dry_run=True)
    assert result.changed and backup is None and path.read_bytes() == ORIGINAL
    assert not (tmp_path / "requirements.txt.aipc-backup").exists()
    assert diff.startswith(f"--- {path}\n+++ {path} (aipc-env)\n") and "-torch==2.3.0" in diff
    result, diff, backup = _apply(path, matrix)
    assert backup == tmp_path / "requirements.txt.aipc-backup" and backup.read_bytes() == ORIGINAL
    assert stat.S_IMODE(backup.stat().st_mode) == 0o640 and stat.S_IMODE(path.stat().st_mode) == 0o640
    edited = path.read_bytes()
    assert edited.startswith(b"\xef\xbb\xbf") and b"\r\n" in edited and b"bitsandbytes>=0.50.2" in edited
    assert b"torch==2.10.0+xpu" in edited and edited.count(b"\xef\xbb\xbf") == 1
    again, diff, backup = _apply(path, matrix)
    assert not again.changed and diff == "" and path.read_bytes() == edited
    assert backup is None and (tmp_path / "requirements.txt.aipc-backup").read_bytes() == ORIGINAL


def test_apply_edits_refusals_change_nothing(tmp_path, matrix):
    from aipc_env.errors import InputError

    def refusal(path):
        with pytest.raises(InputError) as caught:
            _apply(path, matrix)
        return caught.value.message, caught.value.path, caught.value.fix

    assert refusal(tmp_path / "nope.txt") == (
        "requirements file not found",
        str(tmp_path / "nope.txt"),
        "pass the clone's requirements.txt",
    )
    assert refusal(tmp_path) == ("is a folder, expected a requirements file", str(tmp_path), None)
    path = tmp_path / "requirements.txt"
    path.write_bytes(ORIGINAL)
    path.chmod(0o444)
    assert refusal(path) == (
        "the requirements file is read-only; nothing was changed",
        str(path),
        "make it writable (chmod u+w, or clear the read-only attribute) and run again, or use --dry-run to see the edits",
    )
    assert path.read_bytes() == ORIGINAL and not (tmp_path / "requirements.txt.aipc-backup").exists()
    result, _, backup = _apply(path, matrix, dry_run=True)  # a dry run of a read-only file is fine
    assert result.changed and backup is None


def test_apply_edits_without_a_bom_writes_none(tmp_path, matrix):
    path = tmp_path / "requirements.txt"
    path.write_bytes(ORIGINAL[3:])
    _apply(path, matrix)
    assert path.read_bytes().startswith(b"# aipc-env: torch comes from the pair's XPU pins below\r\n# torch==2.3.0")
    assert b"torch==2.10.0+xpu" in path.read_bytes()


UPSTREAM_LIKE = (
    "# upstream requirements\n"
    "torch>=2.3\n"
    "torchvision\n"
    "bitsandbytes==0.43.0 ; sys_platform != 'darwin'\n"
    "setuptools==69.5.1\n"
    "flash-attn==2.5.8\n"
    "diffusers[torch]>=0.33 # pinned upstream\n"
    "-e .\n"
    "diffusers==0.34\n"
    "  peft>=0.10\n"
    "https://example.org/x.whl\n"
)
EDITED = (
    "# upstream requirements\n"
    "# aipc-env: torch comes from the pair's XPU pins below\n"
    "# torch>=2.3\n"
    "# aipc-env: torchvision comes from the pair's XPU pins below\n"
    "# torchvision\n"
    'bitsandbytes>=0.50.2; sys_platform != "darwin"  # aipc-env: XPU needs >= 0.50.2\n'
    "setuptools==69.5.1\n"
    "# aipc-env: flash-attn is CUDA-only (aipc-env uses PyTorch SDPA on XPU)\n"
    "# flash-attn==2.5.8\n"
    "diffusers[torch]>=0.33 # pinned upstream\n"
    "-e .\n"
    "diffusers==0.34\n"
    "  peft>=0.10\n"
    "https://example.org/x.whl\n"
    "# aipc-env: the pair's XPU torch (xpu-2.10), from the PyTorch XPU index: a plain `pip install -r` keeps it "
    "and never\n"
    "# aipc-env: takes PyPI's CUDA build (and its nvidia-* packages) instead\n"
    "--extra-index-url https://download.pytorch.org/whl/xpu\n"
    "torch==2.10.0+xpu\n"
    "torchvision==0.25.0+xpu\n"
)


def test_the_whole_edit_of_an_upstream_like_file(matrix):
    """Every line as written (reviewed by hand): torch lines commented for the pair's pins, bitsandbytes raised
    with its marker kept, CUDA-only packages commented, repeats and pip-layer conflicts reported, other lines
    (options, URLs, indentation, comments) untouched; a second pass changes nothing."""
    kwargs = {
        "pair": matrix.get("xpu-2.10"),
        "xpu_index": "https://download.pytorch.org/whl/xpu",
        "pip_layer": ["peft==0.9.0", "accelerate>=1.0"],
        "locked": None,
    }
    result = edit_requirements(UPSTREAM_LIKE, **kwargs)
    assert result.changed and result.text == EDITED
    assert result.edits == [
        "line 2: torch replaced by the pair's XPU build",
        "line 3: torchvision replaced by the pair's XPU build",
        "line 4: \"bitsandbytes==0.43.0 ; sys_platform != 'darwin'\" -> bitsandbytes>=0.50.2 (XPU backend)",
        "line 6: commented out flash-attn",
        "appended torch==2.10.0+xpu, torchvision==0.25.0+xpu with the XPU index line (https://download.pytorch.org/whl/xpu)",
    ]
    assert result.report == [
        "line 9: diffusers is listed again (first on line 7); pip takes both, and conflicting pins fail the install",
        "line 10: peft>=0.10 conflicts with aipc-env's pip layer (peft==0.9.0): this env cannot also be aipc-env's training env",
    ]
    again = edit_requirements(EDITED, **kwargs)
    assert not again.changed and again.text == EDITED and again.edits == []
    crlf = edit_requirements(UPSTREAM_LIKE.replace("\n", "\r\n"), **kwargs)
    assert crlf.text == EDITED.replace("\n", "\r\n")


# -- dataset: the whole verdict of a flawed folder, and the count and prompt-length bounds --------------------------

PROMPT = "Add the small red character to the left side of the image please"


def _image(path: Path, size=(64, 64), mode="RGB") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new(mode, size).save(path)


def _samples(root: Path, n: int, prompt: str = PROMPT) -> Path:
    for i in range(n):
        _image(root / "training_images" / f"s{i:03d}.png")
        _image(root / "control_images" / f"s{i:03d}.png")
        (root / "training_images" / f"s{i:03d}.txt").write_text(prompt, encoding="utf-8")
    return root


HOLD_OUT = (
    "hold out at least 3 samples as a test set that training never sees (data.heldout_count: 3 in the config; check "
    "the split with --heldout 3)"
)


def test_the_whole_verdict_of_a_flawed_dataset(tmp_path):
    root = tmp_path / "ds"
    for i in range(5):
        _image(root / "training_images" / f"s{i}.png", (64, 64) if i else (32, 64))
        _image(root / "control_images" / f"s{i}.png")
        (root / "training_images" / f"s{i}.txt").write_text(PROMPT)
    (root / "training_images" / "s1.txt").write_text("make it better")
    (root / "training_images" / "s2.txt").write_text("An image of a cat sitting on a red mat near the window in the sun")
    (root / "training_images" / "s3.txt").write_text("")
    _image(root / "control_images" / "s4_control_1.png")
    _image(root / "training_images" / "s5.png")
    (root / "training_images" / "s5.txt").write_text(PROMPT)
    _image(root / "control_images" / "s0_mask.png", mode="RGBA")  # masks need not be RGB
    verdict = validate_dataset(root, (64, 64))
    t = f"{root / 'training_images'}"
    assert (verdict.valid, verdict.format, verdict.sample_count) == (False, "local", 6)
    assert verdict.issues == [
        f"{t}/s3.png: its prompt file s3.txt is empty; write the edit instruction into it",
        f"{t}/s5.png: no control image (the input of the edit)",
        "samples have different numbers of control images (0 control(s): s5; 1 control(s): s0, s1, s2…; "
        "2 control(s): s4); upstream takes the count from the first sample (s0) and fails or ignores controls on "
        "the others",
    ]
    assert verdict.warnings == [
        f"{t}/s1.png: prompt 'make it better' is too vague to teach an edit",
        f'{t}/s2.png: prompt reads like a caption of the result; write the edit instruction ("Add the character to the image")',
        "1 target image(s) smaller than target_size [64, 64] (height 64 px, width 64 px) will be upscaled: s0 (32 wide, 64 high)",
        "6 samples: enough for a smoke test only (20–50 for a narrow task)",
        HOLD_OUT,
    ]


@pytest.mark.parametrize(
    "n, issue, warning",
    [
        (4, "4 sample(s): at least 5 are needed", None),
        (5, None, "5 samples: enough for a smoke test only (20–50 for a narrow task)"),
        (19, None, "19 samples: enough for a smoke test only (20–50 for a narrow task)"),
        (20, None, "20 samples: fewer than 30; 50–100 generalise better"),
        (29, None, "29 samples: fewer than 30; 50–100 generalise better"),
        (30, None, None),
    ],
)
def test_sample_count_bounds(tmp_path, n, issue, warning):
    verdict = validate_dataset(_samples(tmp_path / "ds", n), (64, 64))
    assert verdict.issues == ([issue] if issue else [])
    hold_out = [HOLD_OUT] if n >= 5 else []
    assert verdict.warnings == ([warning] if warning else []) + hold_out
    assert verdict.valid is (issue is None)


@pytest.mark.parametrize("words, warned", [(9, True), (10, False), (200, False), (201, True)])
def test_prompt_length_bounds(tmp_path, words, warned):
    prompt = " ".join(["Add"] + ["red"] * (words - 1))
    verdict = validate_dataset(_samples(tmp_path / "ds", 30, prompt), (64, 64))
    lengths = [w for w in verdict.warnings if "words (10–200 recommended)" in w]
    assert (len(lengths) == 30) is warned and (not lengths) is (not warned)
    if warned:
        assert lengths[0].endswith(f"s000.png: prompt has {words} words (10–200 recommended)")


def test_a_non_xpu_torch_beside_runtime_packages_is_not_called_not_xpu(matrix):
    """Runtime packages that only match (tcmlib 1.2.0: xpu-2.6 and xpu-2.7) are evidence of an XPU env too."""
    res = resolve_pair({"torch": "2.5.1", "tcmlib": "1.2.0"}, matrix, "linux-64")
    assert (res.status, res.candidates, res.evidence) == ("ambiguous", ["xpu-2.6", "xpu-2.7"], [])
    bare = resolve_pair({"torch": "2.5.1"}, matrix, "linux-64")
    assert (bare.status, bare.evidence) == ("not-xpu", ["torch 2.5.1 has no '+xpu' local version"])
