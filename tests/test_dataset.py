"""Dataset scanning and validation on datasets made by the tests (all three formats)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from PIL import Image

from aipc_env.dataset import scan_dataset, validate_dataset
from tests.conftest import run_cli

PROMPT = "Add the small red character to the left side of the image please"


def img(path: Path, size=(64, 64), mode="RGB") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new(mode, size, (200, 10, 10) if mode == "RGB" else None).save(path)
    return path


def local(root: Path, n: int = 6, tdir="training_images", cdir="control_images", extra=0, size=(64, 64)) -> Path:
    for i in range(n):
        img(root / tdir / f"s{i}.png", size)
        (root / tdir / f"s{i}.txt").write_text(PROMPT)
        img(root / cdir / f"s{i}.jpg", size)
        for k in range(1, extra + 1):
            img(root / cdir / f"s{i}_control_{k}.png", size)
    return root


def test_local_layout_with_controls_masks_and_prompts(tmp_path):
    root = local(tmp_path / "ds ü", n=5, extra=2)
    img(root / "control_images" / "s0_mask.png", mode="L")
    (root / "control_images" / "s1.txt").write_text("this prompt loses")
    scan = scan_dataset(root)
    assert [s.id for s in scan.samples] == ["s0", "s1", "s2", "s3", "s4"]
    s0 = scan.samples[0]
    assert [p.name for p in s0.controls] == ["s0.jpg", "s0_control_1.png", "s0_control_2.png"]
    assert s0.mask.name == "s0_mask.png" and scan.samples[1].prompt == PROMPT  # training_images/ wins
    verdict = validate_dataset(root, (64, 64))
    assert verdict.valid and verdict.sample_count == 5 and verdict.format == "local"


def test_alternative_folder_names(tmp_path):
    root = local(tmp_path / "alt", tdir="targets", cdir="condition_images")
    assert validate_dataset(root, (64, 64)).valid


def test_problems_upstream_would_hide_or_crash_on(tmp_path):
    root = local(tmp_path / "bad", n=6, extra=1)
    (root / "training_images" / "s2.txt").unlink()  # upstream silently skips it
    (root / "control_images" / "s3_control_1.png").unlink()  # fewer controls than the first sample
    img(root / "training_images" / "s4.png", mode="RGBA")
    verdict = validate_dataset(root, (128, 128))
    assert not verdict.valid
    text = "\n".join(verdict.issues)
    assert "s2.png: no prompt" in text
    assert "different numbers of control images" in text and "s3" in text
    assert "s4.png: target is RGBA, not RGB" in text
    assert any("smaller than target_size" in w for w in verdict.warnings)


def test_counts_and_empty_folders(tmp_path):
    assert not validate_dataset(local(tmp_path / "few", n=3), (64, 64)).valid
    v = validate_dataset(local(tmp_path / "smoke", n=8), (64, 64))
    assert v.valid and any("smoke test only" in w for w in v.warnings)
    (tmp_path / "empty" / "training_images").mkdir(parents=True)
    (tmp_path / "empty" / "control_images").mkdir()
    v = validate_dataset(tmp_path / "empty")
    assert not v.valid and "no target images" in v.issues[0]
    (tmp_path / "nofolders").mkdir()
    assert "missing a target folder" in validate_dataset(tmp_path / "nofolders").issues[0]


def test_prompt_advice(tmp_path):
    root = local(tmp_path / "p", n=5)
    (root / "training_images" / "s0.txt").write_text("Edit the image")
    (root / "training_images" / "s1.txt").write_text("A red character standing in a big room with many windows open")
    v = validate_dataset(root, (64, 64))
    assert v.valid
    assert any("too vague" in w for w in v.warnings) and any("caption" in w for w in v.warnings)


def test_csv_paths_are_relative_to_the_csv(tmp_path):
    root = local(tmp_path / "c", n=5)
    rows = ["path_target,path_control,path_control_1,prompt"]
    for i in range(5):
        rows.append(f'training_images/s{i}.png,control_images/s{i}.jpg,control_images/s{i}.jpg,"{PROMPT}"')
    (root / "train.csv").write_text("\n".join(rows) + "\n")
    scan = scan_dataset(root / "train.csv")
    assert scan.format == "csv" and len(scan.samples[0].controls) == 2
    assert validate_dataset(root / "train.csv", (64, 64)).valid
    (root / "broken.csv").write_text('path_target,prompt\nmissing.png,"x"\n')
    v = validate_dataset(root / "broken.csv", (64, 64))
    assert not v.valid and any("does not exist" in i for i in v.issues)
    # a row without a target: the cache phase would have nothing to learn (it stopped on an assertion)
    (root / "no target.csv").write_text(f'path_target,path_control,prompt\n,control_images/s0.jpg,"{PROMPT}"\n')
    v = validate_dataset(root / "no target.csv", (64, 64))
    assert not v.valid and v.issues[0] == "no target.csv line 2: no target image (the result of the edit)"


def test_parquet_dir(tmp_path):
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    def png(mode="RGB") -> dict:
        buf = io.BytesIO()
        Image.new(mode, (64, 64)).save(buf, format="PNG")
        return {"bytes": buf.getvalue(), "path": None}

    rows = [{"target_image": png(), "control_images": [png()], "prompt": PROMPT} for _ in range(6)]
    rows[1]["control_images"] = [png("RGBA")]
    (tmp_path / "pq" / "data").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "pq" / "data" / "train-00000-of-00001.parquet")
    v = validate_dataset(tmp_path / "pq", (64, 64))
    assert v.format == "parquet" and v.sample_count == 6
    assert not v.valid and "row 1: control 0 is RGBA" in v.issues[0]


def test_cli_verdict_json(tmp_path):
    root = local(tmp_path / "cli", n=5)
    ok = run_cli("dataset", "validate", str(root), "--target-size", "64", "64")
    assert ok.returncode == 0 and json.loads(ok.stdout)["valid"] is True
    bad = run_cli("dataset", "validate", str(tmp_path / "missing"))
    assert bad.returncode == 2 and "dataset not found" in bad.stderr
    few = run_cli("dataset", "validate", str(local(tmp_path / "few", n=2)))
    assert few.returncode == 1 and set(json.loads(few.stdout)) == {
        "schema_version",
        "valid",
        "format",
        "sample_count",
        "issues",
        "warnings",
        "heldout",
    }


def test_training_refuses_an_invalid_dataset_before_any_model(tmp_path):
    import yaml

    from aipc_env.train.run import default_config

    cfg = default_config(tmp_path / "out")
    cfg["data"]["datasets"] = [str(local(tmp_path / "two", n=2))]
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    result = run_cli("train", str(tmp_path / "c.yaml"))
    assert result.returncode == 2 and "data.datasets[0]" in result.stderr and "at least 5" in result.stderr
    assert not (tmp_path / "out").exists()


def _csv_dataset(tmp_path: Path, prompt: str = "Füge die kleine rote Figur links ein, bitte jetzt gleich") -> Path:
    root = local(tmp_path / "c", n=5)
    rows = ["path_target,path_control,prompt"] + [
        f'training_images/s{i}.png,control_images/s{i}.jpg,"{prompt}"' for i in range(5)
    ]
    (root / "rows.txt").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return root


def test_csv_in_cp1252_and_utf16_is_read(tmp_path):
    root = _csv_dataset(tmp_path)
    text = (root / "rows.txt").read_text(encoding="utf-8")
    for name, data in (
        ("ansi.csv", text.encode("cp1252")),
        ("unicode.csv", text.encode("utf-16")),
        ("tabs.csv", text.replace(",", "\t").encode("utf-16")),
    ):
        (root / name).write_bytes(data)
        scan = scan_dataset(root / name)
        assert len(scan.samples) == 5 and scan.samples[0].prompt.startswith("Füge"), name
    (root / "binary.csv").write_bytes(b"\x81\x8d\x8f\x90\x9d" * 10)
    result = run_cli("dataset", "validate", str(root / "binary.csv"))
    assert result.returncode == 2 and "neither UTF-8, UTF-16 nor cp1252" in result.stderr


def test_a_corrupt_parquet_file_is_an_issue(tmp_path):
    (tmp_path / "pq" / "data").mkdir(parents=True)
    (tmp_path / "pq" / "data" / "train-00000-of-00001.parquet").write_bytes(b"PAR1 this is not parquet")
    result = run_cli("dataset", "validate", str(tmp_path / "pq"))
    assert result.returncode == 1 and "cannot be read as parquet" in result.stdout and "Traceback" not in result.stderr


def test_non_utf8_file_names_are_reported(tmp_path):
    root = local(tmp_path / "names", n=5)
    bad = os.fsdecode(b"caf\xe9.png")  # Latin-1 bytes: not a UTF-8 name
    img(root / "training_images" / bad)
    verdict = validate_dataset(root, (64, 64))
    assert not verdict.valid and any("not valid UTF-8" in i and "caf\\xe9.png" in i for i in verdict.issues)
    result = run_cli("dataset", "validate", str(root))
    assert result.returncode == 1 and "not valid UTF-8" in result.stdout


def test_an_empty_prompt_file_is_named_as_empty(tmp_path):
    root = local(tmp_path / "empty prompts", n=5)
    (root / "training_images" / "s0.txt").write_text("")
    (root / "training_images" / "s1.txt").unlink()
    issues = validate_dataset(root, (64, 64)).issues
    assert any("its prompt file s0.txt is empty" in i for i in issues)
    assert any("add s1.txt" in i for i in issues) and not any("add s0.txt" in i for i in issues)


def test_target_size_is_validated():
    for size in (["0", "0"], ["15", "16"], ["100", "64"], ["x", "64"]):
        result = run_cli("dataset", "validate", ".", "--target-size", *size)
        assert result.returncode == 2 and "--target-size" in result.stderr
