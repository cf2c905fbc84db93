"""The cache phase: per-sample prompt embeddings (text encoder, with the control images) and VAE latents,
written atomically, keyed by a hash of everything that went into them. The transformer is never loaded.

Every control, the text encoder's image and the prompt are encoded as the model's diffusers pipeline does at
inference (aipc_env.workers.train.conditioning: each control at about data.control_pixels, default 1024x1024, aspect
kept); the target goes to its aspect-ratio bucket (about target_size's area, sides multiples of 32): nothing is
squashed. The index records each entry's shapes and the bucket counts; the fit batches within a bucket.

Entry format (torch.save of a dict, fp16 tensors): target [N, 64] packed latents; controls: list of [Nc, 64];
shapes: [(1, h, w)] target then each control (in packed 2x2 units); prompt_embeds [L, D] + prompt_mask [L] | None;
empty_prompt_embeds / empty_prompt_mask (for caption dropout); mask [N] in [0, 1] | None.
"""

from __future__ import annotations

import hashlib
import io
import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, NotRequired, TypedDict, cast

from aipc_env.core.fileio import atomic_write_bytes, read_json
from aipc_env.core.formats import load_versioned, write_model
from aipc_env.train.config import BUILTIN_SYNTHETIC, BUILTIN_TINY, TrainConfig
from aipc_env.train.progress import PhaseProgress
from aipc_env.train.results import CacheIndex
from aipc_env.train.resume import model_identity
from aipc_env.workers.train.conditioning import Variant, control_cost_warning

if TYPE_CHECKING:
    import torch
    from PIL import Image

    from aipc_env.dataset import Sample

__all__ = [
    "CACHE_SCHEMA_VERSION",
    "bucket_lines",
    "bucket_name",
    "entry_key",
    "entry_path",
    "list_entries",
    "load_cache_index",
    "load_index",
    "model_variant",
    "read_entry",
    "refuse_extra_controls",
    "run_cache",
    "synthetic_shapes",
    "write_entry",
]

CACHE_SCHEMA_VERSION: Final = 2
"""2: controls at the pipeline's area and targets in aspect-ratio buckets (1 squashed both to target_size)."""
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


def bucket_name(shapes: list[tuple[int, int, int]]) -> str:
    """A bucket in words: the target's pixel size, then each control's (e.g. '320x480 | 832x1248')."""
    return " | ".join(f"{w * 16}x{h * 16}" for _, h, w in shapes)


def _digest(part: Path | bytes | None) -> str:
    if part is None:
        return "-"
    data = part if isinstance(part, bytes) else Path(part).read_bytes()
    return hashlib.sha256(data).hexdigest()[:16]


def entry_key(
    *,
    model_id: str,
    target_size: tuple[int, int],
    control_pixels: int,
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
            "control_pixels": control_pixels,
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


def _mask_tokens(part: Path | bytes, size_wh: tuple[int, int]) -> torch.Tensor:
    import numpy as np
    import torch
    from PIL import Image

    h, w = size_wh[1] // 16, size_wh[0] // 16  # one packed token per 16x16 pixels
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
            control_pixels=cfg.control_area(),
            prompt=s.prompt or "",
            target=s.target,
            controls=s.controls,
            mask=s.mask,
        )
        out.append((key, s))
    return out


def synthetic_shapes(cfg: TrainConfig) -> list[tuple[int, int, int]]:
    """img_shapes of the built-in synthetic edit: the target's grid, then its control's by the conditioning rule
    (its control is made at the target's size, conditioned at cfg.control_area())."""
    from aipc_env.errors import InputError
    from aipc_env.workers.train.conditioning import control_size, latent_grid

    assert cfg.data
    height, width = cfg.data.target_size
    target = latent_grid((width, height))
    control = latent_grid(control_size((width, height), cfg.control_area()))
    if control != target:
        raise InputError(
            f"the built-in edit's control of {width}x{height} would be conditioned at {control[2] * 16}x{control[1] * 16}",
            key="data.target_size",
            fix="use sides that are multiples of 32 for builtin:synthetic (the default is [64, 64])",
        )
    return [target, control]


def _synthetic(cfg: TrainConfig, cache: Path, stats: CacheStats, log: Callable[[str], None]) -> list[str]:
    from aipc_env.workers.train.tinyedit import EDIT_VERSION, TRAIN_SEED, edit_sample

    assert cfg.data
    keys: list[str] = []
    h = cfg.data.target_size[0] // 8
    shapes = synthetic_shapes(cfg)
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
                "shapes": shapes,
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

    from aipc_env.workers.train.compat import processor_without_video

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
    pipe: Any, sample: Sample, target_pixels: int, control_pixels: int, device: torch.device, variant: Variant
) -> CacheEntry:
    """One entry: the target in its bucket, the controls and prompt as the variant's pipeline conditions them."""
    from aipc_env.workers.train.conditioning import bucket_size, encode_conditioning, encode_target, latent_grid

    assert sample.target is not None  # the dataset checks give every training sample a target
    target_img = _pil(sample.target)
    size = bucket_size(target_img.size, target_pixels)
    cond = encode_conditioning(
        pipe,
        [_pil(c) for c in sample.controls],
        sample.prompt or "",
        variant=variant,
        control_pixels=control_pixels,
        device=device,
    )
    target = encode_target(pipe, target_img, size, device, cond.prompt_embeds.dtype)
    pm, em = cond.prompt_mask, cond.empty_prompt_mask
    return {
        "target": target[0].half().cpu(),
        "controls": [c[0].half().cpu() for c in cond.controls],
        "shapes": [latent_grid(size), *cond.shapes],
        "prompt_embeds": cond.prompt_embeds[0].half().cpu(),
        "prompt_mask": None if pm is None else pm[0].cpu(),
        "empty_prompt_embeds": cond.empty_prompt_embeds[0].half().cpu(),
        "empty_prompt_mask": None if em is None else em[0].cpu(),
        "mask": _mask_tokens(sample.mask, size) if sample.mask is not None else None,
        "id": sample.id,
    }


def model_variant(model_path: str | Path) -> Variant:
    """The conditioning variant of a diffusers model folder (model_index.json's pipeline class)."""
    from aipc_env.errors import InputError
    from aipc_env.workers.train.conditioning import variant_of

    index = read_json(Path(model_path) / "model_index.json", "model_index.json")
    name = index.get("_class_name", "") if isinstance(index, dict) else ""
    try:
        return variant_of(str(name))
    except ValueError as exc:
        raise InputError(str(exc), path=Path(model_path) / "model_index.json", key="model.path") from None


def refuse_extra_controls(variant: Variant, samples: list[Sample], model_path: str | Path) -> None:
    """The original Edit pipeline conditions on one control image: a sample with more cannot be trained as it
    would be used (a named input error, before anything is loaded)."""
    from aipc_env.errors import InputError

    many = [s for s in samples if len(s.controls) > 1]
    if variant == "edit" and many:
        raise InputError(
            f"{many[0].id} has {len(many[0].controls)} control images; {model_path} is a QwenImageEditPipeline, "
            f"which conditions on one ({len(many)} sample(s) have more)",
            path=many[0].where or None,
            fix="train an Edit-Plus model (2509/2511) for several controls, or keep one control per sample",
        )


def bucket_lines(index: CacheIndex) -> list[str]:
    """The bucket counts in words, largest first."""
    counts = sorted(index.buckets.items(), key=lambda kv: (-kv[1], kv[0]))
    head = f"cache: {sum(index.buckets.values())} samples in {len(counts)} aspect-ratio bucket(s) (target | controls, pixels):"
    return [head, *[f"cache:   {name}: {n}" for name, n in counts]]


def run_cache(cfg: TrainConfig, device: torch.device, dtype: torch.dtype, log: Callable[[str], None] = print) -> CacheStats:
    assert cfg.data and cfg.model
    cache = cfg.resolved_cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    stats = CacheStats()
    start = time.perf_counter()
    warning = control_cost_warning(cfg.control_area())
    if warning and cfg.model.path != BUILTIN_TINY:
        log(f"cache: WARNING: {warning}")
    shapes: dict[str, list[tuple[int, int, int]]] = {}
    if cfg.data.datasets == [BUILTIN_SYNTHETIC]:
        keys = _synthetic(cfg, cache, stats, log)
        shapes = dict.fromkeys(keys, synthetic_shapes(cfg))
    else:
        entries = list_entries(cfg)
        todo: list[tuple[str, Sample]] = []
        for key, sample in entries:
            path = entry_path(cache, key)
            if (old := read_entry(path)) is not None:
                stats.skipped += 1
                shapes[key] = [(int(a), int(b), int(c)) for a, b, c in old["shapes"]]
            else:
                if path.exists():
                    stats.redone += 1
                    log(f"cache: entry of {sample.id} is corrupt; redoing it")
                todo.append((key, sample))
        keys = [k for k, _ in entries]
        if todo:
            variant = model_variant(cfg.model.path)
            refuse_extra_controls(variant, [s for _, s in todo], cfg.model.path)
            area = cfg.data.target_size[0] * cfg.data.target_size[1]
            log(
                f"cache: loading the text encoder and VAE ({cfg.model.text_encoder_path or cfg.model.path}) for "
                f"{len(todo)} sample(s) ..."
            )
            t_load = time.perf_counter()
            from aipc_env.core.heartbeat import Heartbeat

            beat = Heartbeat(log, "cache: still loading the text encoder and VAE").start()
            try:
                pipe = _load_encoders(cfg, device, dtype)
            finally:
                beat.stop()
            log(f"cache: encoders ready in {time.perf_counter() - t_load:.1f} s; encoding")
            beat = Heartbeat(log, "cache: encoding")  # one sample of a real model can take longer than a silence may
            with beat, PhaseProgress("cache", len(todo), unit="samples", log=beat.say) as progress:
                for n, (key, sample) in enumerate(todo):
                    beat.waiting(f"cache: encoding {sample.id}", left=f"{len(todo) - n - 1} sample(s) after it")
                    t = time.perf_counter()
                    entry = _encode_sample(pipe, sample, area, cfg.control_area(), device, variant)
                    shapes[key] = entry["shapes"]
                    stats.bytes += write_entry(entry_path(cache, key), entry)
                    stats.written += 1
                    progress.advance(f"cache: {sample.id} ({time.perf_counter() - t:.2f} s)")
    index = CacheIndex(keys=keys, shapes=[shapes[k] for k in keys], control_pixels=cfg.control_area())
    index.buckets = dict(Counter(bucket_name(s) for s in index.shapes or []))
    write_model(cache / "index.json", index)
    for line in bucket_lines(index):
        log(line)
    stats.seconds = time.perf_counter() - start
    size = sum(p.stat().st_size for p in cache.glob("*.pt"))
    log(
        f"cache: {stats.written} written, {stats.skipped} already cached, {stats.redone} redone; "
        f"{len(keys)} entries, {size / 1024:.1f} KiB in {cache} ({stats.seconds:.2f} s, "
        f"{stats.written / stats.seconds if stats.seconds and stats.written else 0:.2f} samples/s)"
    )
    return stats


def load_index(cfg: TrainConfig) -> list[Path]:
    """The entries' paths, in index order (load_cache_index also gives their shapes)."""
    return load_cache_index(cfg)[0]


def load_cache_index(cfg: TrainConfig) -> tuple[list[Path], CacheIndex]:
    from aipc_env.errors import AipcError

    cache = cfg.resolved_cache_dir()
    index = cache / "index.json"
    if not index.is_file():
        raise AipcError("no cache index", path=cache, fix="run the cache phase first (the launcher does)")
    loaded = load_versioned(CacheIndex, index)
    keys = loaded.keys
    if loaded.shapes is not None and len(loaded.shapes) != len(keys):
        raise AipcError("the cache index's shapes do not match its entries", path=index, fix=CacheIndex.FIX)
    paths = [entry_path(cache, k) for k in keys]
    missing = [p.name for p in paths if not p.is_file()]
    if missing:
        raise AipcError(
            f"{len(missing)} cache entries are missing ({missing[0]} ...)",
            path=cache,
            fix="run the cache phase again; it redoes only what is missing",
        )
    return paths, loaded
