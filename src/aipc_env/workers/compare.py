"""Base vs LoRA on held-out samples (runbook §9): same seeds and steps, size from the control image, a manifest,
a grid and a distance of each output to the target, so "the LoRA changed nothing" is visible at a glance, and, where
the samples have targets, the verdict of aipc_env.train.verdict: is the LoRA closer to the targets than the base
by the margin and than the baselines a LoRA that did not learn would pass (the control copied unchanged, the mean of
the other held-out targets)."""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aipc_env.core.formats import dump_json
from aipc_env.core.runfolder import lora_file_in
from aipc_env.errors import AipcError, ExitCode, InputError
from aipc_env.train.results import CompareManifest, CompareSample
from aipc_env.train.verdict import DEFAULT_MARGIN, HeldOutSample, LearningVerdict, learning_verdict

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage

    from aipc_env.dataset import Sample
    from aipc_env.train.config import TrainConfig

GridRow = list[tuple[str, "PILImage | None"]]
"""One row of the grid: (label, image) cells; a None image leaves its cell empty."""

__all__ = ["CompareRequest", "run_compare"]


@dataclass
class CompareRequest:
    model_path: Path
    lora: Path
    test_set: Path
    out: Path
    num_inference_steps: int = 20
    seed: int = 0
    device: str = "auto"
    max_samples: int | None = None
    margin: float = DEFAULT_MARGIN
    control_pixels: int = 1024 * 1024
    """The control area the LoRA was trained at (TrainConfig.control_area()); the pipeline conditions at it."""
    samples: list[Sample] | None = None
    """The held-out samples themselves (a split of the training datasets); None: those of test_set."""
    size: tuple[int, int] | None = None
    """(height, width) to generate at (the run's training size); None: each control's size."""
    config: TrainConfig | None = None
    """The run's config (the judge phase): the pipeline is loaded as the run's tier holds it, the transformer in NF4
    (the fit's own loader, CPU-capable) and the text encoder from model.text_encoder_path (NF4) where set."""


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)[:40] or "sample"


def _lora_file(lora: Path) -> tuple[Path, str]:
    """(folder, weight_name): an explicit weight name, since offline loading cannot discover it."""
    if lora.is_file():
        return lora.parent, lora.name
    if (weights := lora_file_in(lora)).is_file():
        return lora, weights.name
    files = sorted(lora.glob("*.safetensors"))
    if len(files) != 1:
        raise InputError(
            "no single LoRA .safetensors file found", path=lora, fix="pass the LoRA file itself, or the run's lora/ folder"
        )
    return lora, files[0].name


def _distance(a: PILImage, b: PILImage) -> float:
    import numpy as np

    b = b.resize(a.size)
    return float(np.abs(np.asarray(a, dtype=np.int16) - np.asarray(b, dtype=np.int16)).mean())


def _png(img: PILImage) -> bytes:
    import io

    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def _pixels(img: PILImage, size: tuple[int, int]) -> Any:
    import numpy as np

    return np.asarray(img.convert("RGB").resize(size), dtype=np.float64)


def measure_images(
    outputs: list[tuple[str, PILImage, PILImage, PILImage, PILImage]], *, margin: float = DEFAULT_MARGIN
) -> LearningVerdict:
    """The verdict on generated images: (id, base, LoRA, control, target) per sample. Each distance is the mean
    absolute pixel difference (0-255) to the target, at the generated image's size: the base's and the LoRA's
    result, the control copied unchanged, and (two samples or more) the mean of the other samples' targets."""
    import numpy as np

    samples = []
    for j, (sid, b_img, l_img, control, target) in enumerate(outputs):
        size = b_img.size
        pix = _pixels(target, size)

        def dist(img: Any, pix: Any = pix) -> float:
            return round(float(np.abs(img - pix).mean()), 3)

        others = [_pixels(t, size) for k, (*_, t) in enumerate(outputs) if k != j]
        samples.append(
            HeldOutSample(
                id=sid,
                base=dist(_pixels(b_img, size)),
                lora=dist(_pixels(l_img, size)),
                copy_control=dist(_pixels(control, size)),
                mean_target=dist(np.mean(others, axis=0)) if others else None,
            )
        )
    return learning_verdict(samples, metric="mean absolute pixel difference, 0-255", margin=margin)


def _load_pipeline(req: CompareRequest, dev: Any, dtype: Any, log: Callable[[str], object]) -> Any:
    """The diffusers pipeline: as saved (bf16) for `compare`; for the judge phase (req.config), the NF4 transformer
    of the fit's own loader (quantized layer by layer on a CPU, where diffusers' BitsAndBytesConfig refuses) and
    the pre-quantized NF4 text encoder where the config names one (the 32 GB tier)."""
    from diffusers import DiffusionPipeline

    if req.config is None:
        return DiffusionPipeline.from_pretrained(str(req.model_path), torch_dtype=dtype).to(dev)
    from aipc_env.workers.train.fit import load_transformer

    cfg = req.config
    assert cfg.model
    parts: dict[str, Any] = {}
    if cfg.model.text_encoder_path:
        from transformers import Qwen2_5_VLForConditionalGeneration

        log(f"compare: loading the NF4 text encoder {cfg.model.text_encoder_path}")
        parts["text_encoder"] = Qwen2_5_VLForConditionalGeneration.from_pretrained(cfg.model.text_encoder_path)
    log("compare: loading the transformer in NF4")
    parts["transformer"] = load_transformer(cfg, dev, dtype, log=log)
    pipe = DiffusionPipeline.from_pretrained(str(req.model_path), torch_dtype=dtype, **parts)
    for name in ("text_encoder", "vae"):
        if name not in parts:
            getattr(pipe, name).to(dev)
    return pipe


def _grid(rows: list[GridRow], cell: int = 160) -> bytes:
    from PIL import Image, ImageDraw

    cols = max(len(r) for r in rows)
    grid = Image.new("RGB", (cols * cell, len(rows) * (cell + 14)), "white")
    draw = ImageDraw.Draw(grid)
    for y, row in enumerate(rows):
        for x, (label, img) in enumerate(row):
            if img is None:
                continue
            scale = cell / max(img.size)
            thumb = img.resize((max(1, round(img.width * scale)), max(1, round(img.height * scale))))
            grid.paste(thumb, (x * cell, y * (cell + 14) + 14))
            draw.text((x * cell + 2, y * (cell + 14)), label, fill="black")
    return _png(grid)


def run_compare(req: CompareRequest, log: Callable[[str], object] = print) -> CompareManifest:
    import torch

    from aipc_env.dataset import scan_dataset
    from aipc_env.workers.train.compat import processor_without_video
    from aipc_env.workers.train.conditioning import pipeline_control_pixels

    if not (req.model_path / "model_index.json").is_file():
        raise InputError(
            "not a diffusers model folder (no model_index.json)",
            path=req.model_path,
            fix="point --config's model.path at the Qwen-Image-Edit folder",
        )
    missing = [p for p in ("transformer", "text_encoder", "vae", "scheduler", "tokenizer") if not (req.model_path / p).is_dir()]
    if missing:
        raise InputError(
            f"model parts missing: {', '.join(missing)}",
            path=req.model_path,
            fix="complete the download (huggingface-cli download resumes)",
        )
    lora_dir, weight_name = _lora_file(req.lora)
    held = req.samples if req.samples is not None else scan_dataset(req.test_set).samples
    samples = [s for s in held if s.controls and s.prompt]
    if req.max_samples:
        samples = samples[: req.max_samples]
    if not samples:
        raise InputError(
            "the test set has no usable sample (each needs a control image and a prompt)",
            path=req.test_set,
            fix="hold out at least 3 samples in the training layout",
        )
    from aipc_env.core.outputs import OutputFolder
    from aipc_env.dataset.images import open_rgb, sample_image_problems

    root = req.test_set if req.test_set.is_dir() else req.test_set.parent
    if problems := sample_image_problems(samples, root):  # every image opened before the model loads
        raise InputError(
            f"the test set has images aipc-env will not read: {'; '.join(problems[:3])}"
            + (f" (+{len(problems) - 3} more)" if len(problems) > 3 else ""),
            path=req.test_set,
            fix=f'aipc-env dataset validate "{req.test_set}" lists every problem',
        )
    folder = OutputFolder(req.out)
    folder.check(["manifest.json", "grid.png"])  # a folder it cannot write is refused before the model loads
    files: dict[str, bytes] = {}
    processor_without_video()
    from aipc_env.workers.train.devices import compute_dtype, pick_device

    dev = pick_device(req.device)
    device = str(dev)
    pipe = _load_pipeline(req, dev, compute_dtype(dev), log)
    plus = type(pipe).__name__.endswith("PlusPipeline")

    def load(part: Path | bytes) -> PILImage:
        return open_rgb(part, root=root)

    def generate(sample: Sample) -> tuple[PILImage, float]:
        controls = [load(c) for c in sample.controls]
        w, h = controls[0].size
        if req.size is not None:
            h, w = req.size
        h, w = max(16, h // 16 * 16), max(16, w // 16 * 16)  # the pipelines need multiples of 16
        t = time.perf_counter()
        with pipeline_control_pixels(pipe, req.control_pixels):
            image: PILImage = pipe(
                image=controls if plus else controls[0],
                prompt=sample.prompt,
                height=h,
                width=w,
                num_inference_steps=req.num_inference_steps,
                true_cfg_scale=1.0,
                generator=torch.Generator().manual_seed(req.seed),
            ).images[0]
        return image, time.perf_counter() - t

    base: list[tuple[PILImage, float]] = []
    for i, s in enumerate(samples):
        base.append(generate(s))
        log(f"compare: base {i + 1}/{len(samples)} ({base[-1][1]:.1f} s)")
    try:
        pipe.load_lora_weights(str(lora_dir), weight_name=weight_name)
    except Exception as exc:  # noqa: BLE001 - diffusers raises several types for a mismatched LoRA
        raise AipcError(
            f"the LoRA does not fit this model ({type(exc).__name__}: {str(exc)[:200]})",
            path=req.lora,
            fix="compare with the base model the LoRA was trained on",
        ) from None
    (config,) = pipe.transformer.peft_config.values()
    rows: list[GridRow] = []
    entries: list[dict[str, Any]] = []
    judged: list[tuple[str, PILImage, PILImage, PILImage, PILImage]] = []
    for i, (s, (b_img, b_t)) in enumerate(zip(samples, base)):
        l_img, l_t = generate(s)
        stem = f"sample_{i:02d}_{_slug(s.id)}"
        files[f"{stem}__base.png"] = _png(b_img)
        files[f"{stem}__lora.png"] = _png(l_img)
        target = load(s.target) if s.target is not None else None
        entry: dict[str, Any] = {
            "id": s.id,
            "prompt": s.prompt,
            "seed": req.seed,
            "size": list(b_img.size),
            "files": {"base": f"{stem}__base.png", "lora": f"{stem}__lora.png"},
            "seconds": {"base": round(b_t, 3), "lora": round(l_t, 3)},
            "base_vs_lora": round(_distance(b_img, l_img), 3),
        }
        if target is not None:
            files[f"{stem}__target.png"] = _png(target)
            entry["files"]["target"] = f"{stem}__target.png"
            entry["distance_to_target"] = {"base": round(_distance(b_img, target), 3), "lora": round(_distance(l_img, target), 3)}
            judged.append((s.id, b_img, l_img, load(s.controls[0]), target))
        entries.append(entry)
        rows.append(
            [*[(f"control {k}", load(c)) for k, c in enumerate(s.controls)], ("target", target), ("base", b_img), ("LoRA", l_img)]
        )
        log(f"compare: LoRA {i + 1}/{len(samples)} ({l_t:.1f} s), base vs LoRA {entry['base_vs_lora']:.2f}")
    files["grid.png"] = _grid(rows)
    unchanged = all(e["base_vs_lora"] == 0 for e in entries)
    verdict = measure_images(judged, margin=req.margin) if judged else None
    manifest = CompareManifest(
        model=str(req.model_path),
        lora=str(req.lora),
        lora_rank=config.r,
        lora_alpha=config.lora_alpha,
        num_inference_steps=req.num_inference_steps,
        seed=req.seed,
        device=device,
        samples=[CompareSample.model_validate(e) for e in entries],
        lora_changed_nothing=unchanged,
        verdict=verdict,
    )
    files["manifest.json"] = dump_json(manifest).encode("utf-8")
    folder.write(files)  # every image and the manifest, or none of them
    if unchanged:
        log("compare: WARNING base and LoRA outputs are identical: the training had no effect")
    if verdict is None:
        log("compare: no held-out sample has a target image: no verdict on whether the LoRA learned the edit")
    return manifest


def main(argv: list[str] | None = None) -> int:
    """`aipc-env compare`'s worker: the manifest goes to --result (commands/compare.py reads it back)."""
    from aipc_env.core.formats import write_model
    from aipc_env.launch.hops import CompareRun, run_worker

    args = CompareRun.parse(argv)

    def body() -> int:
        manifest = run_compare(
            CompareRequest(
                model_path=args.model,
                lora=Path(args.lora),
                test_set=Path(args.test_set),
                out=Path(args.out),
                num_inference_steps=args.num_inference_steps,
                seed=args.seed,
                device=args.device,
                max_samples=args.max_samples,
                margin=args.margin,
            ),
            log=lambda line: print(line, flush=True),
        )
        write_model(args.result, manifest)
        return ExitCode.OK

    return run_worker("compare", body, result=args.result)


if __name__ == "__main__":
    sys.exit(main())
