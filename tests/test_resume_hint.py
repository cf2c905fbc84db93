"""What a stopped training run says resumes it: the same command, with the config quoted where it has a space, and
the setting a run needs to go on from its last checkpoint instead of starting over."""

from __future__ import annotations

from pathlib import Path

import yaml

from aipc_env.train.config import load_config
from aipc_env.train.run import resume_hint, write_default_config


def _config(folder: Path, **train: object) -> Path:
    model = folder / "model"
    (model).mkdir(parents=True, exist_ok=True)
    path = folder / "my run.yaml"
    data = {"model": {"path": str(model)}, "data": {"datasets": [str(folder / "ds")]}, "output_dir": str(folder / "out")}
    if train:
        data["train"] = train
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_a_run_that_resumes_by_itself(tmp_path: Path) -> None:
    path = _config(tmp_path, resume="auto")
    assert resume_hint(load_config(path), path) == f'aipc-env train "{path}"'


def test_a_run_that_would_start_over_says_what_to_set(tmp_path: Path) -> None:
    path = _config(tmp_path)
    assert resume_hint(load_config(path), path) == (
        f'aipc-env train "{path}" (set train.resume: auto in {path} first, or it starts over)'
    )


def test_the_built_in_default_is_run_again_as_it_was_started(tmp_path: Path) -> None:
    path = write_default_config(tmp_path / "runs" / "builtin-default")
    assert resume_hint(load_config(path), path) == "aipc-env train"
