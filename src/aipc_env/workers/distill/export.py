"""`distill export --format comfyui`: the published LoRA (diffusers/peft layout with adapter metadata) rewritten in
the layout ComfyUI loads and Qwen-Image-Lightning ships: `diffusion_model.<module>.lora_down.weight` (A),
`.lora_up.weight` (B) and `.alpha` (a scalar), one file, no metadata needed. diffusers reads the same layout back
through its own conversion of non-diffusers Qwen-Image LoRAs (the one that loads Lightning LoRAs).

Every key is written in a form ComfyUI's key map (comfy/lora.py, the QwenImage branch, over the Qwen-Image 2.1
module tree) loads, or the module is refused by name: ComfyUI fuses the MLP's `proj` and `gate_layer` into
`img_mlp.gate_up` and maps their halves only for keys without the `diffusion_model.` prefix, so those two are
written bare (tests/fixtures/comfyui: ComfyUI's own key map, recorded). The folder also gets the base model's
licence text and a change notice with "Built with Qwen" (aipc_env.distill.licence), and the file's metadata says so.

Run in the training env: `python -m aipc_env.workers.distill.export --config C --format comfyui [--out FILE] [--repo ID]`.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aipc_env.core.fileio import parse_json
from aipc_env.core.runfolder import LORA_WEIGHTS, RunFolder, lora_file_in
from aipc_env.distill.licence import NOTICE_MARK
from aipc_env.errors import ExitCode, InputError
from aipc_env.launch.hops import EXPORT_FORMATS, DistillExport, run_worker

if TYPE_CHECKING:
    import torch

__all__ = ["FORMATS", "Provenance", "comfyui_key", "comfyui_state_dict", "export_lora", "main"]

FORMATS = EXPORT_FORMATS
_KEY = re.compile(
    r"^transformer\.((?:[A-Za-z_][A-Za-z0-9_]*|[0-9]+)(?:\.(?:[A-Za-z_][A-Za-z0-9_]*|[0-9]+))*)"
    r"\.lora_([AB])\.weight$"
)
_MAX_TENSORS = 100_000
_BLOCK = re.compile(r"^transformer_blocks\.[0-9]+\.(.+)$")
_SAME_NAME_IN_COMFYUI = {"attn.to_q", "attn.to_k", "attn.to_v", "attn.to_out.0", "img_mlp.out"}
_FUSED_HALVES = {"img_mlp.proj", "img_mlp.gate_layer"}
"""ComfyUI's Qwen-Image 2.1 block fuses these into img_mlp.gate_up; its key map maps their halves for bare keys."""
_TOP_LEVEL = {"img_in", "txt_in.in_layer", "txt_in.out_layer", "modulation.1", "norm_out.linear", "proj_out"}
_MAX_NAMED = 3


@dataclass(frozen=True)
class Provenance:
    """What the notice and the metadata say of an export: the base model folder (its licence is copied), the
    training config's hash, the grids' step counts, and the repository it will be published as (optional)."""

    model_dir: Path
    base_model: str
    config_sha256: str
    student_steps: int
    teacher_steps: int
    repo: str | None = None


def comfyui_key(module: str) -> str:
    """The LoRA key base ComfyUI loads for a diffusers module name of the Qwen-Image 2.1 transformer; a module it
    would not load onto the right weight raises ValueError with the reason."""
    block = _BLOCK.match(module)
    if (block and block.group(1) in _SAME_NAME_IN_COMFYUI) or module in _TOP_LEVEL:
        return f"diffusion_model.{module}"
    if block and block.group(1) in _FUSED_HALVES:
        return module  # the only form ComfyUI maps onto its half of the fused gate_up
    if module.startswith("time_text_embed."):
        raise ValueError("ComfyUI builds the timestep embedder from another model's module: its key is not proven to load")
    raise ValueError('ComfyUI\'s Qwen-Image 2.1 model has no such module: its keys would be "lora key not loaded"')


def _metadata(raw: dict[str, str] | None, path: Path) -> tuple[int, float]:
    """(rank, alpha) from the adapter metadata; without it the alpha is unknown (distillation lesson 6): refused."""
    text = (raw or {}).get("lora_adapter_metadata")
    if not text:
        raise InputError(
            "the LoRA has no adapter metadata: its alpha is unknown, and an export would load at the wrong strength",
            path=path,
            fix="publish it again with `aipc-env distill train`",
        )
    try:
        meta = parse_json(text, path, "adapter metadata")
        rank, alpha = int(meta["transformer.r"]), float(meta["transformer.lora_alpha"])
    except InputError as exc:
        raise InputError(
            f"its adapter metadata is unreadable ({exc.message})", path=path, fix="publish it again with `aipc-env distill train`"
        ) from None
    except (ValueError, KeyError, TypeError) as exc:
        raise InputError(
            f"its adapter metadata is unreadable ({type(exc).__name__}: {exc})",
            path=path,
            fix="publish it again with `aipc-env distill train`",
        ) from None
    if meta.get("transformer.rank_pattern") or meta.get("transformer.alpha_pattern"):
        raise InputError(
            "per-module ranks or alphas (rank_pattern/alpha_pattern) are not exported",
            path=path,
            fix="train with one rank and alpha for every module",
        )
    if meta.get("transformer.use_dora") or meta.get("transformer.use_rslora"):
        raise InputError(
            "DoRA or rsLoRA adapters have no ComfyUI LoRA layout",
            path=path,
            fix="train a plain LoRA (use_dora and use_rslora off)",
        )
    if not 1 <= rank <= 4096 or not 0 < alpha < float("inf"):  # NaN and Infinity fail too
        raise InputError(
            f"rank {rank} / alpha {alpha:g} in its metadata are not usable",
            path=path,
            fix="publish it again with `aipc-env distill train`",
        )
    return rank, alpha


def comfyui_state_dict(tensors: dict[str, torch.Tensor], rank: int, alpha: float, *, path: Path) -> dict[str, torch.Tensor]:
    """diffusers-layout tensors -> ComfyUI/Lightning layout. Every key must be a transformer LoRA A/B weight of
    the stated rank, in pairs."""
    import torch

    if len(tensors) > _MAX_TENSORS:
        raise InputError(
            f"{len(tensors)} tensors: more than any Qwen-Image LoRA has",
            path=path,
            fix=f"point at the run's lora/{LORA_WEIGHTS}",
        )
    modules: dict[str, dict[str, torch.Tensor]] = {}
    for key, value in tensors.items():
        m = _KEY.match(key)
        if m is None:
            raise InputError(
                f"tensor {key!r} is not a transformer LoRA weight (transformer.<module>.lora_A/B.weight)",
                path=path,
                fix="export only LoRAs published by `aipc-env distill train`",
            )
        modules.setdefault(m.group(1), {})[m.group(2)] = value
    refused: dict[str, list[str]] = {}
    for module in sorted(modules):
        try:
            comfyui_key(module)
        except ValueError as exc:
            refused.setdefault(str(exc), []).append(module)
    if refused:
        reason, names = next(iter(refused.items()))
        more = sum(len(v) for v in refused.values()) - min(len(names), _MAX_NAMED)
        raise InputError(
            f"ComfyUI would not load {', '.join(names[:_MAX_NAMED])}{f' (and {more} more)' if more else ''}: {reason}",
            path=path,
            fix="train without those modules in student.target_modules "
            "(attention: to_q, to_k, to_v, to_out.0; MLP: img_mlp.proj, img_mlp.gate_layer, img_mlp.out)",
        )
    out = {}
    for module, pair in sorted(modules.items()):
        if set(pair) != {"A", "B"}:
            raise InputError(
                f"module {module} has lora_{''.join(pair)} without its pair", path=path, fix="publish the LoRA again"
            )
        a, b = pair["A"], pair["B"]
        if a.ndim != 2 or b.ndim != 2 or a.shape[0] != rank or b.shape[1] != rank:
            raise InputError(
                f"module {module}: lora_A {tuple(a.shape)} / lora_B {tuple(b.shape)} do not have rank {rank}",
                path=path,
                fix="publish the LoRA again",
            )
        key = comfyui_key(module)
        out[f"{key}.lora_down.weight"] = a.contiguous()
        out[f"{key}.lora_up.weight"] = b.contiguous()
        out[f"{key}.alpha"] = torch.tensor(alpha, dtype=torch.float32)
    return out


def export_lora(lora_dir: Path, dest: Path, fmt: str = "comfyui", *, provenance: Provenance) -> dict[str, Any]:
    """Write the export: the base model's licence text (LICENSE) and the change notice (NOTICE.md) beside the
    weights, all three or none across Ctrl-C (aipc_env.core.outputs). Nothing is written when anything is refused.
    Returns what was written."""
    from safetensors import safe_open
    from safetensors.torch import save

    from aipc_env.core.fileio import check_writable
    from aipc_env.core.outputs import JOURNAL_SUFFIX, commit_files
    from aipc_env.distill.licence import BUILT_WITH, check_repo_name, find_licence, render_notice

    if fmt not in FORMATS:
        raise InputError(f"unknown export format {fmt!r}", fix=f"use one of: {', '.join(FORMATS)}")
    repo = check_repo_name(provenance.repo) if provenance.repo is not None else None
    licence = find_licence(provenance.model_dir)
    src = lora_file_in(lora_dir)
    if not src.is_file():
        raise InputError("no published LoRA there", path=src, fix="run `aipc-env distill train` first")
    try:
        with safe_open(str(src), framework="pt") as fh:
            raw = fh.metadata()
            tensors = {k: fh.get_tensor(k) for k in fh.keys()}  # noqa: SIM118 - safe_open is not iterable
    except Exception as exc:  # noqa: BLE001 - any damage: one clear line
        raise InputError(
            f"not a readable safetensors file ({type(exc).__name__}: {exc})",
            path=src,
            fix="publish the LoRA again with `aipc-env distill train`",
        ) from None
    rank, alpha = _metadata(raw, src)
    converted = comfyui_state_dict(tensors, rank, alpha, path=src)
    modules = sorted(k.removesuffix(".alpha") for k in converted if k.endswith(".alpha"))
    dest = Path(dest)
    check_writable(dest, "the export")
    licence_file, notice_file = dest.parent / "LICENSE", dest.parent / "NOTICE.md"
    _check_replaceable(licence_file, lambda old: old == licence.text)
    _check_replaceable(notice_file, lambda old: old.startswith(NOTICE_MARK))
    notice = render_notice(
        title=repo or dest.stem,
        base_model=provenance.base_model,
        licence=licence,
        rank=rank,
        alpha=alpha,
        student_steps=provenance.student_steps,
        teacher_steps=provenance.teacher_steps,
        modules=modules,
        config_sha256=provenance.config_sha256,
        weights=dest.name,
        fmt=fmt,
        repo=repo,
    )
    metadata = {
        "format": "pt",
        "aipc_env_export": fmt,
        "lora_rank": str(rank),
        "lora_alpha": f"{alpha:g}",
        "built_with": BUILT_WITH,
        "license_file": "LICENSE",
        "license_sha256": licence.sha256,
        "base_model": provenance.base_model,
        "training_config_sha256": provenance.config_sha256,
        "notice": f"{BUILT_WITH}. A LoRA derivative of {provenance.base_model} (rank {rank}, alpha "
        f"{alpha:g}, {provenance.student_steps}-step distillation of its "
        f"{provenance.teacher_steps}-step output); the base model's licence applies: see LICENSE.",
    }
    if repo:
        metadata["repository"] = repo
    if dest.is_symlink():  # the weights file too: never written through a link
        raise InputError("is a link: the export does not write through it", path=dest, fix="export to another file (--out)")
    # the three files together or none (aipc_env.core.outputs): a folder never has weights without their licence
    commit_files(
        {
            licence_file: licence.text.encode("utf-8"),
            notice_file: notice.encode("utf-8"),
            dest: save(converted, metadata=metadata),
        },
        dest.parent / f".{dest.name}{JOURNAL_SUFFIX}",
    )
    return {
        "format": fmt,
        "path": str(dest),
        "modules": len(modules),
        "rank": rank,
        "alpha": alpha,
        "source": str(src),
        "licence": str(licence_file),
        "notice": str(notice_file),
    }


def _check_replaceable(path: Path, ours: Callable[[str], bool]) -> None:
    """A file the export writes may replace only what an earlier export wrote; never through a symlink."""
    from aipc_env.core.fileio import read_text

    if path.is_symlink() or (path.exists() and not path.is_file()):
        raise InputError(
            "is a link or not a regular file: the export does not write through it",
            path=path,
            fix="export into another folder (--out)",
        )
    if path.is_file() and not ours(read_text(path, "file", max_bytes=1 << 20)):
        raise InputError(
            "another file of that name is there (not written by an earlier export of this model)",
            path=path,
            fix="export into another folder (--out), or move that file away",
        )


def main(argv: list[str] | None = None) -> int:
    args = DistillExport.parse(argv)
    return run_worker("distill export", lambda: _export(args))


def _export(args: DistillExport) -> int:
    from aipc_env.distill.config import BUILTIN_TINY21, BUILTIN_TINY21_TRAINED, load_distill_config
    from aipc_env.distill.grid import resolve_grid
    from aipc_env.distill.inputs import file_sha256
    from aipc_env.workers.distill.models import model_dir

    cfg = load_distill_config(args.config)
    dest = Path(args.out) if args.out else cfg.out / "export" / f"student-{args.format}.safetensors"
    path = model_dir(cfg, log=lambda *_: None)
    grid = resolve_grid(cfg.teacher_sigmas, cfg.student_stride, path)
    base_model = {
        BUILTIN_TINY21: "tiny random Qwen-Image-2.1 (aipc-env built-in)",
        BUILTIN_TINY21_TRAINED: "tiny trained Qwen-Image-2.1 (aipc-env built-in)",
    }.get(cfg.model, path.name)
    provenance = Provenance(
        model_dir=path,
        base_model=base_model,
        config_sha256=file_sha256(Path(args.config)) or "",
        repo=args.repo,
        student_steps=len(grid.student),
        teacher_steps=len(grid.teacher),
    )
    result = export_lora(RunFolder(cfg.out).lora_dir, dest, args.format, provenance=provenance)
    print(
        f"distill: exported {result['modules']} LoRA modules (rank {result['rank']}, alpha "
        f"{result['alpha']:g}) in the {args.format} layout to {dest}, with the base model's licence "
        f"(LICENSE) and the change notice (NOTICE.md) beside it",
        flush=True,
    )
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())
