"""What a run needs before any phase starts, checked without the training stack: the config's paths, the model
folder, the engine/model/data combinations, a resume that fits, and every dataset. One path for `aipc-env train` and
the engine's phases (config.py reads the file; this module checks what it names)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from aipc_env.core.fileio import check_writable
from aipc_env.errors import InputError
from aipc_env.train.config import BUILTIN_SYNTHETIC, BUILTIN_TINY, TrainConfig, load_config
from aipc_env.train.resume import check_resume

__all__ = ["check_run_inputs", "load_run_config"]


def _missing_fix(cfg: TrainConfig, key: str, value: str) -> str:
    """A missing model folder: the download that fills it, and the tiny model that needs none."""
    if key != "model.path":
        return "fix the path"
    from aipc_env.core.invocation import QFLUX_MODEL_REPO, download_model

    repo = download_model(value, QFLUX_MODEL_REPO) if cfg.engine == "qflux" else download_model(value)
    return (  # a half download resumes
        f"download the model into it: {repo} (or fix the path); before the download, `--model tiny` trains your "
        "dataset on a tiny model"
    )


def check_run_inputs(cfg: TrainConfig, path: Path, *, datasets: bool = True, model: bool = True) -> None:
    """Everything a run needs that can be checked without the training stack: paths exist and have the right
    kind, the model folder is a diffusers pipeline, engine/model/data combinations hold, and (datasets=True)
    every dataset validates. One path for `aipc-env train` and the engine's phases."""

    def must_exist(value: str | None, key: str, what: str, kind: str | None = None) -> None:
        if not value or value.startswith("builtin:"):
            return
        p = Path(value)
        if not p.exists():
            raise InputError(f"{what} {value!r} does not exist", path=path, key=key, fix=_missing_fix(cfg, key, value))
        if kind == "dir" and not p.is_dir():
            raise InputError(f"{what} {value!r} is a file, expected a folder", path=path, key=key)
        if kind == "file" and not p.is_file():
            raise InputError(f"{what} {value!r} is a folder, expected a file", path=path, key=key)

    check_writable(cfg.output_dir, "output_dir", folder=True, key="output_dir", config=path)
    if cfg.cache_dir:
        check_writable(cfg.cache_dir, "cache_dir", folder=True, key="cache_dir", config=path)
    if cfg.model and model:  # model=False: the run's first phase builds it (train --model tiny)
        must_exist(cfg.model.path, "model.path", "model directory", "dir")
        must_exist(cfg.model.transformer_path, "model.transformer_path", "NF4 transformer directory", "dir")
        must_exist(cfg.model.text_encoder_path, "model.text_encoder_path", "NF4 text encoder directory", "dir")
        if cfg.model.path != BUILTIN_TINY and not (Path(cfg.model.path) / "model_index.json").is_file():
            raise InputError(
                f"{cfg.model.path} is not a diffusers model folder (no model_index.json)",
                path=path,
                key="model.path",
                fix=_missing_fix(cfg, "model.path", cfg.model.path),
            )
    if cfg.train.resume and cfg.train.resume != "auto":
        must_exist(cfg.train.resume, "train.resume", "checkpoint", "dir")
    if cfg.engine == "builtin" and cfg.train.resume:
        check_resume(cfg, path)
    if cfg.qflux:
        must_exist(cfg.qflux.clone, "qflux.clone", "qwen-image-finetune clone", "dir")
        must_exist(cfg.qflux.config, "qflux.config", "qflux config", "file")
        if not (Path(cfg.qflux.clone) / "src" / "qflux").is_dir():
            raise InputError(
                f"{cfg.qflux.clone} has no src/qflux package",
                path=path,
                key="qflux.clone",
                fix="point qflux.clone at a clone of tsiendragon/qwen-image-finetune",
            )
    if cfg.model and cfg.model.path == BUILTIN_TINY:  # its cache checked now, not after the 10-minute build
        from aipc_env.train.tinybase import base_cache_root, check_base_cache

        check_base_cache(base_cache_root())
    if cfg.data and cfg.model:
        for i, ds in enumerate(cfg.data.datasets):
            must_exist(ds, f"data.datasets[{i}]", "dataset")
        _check_heldout(cfg, path, must_exist)
        if datasets:
            _check_datasets(cfg, path)
        synthetic = [d == BUILTIN_SYNTHETIC for d in cfg.data.datasets]
        if cfg.model.path == BUILTIN_TINY and not all(synthetic):
            raise InputError(
                "model builtin:tiny trains only on builtin:synthetic",
                path=path,
                key="data.datasets",
                fix="your dataset on a tiny model: aipc-env train CONFIG --model tiny (model.path: a model folder)",
            )
        if cfg.model.path != BUILTIN_TINY and any(synthetic):
            raise InputError(
                "builtin:synthetic goes with model builtin:tiny",
                path=path,
                key="data.datasets",
                fix="use your dataset folder, parquet folder or CSV",
            )


def _check_heldout(cfg: TrainConfig, path: Path, must_exist: Callable[[str | None, str, str], None]) -> None:
    """The held-out set exists, is not one of the training datasets, goes with a model folder, and every sample
    the judge phase would use has a control, a prompt and a target."""
    assert cfg.data and cfg.model
    if cfg.data.heldout_count is not None and cfg.model.path == BUILTIN_TINY:
        raise InputError(
            "the built-in model judges itself on the built-in edit's held-out samples",
            path=path,
            key="data.heldout_count",
            fix="remove data.heldout_count (or train a model folder on your dataset)",
        )
    if cfg.data.heldout is None:
        return
    if cfg.model.path == BUILTIN_TINY:
        raise InputError(
            "the built-in model judges itself on the built-in edit's held-out samples",
            path=path,
            key="data.heldout",
            fix="remove data.heldout (or train a model folder on your dataset)",
        )
    must_exist(cfg.data.heldout, "data.heldout", "held-out set")
    held = Path(cfg.data.heldout).resolve()
    for i, ds in enumerate(cfg.data.datasets):
        if Path(ds).resolve() == held:
            raise InputError(
                f"the held-out set is data.datasets[{i}]: the fit trains on it, so it judges nothing",
                path=path,
                key="data.heldout",
                fix="hold out samples in a folder of their own",
            )
    from aipc_env.dataset import scan_dataset

    samples = scan_dataset(cfg.data.heldout).samples[: cfg.data.heldout_max_samples]
    incomplete = [s.id for s in samples if not (s.controls and s.prompt and s.target is not None)]
    if not samples or incomplete:
        what = "no samples" if not samples else "samples without a control, a prompt or a target: " + ", ".join(incomplete[:5])
        raise InputError(
            f"the held-out set has {what}",
            path=path,
            key="data.heldout",
            fix="each held-out sample needs its control image, its prompt and its edited target",
        )
    from aipc_env.dataset.images import sample_image_problems

    root = held if held.is_dir() else held.parent
    if problems := sample_image_problems(samples, root):  # opened now, not after the fit
        raise InputError(
            f"the held-out set has images aipc-env will not read: {'; '.join(problems[:3])}"
            + (f" (+{len(problems) - 3} more)" if len(problems) > 3 else ""),
            path=path,
            key="data.heldout",
            fix=f'aipc-env dataset validate "{cfg.data.heldout}" lists every problem',
        )


def _check_datasets(cfg: TrainConfig, path: Path) -> None:
    from aipc_env.dataset import validate_dataset

    assert cfg.data
    for i, ds in enumerate(cfg.data.datasets):
        if ds.startswith("builtin:"):
            continue
        verdict = validate_dataset(ds, cfg.data.target_size)
        if not verdict.valid:
            more = len(verdict.issues) - 3
            shown = "; ".join(verdict.issues[:3]) + (f" (+{more} more)" if more > 0 else "")
            raise InputError(
                f"dataset {ds} is invalid: {shown}",
                path=path,
                key=f"data.datasets[{i}]",
                fix=f'aipc-env dataset validate "{ds}" lists every problem',
            )
    if cfg.data.heldout_count is not None:
        from aipc_env.dataset.split import split_datasets
        from aipc_env.dataset.validate import split_problems

        samples, _ = split_datasets(cfg.data.datasets, None)
        _, issues = split_problems(samples, cfg.data.heldout_count)
        if issues:
            raise InputError(
                "; ".join(issues),
                path=path,
                key="data.heldout_count",
                fix="add samples, or hold out fewer (at least 3)",
            )


def load_run_config(path: str | Path, *, datasets: bool = True, model: bool = True) -> TrainConfig:
    """load_config + check_run_inputs: what `aipc-env train` and every engine phase run first."""
    cfg = load_config(path)
    check_run_inputs(cfg, Path(path), datasets=datasets, model=model)
    return cfg
