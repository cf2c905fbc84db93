"""Locking inputs, derived from the matrix row and environments/ (pure)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from packaging.requirements import InvalidRequirement

from aipc_env.core.specs import parse_requirement
from aipc_env.errors import InputError
from aipc_env.matrix import Pair
from aipc_env.paths import environments_dir

__all__ = [
    "DEFAULT_PYTHON",
    "EXPLICIT_XPU_NAMES",
    "PYPI_URL",
    "XPU_INDEX_URL",
    "common_requirements",
    "conda_environment",
    "pair_python",
    "pip_layer",
    "row_hash",
    "uv_project",
]

from aipc_env.core.platforms import CPYTHON_MINORS, DEFAULT_PYTHON

PYPI_URL = "https://pypi.org/simple"
XPU_INDEX_URL = "https://download.pytorch.org/whl/xpu"
EXPLICIT_XPU_NAMES = ("torch", "torchvision", "pytorch-triton-xpu", "triton-xpu")
"""Served only by the PyTorch XPU index; every other name comes only from PyPI."""


def pair_python(pair: Pair, preferred: str = DEFAULT_PYTHON) -> str:
    """The pair's Python: 3.12 when the pair supports it, else the newest minor version it allows."""
    spec = pair.python_specifier
    if f"{preferred}.0" in spec:
        return preferred
    for minor in reversed(CPYTHON_MINORS):
        if f"{minor}.0" in spec:
            return minor
    raise InputError(f"no Python {CPYTHON_MINORS[0]}-{CPYTHON_MINORS[-1]} satisfies {pair.python}", key=f"{pair.id}.python")


def common_requirements(path: Path | None = None) -> list[str]:
    path = path or environments_dir() / "pip-layer.txt"
    reqs = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            parse_requirement(line)
        except InvalidRequirement as exc:
            raise InputError(f"line {n}: {exc}", path=path) from None
        reqs.append(line)
    return reqs


def pip_layer(pair: Pair, common: list[str] | None = None) -> list[str]:
    """torch==<newest>+xpu, the pair's Triton (with its marker), bitsandbytes>=<pair min>, then the common layer."""
    reqs = [f"torch=={pair.newest_torch}+xpu"]
    triton = f"{pair.triton.name}=={pair.triton.version}"
    reqs.append(triton + (f"; {pair.triton.marker}" if pair.triton.marker else ""))
    reqs.append(f"bitsandbytes>={pair.bitsandbytes_min}")
    reqs += [
        r
        for r in (common if common is not None else common_requirements())
        if parse_requirement(r).name not in ("torch", "bitsandbytes")
    ]
    return reqs


def conda_environment(pair: Pair, python: str | None = None) -> str:
    text = (environments_dir() / "conda-layer.yaml").read_text(encoding="utf-8")
    return text.replace("{python}", python or pair_python(pair))


def uv_project(requirements: list[str], *, pypi_url: str, xpu_index_url: str, python: str) -> str:
    """A pyproject.toml that uv resolves: the XPU index is explicit and serves only EXPLICIT_XPU_NAMES."""
    present = {parse_requirement(r).name for r in requirements}
    sources = "\n".join(f'{n} = {{ index = "pytorch-xpu" }}' for n in EXPLICIT_XPU_NAMES if n in present)
    deps = ",\n".join(f"    {json.dumps(r)}" for r in requirements)
    return (
        f'[project]\nname = "aipc-training-env"\nversion = "0"\nrequires-python = ">={python}"\n'
        f"dependencies = [\n{deps},\n]\n\n"
        f'[[tool.uv.index]]\nname = "pytorch-xpu"\nurl = {json.dumps(xpu_index_url)}\nexplicit = true\n\n'
        f'[[tool.uv.index]]\nname = "pypi"\nurl = {json.dumps(pypi_url)}\ndefault = true\n\n'
        f"[tool.uv.sources]\n{sources}\n"
    )


def row_hash(pair: Pair) -> str:
    """Hash of the matrix row a lock came from (staleness check). Its known issues are left out: they change what
    the tools warn about, not what a lock is made from."""
    data = json.dumps(pair.model_dump(mode="json", exclude={"known_issues"}), sort_keys=True).encode()
    return "sha256:" + hashlib.sha256(data).hexdigest()
