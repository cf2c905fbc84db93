"""Teacher trajectories: for each training prompt, the teacher's 8-step Euler run from a seeded noise, stored
with everything training needs, so training never loads the text encoder or the VAE.

One safetensors file per prompt, `<output_dir>/trajectories/<key>.safetensors`, keyed by a hash of what went
into it (model configs incl. the scheduler, prompt, noise seed, grid, size, KV-cache mode, dtype): a rerun skips
every file that exists and reads back, so an interrupted run resumes; a changed input makes a new key.

Tensors: latents [T+1, N, C] (the noise, then after each step); timesteps [T]; sigmas [T+1] (the scheduler's
effective grid, terminal 0 included); prompt_embeds [L, D] (computed under no_grad, as the engine's cache phase
does); prompt_mask, image_pad_mask [L] (uint8). The file's metadata holds a `TrajectoryMeta` as JSON.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aipc_env.core.fileio import atomic_write_bytes
from aipc_env.core.formats import write_model
from aipc_env.distill.config import DistillConfig
from aipc_env.distill.prompts import PromptRecord, load_prompts
from aipc_env.distill.trajectory_formats import INDEX, META_KEY, IndexEntry, TrajectoryIndex, TrajectoryMeta

if TYPE_CHECKING:
    import torch

__all__ = [
    "load_index",
    "noise_seed",
    "read_trajectory",
    "run_trajectories",
    "trajectory_key",
    "write_trajectory",
]


def noise_seed(cfg: DistillConfig, record: PromptRecord) -> int:
    """The prompt's own seed, else one derived from the config seed and the prompt (stable under reordering)."""
    if record.seed is not None:
        return record.seed
    return int(hashlib.sha256(f"{cfg.seed}:{record.prompt}".encode()).hexdigest()[:8], 16)


def trajectory_key(
    *,
    model_key: str,
    prompt: str,
    seed: int,
    sigmas: list[float],
    height: int,
    width: int,
    use_kv_cache: bool,
    dtype: str,
    teacher_base: str = "full",
) -> str:
    blob = {
        "v": 1,
        "model": model_key,
        "prompt": prompt,
        "seed": seed,
        "sigmas": sigmas,
        "size": [height, width],
        "kv": use_kv_cache,
        "dtype": dtype,
    }
    if teacher_base != "full":  # an NF4 teacher samples other trajectories
        blob["teacher_base"] = teacher_base
    return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()[:32]


def write_trajectory(path: Path, meta: TrajectoryMeta, tensors: dict[str, torch.Tensor]) -> None:
    from safetensors.torch import save

    data = save({k: v.detach().contiguous().cpu() for k, v in tensors.items()}, metadata={META_KEY: meta.model_dump_json()})
    atomic_write_bytes(path, data)


def read_trajectory(path: Path) -> tuple[TrajectoryMeta, dict[str, torch.Tensor]] | None:
    """(meta, tensors), or None when the file is missing or unreadable (it is then redone)."""
    from safetensors import safe_open

    if not path.is_file():
        return None
    try:
        with safe_open(str(path), framework="pt") as fh:
            meta = TrajectoryMeta.model_validate_json((fh.metadata() or {})[META_KEY])
            tensors = {k: fh.get_tensor(k) for k in fh.keys()}  # noqa: SIM118 - safe_open is not iterable
    except Exception:  # noqa: BLE001 - any damage (I/O, missing key, bad metadata) means: redo
        return None
    need = {"latents", "timesteps", "sigmas", "prompt_embeds", "prompt_mask", "image_pad_mask"}
    return (meta, tensors) if need <= tensors.keys() else None


def load_index(cfg: DistillConfig) -> tuple[TrajectoryIndex, list[Path]]:
    from aipc_env.core.formats import load_versioned

    root = cfg.out / "trajectories"
    index = load_versioned(TrajectoryIndex, root / INDEX)
    return index, [root / f"{e.key}.safetensors" for e in index.entries]


def run_trajectories(
    cfg: DistillConfig, *, log: Callable[[str], object] = print, inject: frozenset[str] = frozenset()
) -> dict[str, Any]:
    """Compute the missing trajectories; returns metrics for the verdict."""
    import torch

    from aipc_env.distill.model_paths import model_key
    from aipc_env.workers.distill import sampler
    from aipc_env.workers.distill.models import device_and_dtype, load_pipeline, model_dir, offload_text_encoder, resolve_run

    cfg = resolve_run(cfg, log=log)[0]
    device, dtype = device_and_dtype(cfg)
    path = model_dir(cfg, log=log)
    mkey = model_key(path)
    records = load_prompts(cfg.prompts.train, limit=cfg.prompts.limit)
    root = cfg.out / "trajectories"
    root.mkdir(parents=True, exist_ok=True)
    dtype_name = str(dtype).replace("torch.", "")
    entries, todo = [], []
    for rec in records:
        seed = noise_seed(cfg, rec)
        key = trajectory_key(
            model_key=mkey,
            prompt=rec.prompt,
            seed=seed,
            sigmas=cfg.teacher_grid,
            height=cfg.height,
            width=cfg.width,
            use_kv_cache=cfg.use_kv_cache,
            dtype=dtype_name,
            teacher_base=cfg.teacher.base,
        )
        entries.append(IndexEntry(key=key, prompt=rec.prompt, seed=seed))
        if read_trajectory(root / f"{key}.safetensors") is None:
            todo.append(entries[-1])
    log(f"trajectories: {len(entries)} prompts, {len(entries) - len(todo)} already stored, {len(todo)} to compute")
    t0 = time.perf_counter()
    seconds_encode = seconds_sample = 0.0
    if todo:
        pipe = load_pipeline(path, device, dtype, cfg.teacher)
        encoded = []
        for entry in todo:  # every prompt first: then the text encoder can leave the device
            t = time.perf_counter()
            encoded.append(sampler.encode(pipe, [entry.prompt], device, grad="grad-embeddings" in inject))
            seconds_encode += time.perf_counter() - t
        offloaded = offload_text_encoder(pipe, cfg.teacher)
        for i, (entry, prompted) in enumerate(zip(todo, encoded), 1):
            t = time.perf_counter()
            g = torch.Generator(device="cpu").manual_seed(entry.seed)
            noise = sampler.initial_noise(pipe, 1, cfg.height, cfg.width, g, device, prompted.embeds.dtype)
            _, steps, timesteps, eff = sampler.euler(
                pipe,
                pipe.transformer,
                prompted,
                noise,
                cfg.teacher_grid,
                cfg.height,
                cfg.width,
                use_kv_cache=cfg.use_kv_cache,
                record=True,
            )
            seconds_sample += time.perf_counter() - t
            mask = prompted.mask[0] if prompted.mask is not None else torch.ones(prompted.embeds.shape[1], dtype=torch.long)
            meta = TrajectoryMeta(
                key=entry.key,
                prompt=entry.prompt,
                seed=entry.seed,
                model_key=mkey,
                height=cfg.height,
                width=cfg.width,
                use_kv_cache=cfg.use_kv_cache,
                dtype=dtype_name,
                passed_sigmas=cfg.teacher_grid,
            )
            write_trajectory(
                root / f"{entry.key}.safetensors",
                meta,
                {
                    "latents": torch.stack([s[0] for s in steps]),
                    "timesteps": timesteps.float(),
                    "sigmas": eff.float(),
                    "prompt_embeds": prompted.embeds[0],
                    "prompt_mask": mask.to(torch.uint8),
                    "image_pad_mask": prompted.image_pad_mask[0].to(torch.uint8),
                },
            )
            log(f"trajectories: {i}/{len(todo)} {entry.key[:12]} ({entry.prompt[:40]!r})")
        if offloaded:
            log("trajectories: text encoder offloaded to the CPU after encoding")
    write_model(
        root / INDEX,
        TrajectoryIndex(model_key=mkey, teacher_sigmas=cfg.teacher_grid, height=cfg.height, width=cfg.width, entries=entries),
    )
    return {
        "prompts": len(entries),
        "computed": len(todo),
        "reused": len(entries) - len(todo),
        "seconds": round(time.perf_counter() - t0, 3),
        "seconds_encode": round(seconds_encode, 3),
        "seconds_sample": round(seconds_sample, 3),
        "steps": len(cfg.teacher_grid),
        "dir": str(root),
        "teacher": cfg.teacher.model_dump(),
    }
