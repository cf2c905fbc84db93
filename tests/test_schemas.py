"""Committed JSON Schemas match the models (regenerate with `python scripts/gen_schemas.py`)."""

import json
import subprocess
import sys

from tests.conftest import ROOT
from tests.support.scripts import load_script

schemas = load_script("gen_schemas").schemas
models = load_script("gen_schemas").models


def test_committed_schemas_match_the_models():
    folder = ROOT / "docs" / "schemas"
    current = schemas()
    assert sorted(p.name for p in folder.glob("*.schema.json")) == sorted(f"{n}.schema.json" for n in current)
    for name, schema in current.items():
        committed = json.loads((folder / f"{name}.schema.json").read_text())
        assert committed == json.loads(json.dumps(schema)), f"{name}: run `python scripts/gen_schemas.py`"


def test_every_versioned_format_has_a_schema():
    import importlib
    import pkgutil

    import aipc_env
    from aipc_env.core.formats import VersionedModel

    for info in pkgutil.walk_packages(aipc_env.__path__, "aipc_env."):
        if info.name.endswith(("verify.worker", "__main__", "launch.runner")):
            continue  # the worker imports torch at module level; the runner is standard library only
        importlib.import_module(info.name)

    def subclasses(cls):
        for sub in cls.__subclasses__():
            yield sub
            yield from subclasses(sub)

    listed = set(models().values())
    missing = [
        c.__qualname__
        for c in subclasses(VersionedModel)
        if c.__module__.startswith("aipc_env") and c.__module__ != "aipc_env.core.formats" and c not in listed
    ]  # formats holds the base classes
    assert not missing, f"add to scripts/gen_schemas.py models(): {missing}"


def test_an_unknown_version_is_a_named_error(tmp_path):
    import pytest

    from aipc_env.core.formats import load_versioned
    from aipc_env.errors import InputError

    for name, model in models().items():
        path = tmp_path / f"{name}.json"
        path.write_text('{"schema_version": 99}')
        with pytest.raises(InputError, match=r"schema_version 99 is not supported.*newer aipc-env"):
            load_versioned(model, path)
        path.write_text('{"no_version": 1}')
        with pytest.raises(InputError, match="missing 'schema_version'"):
            load_versioned(model, path)


def test_the_tool_writes_what_is_committed(tmp_path):
    """The maintainer's command itself, run as documented, writes the committed files byte for byte."""
    import os

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_schemas.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written == sorted(p.name for p in (ROOT / "docs" / "schemas").glob("*.schema.json"))
    for name in written:
        assert (tmp_path / name).read_bytes() == (ROOT / "docs" / "schemas" / name).read_bytes(), name
