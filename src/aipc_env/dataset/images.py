"""The one check of an image a dataset or a held-out set names, before any long work reads it: where it is (a
regular file inside the set; a link that leads out of it is refused), its header (a format aipc-env reads, a
size that is neither empty nor a decompression bomb: the bound is checked on the header, before a pixel is decoded),
its mode (8 bits per channel: a 16-bit greyscale image converted to RGB by Pillow clips to white, so it is refused by
name, not judged as white) and its data (decoded once: a truncated file is found here, not after an hour of
training). PIL is called through this module only; everything it raises is an ImageProblem (a ValueError) with a
sentence."""

from __future__ import annotations

import io
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable

    from PIL.Image import Image as PILImage

    from aipc_env.dataset.scan import Sample

__all__ = [
    "FORMATS",
    "MAX_FILE_BYTES",
    "MAX_PIXELS",
    "MAX_SIDE",
    "ImageHeader",
    "ImageProblem",
    "check_image",
    "inside",
    "open_rgb",
    "sample_image_problems",
]

FORMATS = ("PNG", "JPEG", "WEBP", "BMP")
"""What a dataset may hold (scan.IMAGE_EXTS): Pillow is asked to identify these and nothing else."""
MAX_SIDE = 16384
"""The longest side read (Qwen-Image-Edit trains at 384-1024; a 16K photo is already far beyond it)."""
MAX_PIXELS = 2**26
"""67,108,864 pixels (8192x8192), below Pillow's own bomb warning (89,478,485): a 40000x40000 header is refused
on its header."""
MAX_FILE_BYTES = 256 * 2**20
EIGHT_BIT_MODES = frozenset({"1", "L", "LA", "La", "P", "PA", "RGB", "RGBA", "RGBa", "RGBX"})
"""Modes of 8 bits per channel (or fewer), which convert to RGB without losing their range."""
_DEEP = {"I;16": "16-bit greyscale", "I;16B": "16-bit greyscale", "I;16L": "16-bit greyscale", "I;16N": "16-bit greyscale"}


class ImageProblem(ValueError):
    """An image aipc-env will not read, with the reason as a sentence."""


@dataclass(frozen=True)
class ImageHeader:
    format: str
    mode: str
    width: int
    height: int


def inside(path: Path, root: Path) -> bool:
    """Whether a path, every link on it followed, stays inside root (also followed)."""
    try:
        Path(os.path.realpath(path)).relative_to(os.path.realpath(root))
    except ValueError:
        return False
    return True


def _source(part: Path | bytes, root: Path | None) -> Path | io.BytesIO:
    if isinstance(part, bytes):
        if len(part) > MAX_FILE_BYTES:
            raise ImageProblem(f"is {len(part)} bytes, more than {MAX_FILE_BYTES // 2**20} MiB")
        return io.BytesIO(part)
    if root is not None and not inside(part, root):
        raise ImageProblem(f"{part} leads out of the set's folder {root} (a link or '..'): it is not read")
    try:
        st = part.stat()
    except OSError as exc:
        raise ImageProblem(f"{part} cannot be read ({exc.strerror or type(exc).__name__})") from None
    if not part.is_file():
        raise ImageProblem(f"{part} is not a regular file")
    if st.st_size > MAX_FILE_BYTES:
        raise ImageProblem(f"{part} is {st.st_size} bytes, more than {MAX_FILE_BYTES // 2**20} MiB")
    return part


def check_image(part: Path | bytes, *, root: Path | None = None, decode: bool = True) -> ImageHeader:
    """The header of an image, checked (format, size against the bounds, 8-bit mode) and, with decode, its data read
    whole; ImageProblem otherwise. Nothing is decoded before the size is known to be within the bounds."""
    from PIL import Image, UnidentifiedImageError

    source = _source(part, root)
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        try:
            with Image.open(source, formats=list(FORMATS)) as im:
                header = ImageHeader(str(im.format), im.mode, *im.size)
                _check_header(header)
                if decode:
                    im.load()
        except ImageProblem:
            raise
        except UnidentifiedImageError:
            raise ImageProblem(f"is not an image aipc-env reads ({', '.join(FORMATS)})") from None
        except (Image.DecompressionBombError, Image.DecompressionBombWarning):
            raise ImageProblem(f"declares more than {MAX_PIXELS} pixels (a decompression bomb); it is not decoded") from None
        except Exception as exc:  # noqa: BLE001 - Pillow's decoders raise OSError, SyntaxError, ValueError, struct.error...
            raise ImageProblem(f"is truncated or damaged ({type(exc).__name__}: {str(exc)[:120]})") from None
    return header


def _check_header(header: ImageHeader) -> None:
    w, h = header.width, header.height
    if w <= 0 or h <= 0:
        raise ImageProblem(f"is {w}x{h}: an empty image")
    if w > MAX_SIDE or h > MAX_SIDE or w * h > MAX_PIXELS:
        raise ImageProblem(
            f"is {w}x{h}, beyond {MAX_SIDE} pixels a side or {MAX_PIXELS} in all (a decompression bomb or far "
            "beyond training sizes); scale it down"
        )
    if header.mode not in EIGHT_BIT_MODES:
        what = _DEEP.get(header.mode, f"mode {header.mode}")
        raise ImageProblem(
            f"is {what} ({header.mode}), not 8 bits per channel: converted to RGB it would not keep its values; "
            "save it as 8-bit RGB"
        )


def sample_image_problems(samples: Iterable[Sample], root: Path) -> list[str]:
    """Every image of the samples checked (check_image, decoded, inside root): one sentence per problem."""
    problems = []
    for s in samples:
        parts = [("target", s.target), *[(f"control {i}", c) for i, c in enumerate(s.controls)], ("mask", s.mask)]
        for role, part in parts:
            if part is None:
                continue
            try:
                check_image(part, root=root)
            except ImageProblem as exc:
                problems.append(f"{s.where or s.id}: {role} {exc}")
    return problems


def open_rgb(part: Path | bytes, *, root: Path | None = None) -> PILImage:
    """The image as RGB, after check_image: what compare and the judges read."""
    from PIL import Image

    check_image(part, root=root, decode=False)
    with Image.open(io.BytesIO(part) if isinstance(part, bytes) else part, formats=list(FORMATS)) as im:
        return im.convert("RGB")
