"""Training-config validation in process: every refusal of load_config and check_run_inputs with its file, key and
fix as literals, each bound at, below and above (file size, env value size, target size, dataset problems shown),
and the resolution of relative paths against the config's folder."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from aipc_env.errors import InputError
from aipc_env.train.config import (
    MAX_CONFIG_BYTES,
    MAX_ENV_VALUE,
    absolute_path,
    find_todos,
    load_config,
)
from aipc_env.train.inputs import check_run_inputs, load_run_config

BASE = {
    "model": {"path": "builtin:tiny"},
    "data": {"datasets": ["builtin:synthetic"], "target_size": [64, 64]},
    "output_dir": "out",
}


def _write(folder: Path, data, name: str = "c.yaml") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data), encoding="utf-8")
    return path


def _refusal(call, path: Path) -> tuple:
    """(message, key, fix) of the InputError call raises, which must name the config file."""
    with pytest.raises(InputError) as caught:
        call()
    e = caught.value
    assert e.path == str(path)
    return e.message, e.key, e.fix


def test_paths_are_resolved_against_the_config_folder(tmp_path):
    cfg = load_config(_write(tmp_path / "cfg dir", {**BASE, "cache_dir": "../cache", "train": {"resume": "auto"}}))
    assert (cfg.output_dir, cfg.cache_dir) == (str(tmp_path / "cfg dir" / "out"), str(tmp_path / "cfg dir" / ".." / "cache"))
    assert (cfg.model.path, cfg.data.datasets, cfg.train.resume) == ("builtin:tiny", ["builtin:synthetic"], "auto")
    assert cfg.resolved_cache_dir() == tmp_path / "cfg dir" / ".." / "cache"
    assert absolute_path("/abs/x", tmp_path) == "/abs/x" and absolute_path(None, tmp_path) is None
    assert absolute_path("~/x", tmp_path) == str(Path.home() / "x")
    no_cache = load_config(_write(tmp_path, BASE))
    assert no_cache.resolved_cache_dir() == tmp_path / "out" / "cache"


@pytest.mark.parametrize(("extra", "fits"), [(-1, True), (0, True), (1, False)])
def test_config_size_bound(tmp_path, extra, fits):
    text = yaml.safe_dump(BASE)
    path = _write(tmp_path, text + "#" * (MAX_CONFIG_BYTES - len(text) - 1 + extra) + "\n")
    assert path.stat().st_size == MAX_CONFIG_BYTES + extra
    if fits:
        assert load_config(path).output_dir == str(tmp_path / "out")
    else:
        assert _refusal(lambda: load_config(path), path) == (
            "the config is 1.0 MiB; a training config is a few KiB (limit 1 MiB)",
            None,
            "pass the training config, not a dataset or a model file",
        )


@pytest.mark.parametrize(
    ("text", "refusal"),
    [
        (
            "- a\n- b\n",
            (
                "expected a mapping of sections (model, data, train, ...)",
                None,
                "`aipc-env recommend` writes a complete config for this machine",
            ),
        ),
        (
            yaml.safe_dump({**BASE, "output_dir": "  "}),
            ("output_dir is empty", "output_dir", "name a folder for the run (checkpoints, the LoRA and logs go there)"),
        ),
        (
            yaml.safe_dump({**BASE, "model": {"path": "TODO: the model folder"}, "cache_dir": ["x", " todo"]}),
            (
                "placeholder left to fill: cache_dir[1], model.path",
                "cache_dir[1]",
                "replace each TODO with a real value (a path on this machine)",
            ),
        ),
    ],
)
def test_load_config_refusals(tmp_path, text, refusal):
    path = _write(tmp_path, text)
    assert _refusal(lambda: load_config(path), path) == refusal


def test_find_todos_walks_nested_sections_and_lists():
    assert find_todos({"a": {"b": ["ok", {"c": "ToDo later"}]}, "d": "TODO", "e": "not todo", "f": 3}) == ["a.b[1].c", "d"]


@pytest.mark.parametrize(
    ("env", "error"),
    [
        ({"A_1": "x" * MAX_ENV_VALUE}, None),
        ({"A_1": "x" * (MAX_ENV_VALUE + 1)}, f"the value of A_1 is {MAX_ENV_VALUE + 1} bytes; at most {MAX_ENV_VALUE}"),
        ({"A_1": "é" * (MAX_ENV_VALUE // 2)}, None),
        ({"A_1": "é" * (MAX_ENV_VALUE // 2) + "x"}, f"the value of A_1 is {MAX_ENV_VALUE + 1} bytes; at most {MAX_ENV_VALUE}"),
        ({"_x": "a=b"}, None),
        ({"1A": "x"}, "'1A' is not an environment variable name (letters, digits, _; not first a digit)"),
        ({"A-B": "x"}, "'A-B' is not an environment variable name (letters, digits, _; not first a digit)"),
        ({"A": "=x"}, "the value of A cannot hold a line break or start with '='"),
        ({"A": "x\ny"}, "the value of A cannot hold a line break or start with '='"),
        ({"A": "x\ry"}, "the value of A cannot hold a line break or start with '='"),
        ({"A": "x\x00y"}, "the value of A cannot hold a line break or start with '='"),
    ],
)
def test_env_values_and_names(tmp_path, env, error):
    path = _write(tmp_path, {**BASE, "env": env})
    if error is None:
        assert load_config(path).env == env
    else:
        message, _, _ = _refusal(lambda: load_config(path), path)
        assert message.startswith(f"invalid file: env: {error} (got "), message


@pytest.mark.parametrize(
    ("size", "ok"),
    [([16, 16], True), ([0, 16], False), ([16, 8], False), ([24, 16], False), ([672, 384], True), ([680, 384], False)],
)
def test_target_size_bounds(tmp_path, size, ok):
    path = _write(tmp_path, {**BASE, "data": {**BASE["data"], "target_size": size}})
    if ok:
        assert load_config(path).data.target_size == tuple(size)
    else:
        message, _, _ = _refusal(lambda: load_config(path), path)
        assert message == (
            "invalid file: data.target_size: both sides must be multiples of 16 (the VAE's 8x times "
            f"the 2x2 packing) (got {size})"
        )


@pytest.mark.parametrize(
    ("data", "ending"),
    [
        ({"engine": "qflux", "output_dir": "o"}, "engine qflux needs a 'qflux' section with 'clone' and 'config'"),
        ({"output_dir": "o", "model": {"path": "builtin:tiny"}}, "engine builtin needs 'model' and 'data' sections"),
        ({"output_dir": "o", "data": {"datasets": ["x"]}}, "engine builtin needs 'model' and 'data' sections"),
    ],
)
def test_engine_sections(tmp_path, data, ending):
    path = _write(tmp_path, data)
    message, _, _ = _refusal(lambda: load_config(path), path)
    assert message.startswith(f"invalid file: (top level): {ending} (got "), message


def _model_dir(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "model_index.json").write_text("{}")
    return path


def test_check_run_inputs_refusals_one_by_one(tmp_path):
    model = _model_dir(tmp_path / "model")
    (tmp_path / "afile").write_text("x")
    (tmp_path / "ds").mkdir()
    real = {"model": {"path": str(model)}, "data": {"datasets": [str(tmp_path / "ds")]}, "output_dir": "out"}

    def refusal(data: dict) -> tuple:
        path = _write(tmp_path, data)
        return _refusal(lambda: check_run_inputs(load_config(path), path, datasets=False), path)

    missing = str(tmp_path / "missing")
    assert refusal({**real, "model": {"path": missing}}) == (
        f"model directory {missing!r} does not exist",
        "model.path",
        f"download the model into it: huggingface-cli download Qwen/Qwen-Image-Edit-2511 --local-dir {missing} "
        "(or fix the path); before the download, `--model tiny` trains your dataset on a tiny model",
    )
    qflux = {"engine": "qflux", "qflux": {"clone": str(tmp_path), "config": str(tmp_path / "q.yaml")}}
    assert refusal({**real, **qflux, "model": {"path": missing}})[2].startswith(
        "download the model into it: huggingface-cli download Qwen/Qwen-Image-Edit-2509 --local-dir "
    )
    spaced = str(tmp_path / "my models" / "edit")
    assert refusal({**real, "model": {"path": spaced}})[2] == (
        f'download the model into it: huggingface-cli download Qwen/Qwen-Image-Edit-2511 --local-dir "{spaced}" '
        "(or fix the path); before the download, `--model tiny` trains your dataset on a tiny model"
    )
    assert refusal({**real, "model": {"path": str(tmp_path / "afile")}}) == (
        f"model directory {str(tmp_path / 'afile')!r} is a file, expected a folder",
        "model.path",
        None,
    )
    assert refusal({**real, "model": {"path": str(tmp_path / "ds")}}) == (
        f"{tmp_path / 'ds'} is not a diffusers model folder (no model_index.json)",
        "model.path",
        f"download the model into it: huggingface-cli download Qwen/Qwen-Image-Edit-2511 --local-dir {tmp_path / 'ds'} "
        "(or fix the path); before the download, `--model tiny` trains your dataset on a tiny model",
    )
    assert refusal({**real, "model": {"path": str(model), "transformer_path": missing}}) == (
        f"NF4 transformer directory {missing!r} does not exist",
        "model.transformer_path",
        "fix the path",
    )
    assert refusal({**real, "model": {"path": str(model), "text_encoder_path": str(tmp_path / "afile")}}) == (
        f"NF4 text encoder directory {str(tmp_path / 'afile')!r} is a file, expected a folder",
        "model.text_encoder_path",
        None,
    )
    assert refusal({**real, "train": {"resume": missing}}) == (
        f"checkpoint {missing!r} does not exist",
        "train.resume",
        "fix the path",
    )
    assert refusal({**real, "data": {"datasets": [str(tmp_path / "ds"), missing]}}) == (
        f"dataset {missing!r} does not exist",
        "data.datasets[1]",
        "fix the path",
    )
    assert refusal({**real, "output_dir": str(tmp_path / "afile")}) == (
        f"output_dir {str(tmp_path / 'afile')!r} is a file; expected a folder",
        "output_dir",
        "choose another path",
    )
    assert refusal({**real, "cache_dir": str(tmp_path / "afile" / "sub")}) == (
        f"cannot write cache_dir {str(tmp_path / 'afile' / 'sub')!r}: {tmp_path / 'afile'} is a file, not a folder",
        "cache_dir",
        "choose a path inside a folder",
    )
    assert refusal({**real, "data": {"datasets": ["builtin:synthetic"]}}) == (
        "builtin:synthetic goes with model builtin:tiny",
        "data.datasets",
        "use your dataset folder, parquet folder or CSV",
    )
    assert refusal({**BASE, "data": {"datasets": ["builtin:synthetic", str(tmp_path / "ds")]}}) == (
        "model builtin:tiny trains only on builtin:synthetic",
        "data.datasets",
        "your dataset on a tiny model: aipc-env train CONFIG --model tiny (model.path: a model folder)",
    )
    clone = tmp_path / "clone"
    clone.mkdir()
    qcfg = tmp_path / "q.yaml"
    qcfg.write_text("x: 1\n")
    qflux = {"engine": "qflux", "output_dir": "out"}
    assert refusal({**qflux, "qflux": {"clone": str(clone), "config": str(tmp_path)}}) == (
        f"qflux config {str(tmp_path)!r} is a folder, expected a file",
        "qflux.config",
        None,
    )
    assert refusal({**qflux, "qflux": {"clone": str(tmp_path / "afile"), "config": str(qcfg)}}) == (
        f"qwen-image-finetune clone {str(tmp_path / 'afile')!r} is a file, expected a folder",
        "qflux.clone",
        None,
    )
    assert refusal({**qflux, "qflux": {"clone": str(clone), "config": str(qcfg)}}) == (
        f"{clone} has no src/qflux package",
        "qflux.clone",
        "point qflux.clone at a clone of tsiendragon/qwen-image-finetune",
    )
    (clone / "src" / "qflux").mkdir(parents=True)
    path = _write(tmp_path, {**qflux, "qflux": {"clone": str(clone), "config": str(qcfg)}})
    check_run_inputs(load_config(path), path)  # complete: no refusal


def _flawed_dataset(root: Path, flaws: int) -> Path:
    from PIL import Image

    for folder in ("training_images", "control_images"):
        (root / folder).mkdir(parents=True)
    for i in range(5):
        for folder in ("training_images", "control_images"):
            Image.new("RGB", (64, 64)).save(root / folder / f"s{i}.png")
        prompt = "" if i < flaws else "Add the small red character to the left side of the image please"
        (root / "training_images" / f"s{i}.txt").write_text(prompt)
    return root


@pytest.mark.parametrize(("flaws", "more"), [(3, ""), (4, " (+1 more)")])
def test_an_invalid_dataset_shows_three_issues_then_a_count(tmp_path, flaws, more):
    ds = _flawed_dataset(tmp_path / "ds", flaws)
    model = _model_dir(tmp_path / "model")
    path = _write(
        tmp_path, {"model": {"path": str(model)}, "data": {"datasets": [str(ds)], "target_size": [64, 64]}, "output_dir": "out"}
    )
    t = ds / "training_images"
    shown = "; ".join(
        f"{t / f's{i}.png'}: its prompt file s{i}.txt is empty; write the edit instruction into it" for i in range(3)
    )
    assert _refusal(lambda: load_run_config(path), path) == (
        f"dataset {ds} is invalid: {shown}{more}",
        "data.datasets[0]",
        f'aipc-env dataset validate "{ds}" lists every problem',
    )
    assert load_run_config(path, datasets=False).data.datasets == [str(ds)]


def test_a_config_that_is_not_utf8_is_named_as_a_training_config(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_bytes(b"output_dir: caf\xe9\n")
    assert _refusal(lambda: load_config(path), path) == (
        "training config is not UTF-8 text (invalid continuation byte at byte 15; it looks like a Windows ANSI code "
        "page (cp1252))",
        None,
        "save it as UTF-8 (in PowerShell: Get-Content F | Set-Content -Encoding utf8 F2)",
    )


def test_a_legacy_config_version_key_still_loads(tmp_path):
    cfg = load_config(_write(tmp_path, {"config_version": 1, **BASE}))
    assert cfg.schema_version == 1 and cfg.output_dir == str(tmp_path / "out")


def test_datasets_in_a_list_and_in_sections_are_all_resolved(tmp_path):
    cfg = load_config(
        _write(
            tmp_path,
            {
                "model": {"path": "m", "transformer_path": "t"},
                "data": {"datasets": ["a", "/abs/b", "builtin:synthetic"]},
                "output_dir": "o",
                "train": {"resume": "ck"},
            },
        )
    )
    assert cfg.data.datasets == [str(tmp_path / "a"), "/abs/b", "builtin:synthetic"]
    assert (cfg.model.path, cfg.model.transformer_path, cfg.train.resume) == (
        str(tmp_path / "m"),
        str(tmp_path / "t"),
        str(tmp_path / "ck"),
    )


def test_todos_in_lists_are_all_found(tmp_path):
    assert find_todos({"a": ["TODO 1", "TODO 2"], "b": "todo"}) == ["a[0]", "a[1]", "b"]
