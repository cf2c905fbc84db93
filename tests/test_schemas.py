"""Committed JSON Schemas match the models (regenerate with `python -m aipc_env.schemas`)."""

import json

from aipc_env.schemas import schemas
from tests.conftest import ROOT


def test_committed_schemas_match_the_models():
    folder = ROOT / "docs" / "schemas"
    current = schemas()
    assert sorted(p.name for p in folder.glob("*.schema.json")) == sorted(f"{n}.schema.json" for n in current)
    for name, schema in current.items():
        committed = json.loads((folder / f"{name}.schema.json").read_text())
        assert committed == json.loads(json.dumps(schema)), f"{name}: run `python -m aipc_env.schemas`"
