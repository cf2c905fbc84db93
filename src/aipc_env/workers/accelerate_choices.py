"""The values accelerate's own enums allow (DistributedType, PrecisionType, DynamoBackend), read where accelerate
is installed: the training env. `aipc-env adapt` checks the clone's accelerate config against them
(qflux/checker.py) without importing accelerate itself.

They are read from accelerate's own source (accelerate/utils/dataclasses.py, found without importing the package):
each enum's members as the class body spells them, `NAME = "value"`. Importing accelerate imports torch, which took
1.9 of the 2.3 s an `adapt` took; reading the file takes milliseconds. Where the source does not have that plain
shape (a class missing, a member that is not a string literal, a name enum treats specially), accelerate is
imported and its enums are asked, as before."""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import sys
from pathlib import Path

from aipc_env.core.fileio import read_text
from aipc_env.errors import InputError
from aipc_env.qflux.checker import AccelerateChoices

__all__ = ["ENUMS", "accelerate_choices", "choices_from_source", "main"]

ENUMS = {"distributed_type": "DistributedType", "mixed_precision": "PrecisionType", "dynamo_backend": "DynamoBackend"}
"""AccelerateChoices' field -> the accelerate enum whose values it lists (all three in accelerate.utils.dataclasses)."""
SOURCE = ("utils", "dataclasses.py")
MAX_SOURCE_BYTES = 4 * 2**20
"""accelerate 1.x's dataclasses.py is about 130 KB; a file past this is not read (the enums are imported instead)."""


def _members(node: ast.ClassDef) -> list[str] | None:
    """An enum class body's member values in order (aliases once, as iterating an Enum gives them), or None where the
    body is not only plain `NAME = "value"` members, a docstring and methods."""
    values: list[str] = []
    for stmt in node.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Pass)):
            continue
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):  # a docstring
            continue
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
            return None
        if stmt.targets[0].id.startswith("_"):  # _ignore_, _order_, a private name: not a plain member
            return None
        if not (isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)):
            return None
        if stmt.value.value not in values:
            values.append(stmt.value.value)
    return values or None


def choices_from_source(source: str) -> dict[str, list[str]] | None:
    """Each ENUMS field's values as accelerate's source spells them, or None where any of the three enums is not
    found in that plain shape."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    found: dict[str, list[str]] = {}
    for field, name in ENUMS.items():
        values = _members(classes[name]) if name in classes else None
        if values is None:
            return None
        found[field] = values
    return found


def _read_source() -> tuple[str, dict[str, list[str]]] | None:
    """accelerate's version and its enums' values read from its source, without importing it; None where that
    cannot be done (not installed, the file missing, too large or not text, or not of the plain shape)."""
    try:
        spec = importlib.util.find_spec("accelerate")  # a top-level package: located, not imported
        version = importlib.metadata.version("accelerate")
    except (ImportError, ValueError, importlib.metadata.PackageNotFoundError):
        return None
    if spec is None or not spec.origin:
        return None
    try:
        source = read_text(Path(spec.origin).parent.joinpath(*SOURCE), "accelerate's source", max_bytes=MAX_SOURCE_BYTES)
    except InputError:
        return None
    values = choices_from_source(source)
    return (version, values) if values is not None else None


def _imported() -> AccelerateChoices:
    """accelerate's enum values asked of the imported enums, or none (version None) where accelerate does not
    import."""
    try:
        import accelerate
        from accelerate.utils import DistributedType, DynamoBackend, PrecisionType
    except ImportError:
        return AccelerateChoices(version=None, distributed_type=[], mixed_precision=[], dynamo_backend=[])
    return AccelerateChoices(
        version=accelerate.__version__,
        distributed_type=[e.value for e in DistributedType],
        mixed_precision=[e.value for e in PrecisionType],
        dynamo_backend=[e.value for e in DynamoBackend],
    )


def accelerate_choices() -> AccelerateChoices:
    """accelerate's enum values: read from its source, else from its imported enums, else none (version None)
    where accelerate is not there."""
    read = _read_source()
    if read is None:
        return _imported()
    version, values = read
    return AccelerateChoices(version=version, **values)


def main(argv: list[str] | None = None) -> int:
    from aipc_env.core.formats import write_model
    from aipc_env.errors import ExitCode
    from aipc_env.launch.hops import AccelerateProbe, run_worker

    args = AccelerateProbe.parse(argv)

    def body() -> int:
        write_model(args.result, accelerate_choices())
        return ExitCode.OK

    return run_worker("accelerate choices", body, result=args.result)


if __name__ == "__main__":
    sys.exit(main())
