"""Options shared by several commands, declared once as argparse parent parsers, and the one way commands print:
a rich console for people, versioned JSON (`--json`) for machines."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TextIO

from pydantic import BaseModel

__all__ = ["JSON", "MATRIX", "ENV", "PAIR", "INDEXES", "LOCK_ROOT", "console_for", "print_json", "parents"]


def _parent() -> argparse.ArgumentParser:
    return argparse.ArgumentParser(add_help=False)


def _json() -> argparse.ArgumentParser:
    p = _parent()
    p.add_argument("--json", action="store_true", help="print the result as versioned JSON (schemas in docs/schemas/)")
    return p


def _matrix() -> argparse.ArgumentParser:
    p = _parent()
    p.add_argument("--matrix", type=Path, metavar="FILE",
                   help="compatibility matrix to use (default: environments/matrix.yaml)")
    return p


def _env() -> argparse.ArgumentParser:
    p = _parent()
    p.add_argument("--env", type=Path, metavar="PREFIX",
                   help="training env to use (default: the one `aipc-env env` built, else the one the last run "
                        "used, else the active conda env, else this interpreter)")
    return p


def _pair() -> argparse.ArgumentParser:
    p = _parent()
    p.add_argument("--pair", metavar="ID", help="torch+xpu / oneAPI pair of environments/matrix.yaml, e.g. xpu-2.13 "
                   "(default: the env's recorded or resolved pair)")
    return p


def _lock_root() -> argparse.ArgumentParser:
    p = _parent()
    p.add_argument("--lock-root", type=Path, metavar="DIR", help="lockfiles folder (default: lockfiles/)")
    return p


def _indexes() -> argparse.ArgumentParser:
    p = _parent()
    p.add_argument("--pypi-url", default=os.environ.get("AIPC_ENV_PYPI_URL"), metavar="URL",
                   help="PyPI (or a mirror) simple index URL [env AIPC_ENV_PYPI_URL]")
    p.add_argument("--xpu-index-url", default=os.environ.get("AIPC_ENV_XPU_INDEX_URL"), metavar="URL",
                   help="PyTorch XPU index URL, used only for torch/torchvision/Triton [env AIPC_ENV_XPU_INDEX_URL]")
    p.add_argument("--pip-layer", type=Path, metavar="FILE",
                   help="common pip requirements (default: environments/pip-layer.txt)")
    return p


JSON = _json()
MATRIX = _matrix()
ENV = _env()
PAIR = _pair()
LOCK_ROOT = _lock_root()
INDEXES = _indexes()


def parents(*names: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    return list(names)


def console_for(stream: TextIO | None = None):
    from rich.console import Console

    return Console(file=stream or sys.stdout, highlight=False, soft_wrap=True, emoji=False)


def print_json(data: BaseModel | dict | list) -> None:
    text = data.model_dump_json(indent=2) if isinstance(data, BaseModel) else json.dumps(data, indent=2,
                                                                                           ensure_ascii=False)
    sys.stdout.write(text + "\n")
    sys.stdout.flush()
