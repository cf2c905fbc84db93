"""The cached tiny base is trusted only whole: its record holds the sha256 of every file from_pretrained reads (the
config with the weights), so an edited config is a rebuild, not a half model; a cache path that cannot hold the
folder (a file) is refused in a second by `train --dry-run` and before the build, not after it."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest

from aipc_env.errors import InputError
from aipc_env.train import tinybase
from aipc_env.train.buildcache import folder_digests, recipe_key
from aipc_env.workers.train import tinyedit
from tests.conftest import run_cli


class _Rebuilt(Exception):
    pass


def _key() -> str:
    return recipe_key(asdict(tinybase.BASE_RECIPE))


def _fake_cache(root: Path) -> Path:
    """A cached base as load_tiny_base writes it, from an untrained tiny transformer (the 10-minute training is not
    what is tested here: the hash rule is)."""
    from aipc_env.workers.train.tiny import build_tiny_transformer

    folder = root / f"tiny-edit-base-{_key()}"
    folder.mkdir(parents=True)
    build_tiny_transformer(seed=0).save_pretrained(str(folder), safe_serialization=True)
    (folder / "aipc_tiny_base.json").write_text(
        json.dumps({"recipe": asdict(tinybase.BASE_RECIPE), "files": folder_digests(folder, record="aipc_tiny_base.json")})
    )
    return folder


@pytest.fixture
def no_training(monkeypatch):
    def rebuilt(log):
        raise _Rebuilt

    monkeypatch.setattr(tinyedit, "_train_base", rebuilt)


def test_an_intact_cache_loads_without_training(tmp_path, no_training):
    _fake_cache(tmp_path)
    assert tinyedit.load_tiny_base(tmp_path, log=lambda _m: None) is not None


@pytest.mark.parametrize("edit", ["config", "weights", "extra-file", "record"])
def test_an_edited_cache_is_rebuilt_not_loaded(tmp_path, no_training, edit):
    folder = _fake_cache(tmp_path)
    if edit == "config":
        config = json.loads((folder / "config.json").read_text())
        config["num_layers"] = 1  # loads as half a model if the config were not hashed
        (folder / "config.json").write_text(json.dumps(config))
    elif edit == "weights":
        data = bytearray((folder / "diffusion_pytorch_model.safetensors").read_bytes())
        data[-1] ^= 1
        (folder / "diffusion_pytorch_model.safetensors").write_bytes(bytes(data))
    elif edit == "extra-file":
        (folder / "config.json.bak").write_text("{}")
    else:
        record = json.loads((folder / "aipc_tiny_base.json").read_text())
        record["files"].pop("config.json")
        (folder / "aipc_tiny_base.json").write_text(json.dumps(record))
    told: list[str] = []
    with pytest.raises(_Rebuilt):
        tinyedit.load_tiny_base(tmp_path, log=told.append)
    assert any("does not match its record" in m for m in told)


def test_a_config_that_is_a_link_is_not_trusted(tmp_path, no_training):
    folder = _fake_cache(tmp_path)
    real = tmp_path / "config-elsewhere.json"
    (folder / "config.json").rename(real)
    (folder / "config.json").symlink_to(real)
    assert folder_digests(folder, record="aipc_tiny_base.json") is None
    with pytest.raises(_Rebuilt):
        tinyedit.load_tiny_base(tmp_path, log=lambda _m: None)


@pytest.mark.parametrize("where", ["root", "folder"])
def test_a_cache_path_that_is_a_file_is_refused_before_the_build(tmp_path, no_training, where):
    root = tmp_path / "cache"
    if where == "root":
        root.write_text("not a folder")
    else:
        root.mkdir()
        (root / f"tiny-edit-base-{_key()}").write_text("not a folder")
    with pytest.raises(InputError):
        tinyedit.load_tiny_base(root, log=lambda _m: None)  # refused: _train_base (which raises _Rebuilt) never ran


def test_train_dry_run_finds_a_cache_that_is_a_file(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "builtin").write_text("a file where the built-in model's folder goes")
    result = run_cli("train", "--dry-run", "--json", env={"AIPC_ENV_CACHE_DIR": str(cache)}, cwd=tmp_path)
    assert result.returncode == 2, (result.stdout[-1500:], result.stderr[-1500:])
    doc = json.loads(result.stdout)
    assert "built-in model's cache" in doc["message"] and "Traceback" not in result.stderr
    (cache / "builtin").unlink()
    ok = run_cli("train", "--dry-run", "--json", env={"AIPC_ENV_CACHE_DIR": str(cache)}, cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr[-1500:]
