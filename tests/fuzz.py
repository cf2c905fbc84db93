"""Shared pieces of the property-based fuzz tests (tests/test_fuzz_*.py): the settings profile, hostile text, JSON
documents drawn from a committed JSON Schema (docs/schemas/, written from the pydantic models), and the property
every reader holds: a result or a named error.

The fast tier runs each property on a few dozen derandomized examples (the same ones every run, so CI is stable);
`nox -s fuzz` sets AIPC_FUZZ_EXAMPLES high and random, with the example database committed under tests/fuzz-db
keeping what it found (a failing example found once is replayed first by every later run)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.database import DirectoryBasedExampleDatabase

from aipc_env.errors import AipcError

DB = Path(__file__).parent / "fuzz-db"
LONG = bool(os.environ.get("AIPC_FUZZ_EXAMPLES"))
EXAMPLES = int(os.environ.get("AIPC_FUZZ_EXAMPLES") or 30)

FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=not LONG,
    database=DirectoryBasedExampleDatabase(str(DB)) if LONG else None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
    print_blob=True,
)
"""The fast tier: derandomized, a few dozen examples; `nox -s fuzz`: AIPC_FUZZ_EXAMPLES random examples and the
committed database."""

HOSTILE_TEXT = st.sampled_from(
    [
        "",
        "9" * 5000,
        "1." + "0" * 25,
        "{{ lookup('pipe', 'id') }}",
        "\x1b[31m",
        "\udcff",
        "\ud800",
        "..",
        "../../etc/passwd",
        "C:\\Windows",
        "a\x00b",
        "x\ny: 1",
        "null",
        "yes",
        "1e400",
        "NaN",
        "-1",
        "\u202e",
        "🙂",
        "x" * 70_000,
        "python_version ~= '1'",
        "'cpu' in extras",
    ]
)
TEXT = st.one_of(HOSTILE_TEXT, st.text(max_size=40))
"""Text a hostile file may hold: the known classes, and anything hypothesis makes."""

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=10**30, max_value=10**40),
    st.floats(allow_nan=True, allow_infinity=True),
    TEXT,
)
ANY_JSON = st.recursive(
    SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(TEXT, inner, max_size=4)), max_leaves=12
)


def from_schema(schema: dict[str, Any], root: dict[str, Any] | None = None, depth: int = 0) -> st.SearchStrategy[Any]:
    """Documents shaped by a JSON Schema as pydantic writes it (objects with properties and required keys, arrays,
    $ref into $defs, anyOf, enums and consts, scalar types), each value either of its declared type or, now and then,
    anything at all: a shape close enough to pass the first checks, hostile enough to reach the deep ones.
    (hypothesis-jsonschema's own from_schema does not run on this hypothesis release.)"""
    root = root or schema
    if depth > 6:
        return SCALARS
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return st.deferred(lambda: from_schema(root.get("$defs", {}).get(name, {}), root, depth + 1))
    if "const" in schema:
        return st.one_of(st.just(schema["const"]), SCALARS) if depth else st.just(schema["const"])
    if "enum" in schema:
        return st.one_of(st.sampled_from(schema["enum"]), SCALARS)
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            return st.one_of([from_schema(s, root, depth + 1) for s in schema[key]])
    kind = schema.get("type")
    if isinstance(kind, list):
        return st.one_of([from_schema({**schema, "type": k}, root, depth) for k in kind])
    if kind == "object" or "properties" in schema:
        props = schema.get("properties", {})
        required = [k for k in schema.get("required", []) if k in props]
        optional = [k for k in props if k not in required]
        fixed = st.fixed_dictionaries(
            {k: from_schema(props[k], root, depth + 1) for k in required},
            optional={k: from_schema(props[k], root, depth + 1) for k in optional},
        )
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            more = st.dictionaries(TEXT, from_schema(extra, root, depth + 1), max_size=3)
            return st.builds(lambda a, b: {**b, **a}, fixed, more)
        return fixed
    if kind == "array":
        items = schema.get("items", {})
        return st.lists(from_schema(items, root, depth + 1) if items else SCALARS, max_size=3)
    typed: dict[str, st.SearchStrategy[Any]] = {
        "string": TEXT,
        "integer": st.one_of(st.integers(min_value=-5, max_value=10**6), st.integers()),
        "number": st.floats(allow_nan=True, allow_infinity=True),
        "boolean": st.booleans(),
        "null": st.none(),
    }
    value = typed.get(str(kind), SCALARS)
    return st.one_of(value, value, value, SCALARS)  # mostly the declared type


def result_or_named_error(call: Any, *args: Any, **kwargs: Any) -> Any:
    """The property of every reader: it returns, or raises the tool's named error (AipcError: a message, and where
    it came from when it came from a file). Anything else (a KeyError, a RecursionError, pydantic's own error, a
    third-party parser's exception) escapes and fails the test."""
    try:
        return call(*args, **kwargs)
    except AipcError as exc:
        assert exc.message and exc.exit_code in (1, 2), (exc.exit_code, exc.message)
        return exc
