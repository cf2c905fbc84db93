"""Images checked before the long work (dataset/images.py): not-an-image, empty, a decompression-bomb header, a
truncated file, a link out of the set and a 16-bit greyscale target are each refused by name, in `dataset validate`
and in `train --dry-run` (training images and the held-out set), and never decoded past their header when too
large. Bounds at, below and above."""

from __future__ import annotations

import io
import json
import random
import struct
import zlib
from pathlib import Path

import pytest
from PIL import Image

from aipc_env.dataset import images
from aipc_env.dataset.images import ImageProblem, check_image
from tests.conftest import run_cli


def _png(w: int = 8, h: int = 8, mode: str = "RGB") -> bytes:
    buf = io.BytesIO()
    img = Image.frombytes("RGB", (w, h), random.Random(w * h).randbytes(w * h * 3)) if mode == "RGB" else Image.new(mode, (w, h))
    img.save(buf, format="PNG")
    return buf.getvalue()


def _tiff_float() -> bytes:
    buf = io.BytesIO()
    Image.new("F", (4, 4), 0.5).save(buf, format="TIFF")
    return buf.getvalue()


def _png_header_only(w: int, h: int) -> bytes:
    """A PNG whose IHDR declares w x h (8-bit RGB) and whose data is a few bytes: what a bomb's header looks like."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\x00" * 16)) + chunk(b"IEND", b"")


def test_a_good_image_is_read():
    header = check_image(_png(16, 9))
    assert (header.format, header.mode, header.width, header.height) == ("PNG", "RGB", 16, 9)


@pytest.mark.parametrize(
    "data, named",
    [
        (b"not an image at all", "not an image"),
        (b"", "not an image"),
        (_png_header_only(0, 0), "0x0"),  # Pillow may refuse the header itself: either way a named problem
        (_png_header_only(40000, 40000), "decompression bomb"),
        (_png(64, 64)[:-200], "truncated"),
        (_png(8, 8, "I;16"), "16-bit greyscale"),
        (_tiff_float(), "not an image"),  # a float TIFF: not a format sets hold
    ],
)
def test_hostile_images_are_named(data, named):
    with pytest.raises(ImageProblem) as err:
        check_image(data)
    assert named in str(err.value) or (named == "0x0" and "not an image" in str(err.value)), str(err.value)


@pytest.mark.parametrize(
    "w, h, ok",
    [
        (images.MAX_SIDE, 1, True),  # at the side bound
        (images.MAX_SIDE + 1, 1, False),  # above
        (8192, 8192, True),  # exactly MAX_PIXELS
        (8192, 8193, False),  # one row above
        (1, 1, True),
    ],
)
def test_the_size_bounds_are_read_from_the_header(w, h, ok):
    data = _png_header_only(w, h)
    if ok:
        header = check_image(data, decode=False)  # the header is within bounds (its data is not a real image)
        assert (header.width, header.height) == (w, h)
    else:
        with pytest.raises(ImageProblem, match="beyond"):
            check_image(data, decode=False)


def test_a_bomb_is_refused_before_decoding(monkeypatch):
    """The size check comes before load(): with load() broken, the bomb is still refused by its size."""
    from PIL import ImageFile

    def boom(self):
        raise AssertionError("decoded")

    monkeypatch.setattr(ImageFile.ImageFile, "load", boom)
    with pytest.raises(ImageProblem, match="decompression bomb"):
        check_image(_png_header_only(40000, 40000))
    with pytest.raises(ImageProblem, match="beyond"):
        check_image(_png_header_only(8192, 8193))


def test_a_16_bit_grey_target_would_read_as_white_so_it_is_refused():
    """The reason for the rule, shown on the real library: Pillow clips 16-bit values to 255 in RGB."""
    grey = Image.new("I;16", (4, 4), 30000)  # a mid grey in 16 bits
    assert grey.convert("RGB").getpixel((0, 0)) == (255, 255, 255)
    buf = io.BytesIO()
    grey.save(buf, format="PNG")
    with pytest.raises(ImageProblem, match="16-bit greyscale"):
        check_image(buf.getvalue())


def test_a_link_out_of_the_set_is_refused(tmp_path):
    outside = tmp_path / "secret.png"
    outside.write_bytes(_png())
    root = tmp_path / "set"
    root.mkdir()
    (root / "a.png").symlink_to(outside)
    (root / "b.png").write_bytes(_png())
    (root / "c.png").symlink_to(root / "b.png")  # a link that stays inside: fine
    with pytest.raises(ImageProblem, match="leads out of"):
        check_image(root / "a.png", root=root)
    assert check_image(root / "b.png", root=root).width == 8
    assert check_image(root / "c.png", root=root).width == 8
    with pytest.raises(ImageProblem, match="leads out of"):
        check_image(root / ".." / "secret.png", root=root)


def test_the_file_size_bound(tmp_path, monkeypatch):
    monkeypatch.setattr(images, "MAX_FILE_BYTES", len(_png()))
    assert check_image(_png())  # at the bound
    with pytest.raises(ImageProblem, match="bytes"):
        check_image(_png() + b"\x00")  # one above


def _dataset(root: Path, n: int = 5, bad: tuple[str, bytes] | None = None) -> Path:
    (root / "control_images").mkdir(parents=True)
    (root / "training_images").mkdir()
    for i in range(n):
        (root / "control_images" / f"s{i}.png").write_bytes(_png(64, 64))
        (root / "training_images" / f"s{i}.png").write_bytes(_png(64, 64))
        (root / "training_images" / f"s{i}.txt").write_text("Add a red hat to the person standing in the photo please")
    if bad is not None:
        name, data = bad
        (root / "training_images" / name).write_bytes(data)
    return root


@pytest.mark.parametrize(
    "data, named",
    [
        (b"GIF89a nonsense", "not an image"),
        (_png_header_only(40000, 40000), "decompression bomb"),
        (_png(64, 64)[:-200], "truncated"),
        (_png(64, 64, "I;16"), "16-bit greyscale"),
    ],
)
def test_dataset_validate_names_each_hostile_image(tmp_path, data, named):
    root = _dataset(tmp_path / "ds", bad=("s0.png", data))
    result = run_cli("dataset", "validate", str(root), "--json")
    assert result.returncode == 1, result.stderr[-2000:]
    verdict = json.loads(result.stdout)
    assert any(named in issue and "s0" in issue for issue in verdict["issues"]), verdict["issues"]


def test_dataset_validate_refuses_a_link_out_of_the_set(tmp_path):
    root = _dataset(tmp_path / "ds")
    (tmp_path / "elsewhere.png").write_bytes(_png(64, 64))
    (root / "training_images" / "s0.png").unlink()
    (root / "training_images" / "s0.png").symlink_to(tmp_path / "elsewhere.png")
    result = run_cli("dataset", "validate", str(root), "--json")
    assert result.returncode == 1 and "leads out of" in result.stdout, result.stdout[-2000:]


def _config(tmp_path: Path, dataset: Path, heldout: Path | None) -> Path:
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "model_index.json").write_text("{}")
    lines = [
        "model:",
        f"  path: {json.dumps(str(model))}",
        "data:",
        f"  datasets: [{json.dumps(str(dataset))}]",
        "  target_size: [64, 64]",
    ]
    if heldout is not None:
        lines.append(f"  heldout: {json.dumps(str(heldout))}")
    lines.append(f"output_dir: {json.dumps(str(tmp_path / 'out'))}")
    config = tmp_path / "train.yaml"
    config.write_text("\n".join(lines) + "\n")
    return config


@pytest.mark.parametrize("where", ["training", "heldout"])
def test_train_dry_run_opens_every_image_before_the_fit(tmp_path, where):
    good = _dataset(tmp_path / "train")
    bad = _dataset(tmp_path / "held" if where == "heldout" else tmp_path / "train2", bad=("s1.png", _png_header_only(0, 0)))
    config = _config(tmp_path, bad if where == "training" else good, bad if where == "heldout" else None)
    result = run_cli("train", str(config), "--dry-run", "--json")
    assert result.returncode == 2, (result.returncode, result.stdout[-1500:], result.stderr[-1500:])
    assert "Traceback" not in result.stderr
    doc = json.loads(result.stdout)
    assert doc["error"] and ("data.heldout" if where == "heldout" else "data.datasets[0]") in (doc.get("key") or "")
    assert "s1" in doc["message"]


@pytest.mark.parametrize("bad", [_png_header_only(40000, 40000), b"not an image", _png(64, 64, "I;16")])
def test_compare_opens_every_held_out_image_before_the_model_and_writes_nothing(tmp_path, bad):
    """compare refuses a held-out set with an image it will not read before it loads the pipeline (the model folder
    here has every part but no weights: reaching from_pretrained would fail otherwise), and writes no output."""
    from aipc_env.errors import InputError
    from aipc_env.workers.compare import CompareRequest, run_compare

    model = tmp_path / "model"
    for part in ("transformer", "text_encoder", "vae", "scheduler", "tokenizer"):
        (model / part).mkdir(parents=True)
    (model / "model_index.json").write_text("{}")
    lora = tmp_path / "lora.safetensors"
    lora.write_bytes(b"")
    held = _dataset(tmp_path / "held", n=3, bad=("s1.png", bad))
    out = tmp_path / "out"
    with pytest.raises(InputError, match="will not read") as err:
        run_compare(CompareRequest(model_path=model, lora=lora, test_set=held, out=out))
    assert "s1" in str(err.value) and not out.exists()


def test_compare_refuses_an_output_folder_it_cannot_own_before_the_model(tmp_path):
    from aipc_env.errors import InputError
    from aipc_env.workers.compare import CompareRequest, run_compare

    model = tmp_path / "model"
    for part in ("transformer", "text_encoder", "vae", "scheduler", "tokenizer"):
        (model / part).mkdir(parents=True)
    (model / "model_index.json").write_text("{}")
    lora = tmp_path / "lora.safetensors"
    lora.write_bytes(b"")
    held = _dataset(tmp_path / "held", n=3)
    out = tmp_path / "out"
    out.mkdir()
    (out / "manifest.json").write_text("someone else's")
    with pytest.raises(InputError, match="not a file aipc-env wrote"):
        run_compare(CompareRequest(model_path=model, lora=lora, test_set=held, out=out))
    assert (out / "manifest.json").read_text() == "someone else's"
