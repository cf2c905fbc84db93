"""The cache phase: per-sample prompt embeddings (text encoder, with the control images) and VAE latents,
written atomically, keyed by a hash of everything that went into them. The transformer is never loaded.

Entry format (torch.save of a dict, fp16 tensors): target [N, 64] packed latents; controls: list of [Nc, 64];
shapes: [(1, h, w)] target then controls (in packed 2x2 units); prompt_embeds [L, D] + prompt_mask [L] | None;
empty_prompt_embeds / empty_prompt_mask (for caption dropout); mask [N] in [0, 1] | None.
"""

from __future__ import annotations

import hashlib
import io
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Final, Literal, NotRequired, TypedDict, cast

from aipc_env.core.fileio import atomic_write_bytes, read_json
from aipc_env.core.formats import VersionedModel, load_versioned, write_model
from aipc_env.train.checkpoint import model_identity
from aipc_env.train.config import BUILTIN_SYNTHETIC, TrainConfig
from aipc_env.train.progress import PhaseProgress

if TYPE_CHECKING:
    import torch
    from PIL import Image

    from aipc_env.dataset import Sample

__all__ = [
    "CACHE_SCHEMA_VERSION",
    "CacheIndex",
    "entry_key",
    "entry_path",
    "list_entries",
    "load_index",
    "read_entry",
    "run_cache",
    "write_entry",
]

CACHE_SCHEMA_VERSION: Final = 1
ENTRY_KIND = "aipc-env cache entry"


class CacheEntry(TypedDict):
    """One cache entry (the module docstring's format); `kind` and `schema_version` are added on writing."""

    target: torch.Tensor
    controls: list[torch.Tensor]
    shapes: list[tuple[int, int, int]]
    prompt_embeds: torch.Tensor
    prompt_mask: torch.Tensor | None
    empty_prompt_embeds: torch.Tensor
    empty_prompt_mask: torch.Tensor | None
    mask: torch.Tensor | None
    id: str
    kind: NotRequired[str]
    schema_version: NotRequired[int]


class CacheIndex(VersionedModel):
    """<cache_dir>/index.json: the entries of one run's samples, in order."""

    FORMAT: ClassVar[str] = "cache index"
    FIX: ClassVar[str] = "run the cache phase again; it redoes only what is missing"
    schema_version: Literal[1] = CACHE_SCHEMA_VERSION
    keys: list[str]


def _digest(part: Path | bytes | None) -> str:
    if part is None:
        return "-"
    data = part if isinstance(part, bytes) else Path(part).read_bytes()
    return hashlib.sha256(data).hexdigest()[:16]


def entry_key(
    *,
    model_id: str,
    target_size: tuple[int, int],
    prompt: str,
    target: Path | bytes | None,
    controls: list[Path | bytes],
    mask: Path | bytes | None,
) -> str:
    blob = json.dumps(
        {
            "schema_version": CACHE_SCHEMA_VERSION,
            "model": model_id,
            "size": list(target_size),
            "prompt": prompt,
            "target": _digest(target),
            "controls": [_digest(c) for c in controls],
            "mask": _digest(mask),
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def entry_path(cache_dir: Path, key: str) -> Path:
    return cache_dir / f"{key}.pt"


def read_entry(path: Path) -> CacheEntry | None:
    """The entry, or None when it is missing or corrupt (an interrupted or damaged write is redone)."""
    import torch

    if not path.is_file():
        return None
    try:
        entry = torch.load(path, weights_only=True)
    except Exception:  # noqa: BLE001 - any unreadable entry is redone
        return None
    ok = isinstance(entry, dict) and entry.get("kind") == ENTRY_KIND and entry.get("schema_version") == CACHE_SCHEMA_VERSION
    return cast(CacheEntry, entry) if ok else None  # torch.load gives Any; kind and schema_version checked above


def write_entry(path: Path, entry: CacheEntry) -> int:
    import torch

    buf = io.BytesIO()
    torch.save({**entry, "kind": ENTRY_KIND, "schema_version": CACHE_SCHEMA_VERSION}, buf)
    atomic_write_bytes(path, buf.getvalue())
    return len(buf.getvalue())


@dataclass
class CacheStats:
    written: int = 0
    skipped: int = 0
    redone: int = 0
    bytes: int = 0
    seconds: float = 0.0


def _pil(part: Path | bytes) -> Image.Image:
    from PIL import Image

    img = Image.open(io.BytesIO(part) if isinstance(part, bytes) else part)
    return img.convert("RGB")


def _to_tensor(img: Image.Image, size_hw: tuple[int, int]) -> torch.Tensor:
    import numpy as np
    import torch

    h, w = size_hw
    img = img.resize((w, h), resample=3)
    arr = torch.from_numpy(np.asarray(img, dtype=np.float32) / 127.5 - 1.0)
    return arr.permute(2, 0, 1)  # [3, H, W]


def _mask_tokens(part: Path | bytes, size_hw: tuple[int, int]) -> torch.Tensor:
    import numpy as np
    import torch
    from PIL import Image

    h, w = size_hw[0] // 16, size_hw[1] // 16  # one packed token per 16x16 pixels
    img = Image.open(io.BytesIO(part) if isinstance(part, bytes) else part).convert("L").resize((w, h), resample=2)
    return torch.from_numpy(np.asarray(img, dtype=np.float32) / 255.0).flatten()


def list_entries(cfg: TrainConfig) -> list[tuple[str, Sample]]:
    """(key, sample) for every sample of every dataset, in a stable order, but the held-out ones
    (data.heldout_count: the fit never sees them)."""
    from aipc_env.dataset.split import split_datasets

    assert cfg.data and cfg.model
    out: list[tuple[str, Sample]] = []
    model_id = model_identity(cfg.model.path)
    for s in split_datasets(cfg.data.datasets, cfg.data.heldout_count)[0]:
        key = entry_key(
            model_id=model_id,
            target_size=cfg.data.target_size,
            prompt=s.prompt or "",
            target=s.target,
            controls=s.controls,
            mask=s.mask,
        )
        out.append((key, s))
    return out


def _synthetic(cfg: TrainConfig, cache: Path, stats: CacheStats, log: Callable[[str], None]) -> list[str]:
    from aipc_env.train.tinyedit import EDIT_VERSION, TRAIN_SEED, edit_sample

    assert cfg.data
    keys: list[str] = []
    h = cfg.data.target_size[0] // 8
    with PhaseProgress("cache", cfg.data.synthetic_samples, unit="samples", log=log) as progress:
        for i in range(cfg.data.synthetic_samples):
            key = hashlib.sha256(
                f"cache-{CACHE_SCHEMA_VERSION}:synthetic-edit-{EDIT_VERSION}:{i}:{list(cfg.data.target_size)}".encode()
            ).hexdigest()[:32]
            keys.append(key)
            path = entry_path(cache, key)
            if read_entry(path) is not None:
                stats.skipped += 1
                progress.advance(quiet=True)
                continue
            s = edit_sample(TRAIN_SEED + i, h)
            entry: CacheEntry = {
                "target": s.target.half(),
                "controls": [s.control.half()],
                "shapes": [(1, h // 2, h // 2), (1, h // 2, h // 2)],
                "prompt_embeds": s.prompt_embeds.half(),
                "prompt_mask": None,
                "empty_prompt_embeds": s.prompt_embeds[:2].half() * 0,
                "empty_prompt_mask": None,
                "mask": None,
                "id": f"synthetic-{i}",
            }
            stats.bytes += write_entry(path, entry)
            stats.written += 1
            progress.advance(f"cache: synthetic-{i} written")
    return keys


def _load_encoders(cfg: TrainConfig, device: torch.device, dtype: torch.dtype) -> Any:
    """Text encoder + VAE (+ tokenizer/processor) of the pipeline; the transformer is not loaded."""
    from diffusers import DiffusionPipeline

    from aipc_env.train.compat import processor_without_video

    assert cfg.model
    processor_without_video()
    kwargs: dict[str, Any] = {}
    if cfg.model.text_encoder_path:
        from transformers import Qwen2_5_VLForConditionalGeneration

        kwargs["text_encoder"] = Qwen2_5_VLForConditionalGeneration.from_pretrained(cfg.model.text_encoder_path)
    pipe = DiffusionPipeline.from_pretrained(cfg.model.path, transformer=None, torch_dtype=dtype, **kwargs)
    pipe.text_encoder.to(device)
    pipe.vae.to(device)
    return pipe


def _encode_sample(
    pipe: Any, sample: Sample, size_hw: tuple[int, int], device: torch.device, dtype: torch.dtype, plus: bool
) -> CacheEntry:
    import torch

    assert sample.target is not None  # the dataset checks give every training sample a target
    target = _to_tensor(_pil(sample.target), size_hw)
    controls_img = [_pil(c) for c in sample.controls]
    controls = [_to_tensor(c, size_hw) for c in controls_img]
    prompt_images = [c.resize((size_hw[1], size_hw[0]), resample=3) for c in controls_img]
    with torch.no_grad():  # a distillation lesson: never attach the text encoder's graph
        image_arg = prompt_images if plus else prompt_images[0]
        pe, pm = pipe.encode_prompt(sample.prompt or "", image=image_arg, device=device)
        ee, em = pipe.encode_prompt("", image=image_arg, device=device)
        stacked = torch.stack([target, *controls]).unsqueeze(2).to(device, dtype)  # [1+C, 3, 1, H, W]
        latents = pipe._encode_vae_image(stacked, generator=torch.Generator(device="cpu").manual_seed(0))
        b, c, _, h, w = latents.shape
        packed = pipe._pack_latents(latents, b, c, h, w)  # [1+C, N, 64]
    shape = (1, h // 2, w // 2)
    return {
        "target": packed[0].half().cpu(),
        "controls": [p.half().cpu() for p in packed[1:]],
        "shapes": [shape] * (1 + len(controls)),
        "prompt_embeds": pe[0].half().cpu(),
        "prompt_mask": None if pm is None else pm[0].cpu(),
        "empty_prompt_embeds": ee[0].half().cpu(),
        "empty_prompt_mask": None if em is None else em[0].cpu(),
        "mask": _mask_tokens(sample.mask, size_hw) if sample.mask is not None else None,
        "id": sample.id,
    }


def run_cache(cfg: TrainConfig, device: torch.device, dtype: torch.dtype, log: Callable[[str], None] = print) -> CacheStats:
    assert cfg.data and cfg.model
    cache = cfg.resolved_cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    stats = CacheStats()
    start = time.perf_counter()
    if cfg.data.datasets == [BUILTIN_SYNTHETIC]:
        keys = _synthetic(cfg, cache, stats, log)
    else:
        entries = list_entries(cfg)
        todo: list[tuple[str, Sample]] = []
        for key, sample in entries:
            path = entry_path(cache, key)
            if read_entry(path) is not None:
                stats.skipped += 1
            else:
                if path.exists():
                    stats.redone += 1
                    log(f"cache: entry of {sample.id} is corrupt; redoing it")
                todo.append((key, sample))
        keys = [k for k, _ in entries]
        if todo:
            index = read_json(Path(cfg.model.path) / "model_index.json", "model_index.json")
            plus = str(index.get("_class_name", "") if isinstance(index, dict) else "").endswith("PlusPipeline")
            log(
                f"cache: loading the text encoder and VAE ({cfg.model.text_encoder_path or cfg.model.path}) for "
                f"{len(todo)} sample(s) ..."
            )
            t_load = time.perf_counter()
            pipe = _load_encoders(cfg, device, dtype)
            log(f"cache: encoders ready in {time.perf_counter() - t_load:.1f} s; encoding")
            with PhaseProgress("cache", len(todo), unit="samples", log=log) as progress:
                for key, sample in todo:
                    t = time.perf_counter()
                    entry = _encode_sample(pipe, sample, cfg.data.target_size, device, dtype, plus)
                    stats.bytes += write_entry(entry_path(cache, key), entry)
                    stats.written += 1
                    progress.advance(f"cache: {sample.id} ({time.perf_counter() - t:.2f} s)")
    write_model(cache / "index.json", CacheIndex(keys=keys))
    stats.seconds = time.perf_counter() - start
    size = sum(p.stat().st_size for p in cache.glob("*.pt"))
    log(
        f"cache: {stats.written} written, {stats.skipped} already cached, {stats.redone} redone; "
        f"{len(keys)} entries, {size / 1024:.1f} KiB in {cache} ({stats.seconds:.2f} s, "
        f"{stats.written / stats.seconds if stats.seconds and stats.written else 0:.2f} samples/s)"
    )
    return stats


def load_index(cfg: TrainConfig) -> list[Path]:
    from aipc_env.errors import AipcError

    cache = cfg.resolved_cache_dir()
    index = cache / "index.json"
    if not index.is_file():
        raise AipcError("no cache index", path=cache, fix="run the cache phase first (the launcher does)")
    keys = load_versioned(CacheIndex, index).keys
    paths = [entry_path(cache, k) for k in keys]
    missing = [p.name for p in paths if not p.is_file()]
    if missing:
        raise AipcError(
            f"{len(missing)} cache entries are missing ({missing[0]} ...)",
            path=cache,
            fix="run the cache phase again; it redoes only what is missing",
        )
    return paths
