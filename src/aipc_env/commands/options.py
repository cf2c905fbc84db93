"""Options shared by several commands, declared once as argparse parent parsers, and the one way commands print:
a rich console for people, versioned JSON (`--json`) for machines."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, TypeAlias

if TYPE_CHECKING:
    from rich.console import Console

__all__ = [
    "DEVICE",
    "ENV",
    "INDEXES",
    "JSON",
    "LOCK_ROOT",
    "MATRIX",
    "PAIR",
    "PLATFORM",
    "Subparsers",
    "add_env_option",
    "add_find_links",
    "console_for",
    "device_of",
    "lock_root",
    "platform_of",
    "python_minor",
]


Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
"""What each command module's add_parser adds its parser to."""


def _parent() -> argparse.ArgumentParser:
    return argparse.ArgumentParser(add_help=False)


def _json() -> argparse.ArgumentParser:
    p = _parent()
    p.add_argument("--json", action="store_true", help="print the result as versioned JSON (schemas in docs/schemas/)")
    p.add_argument(
        "-q", "--quiet", action="store_true", help="no progress messages (the result, warnings and errors still print)"
    )
    return p


def _matrix() -> argparse.ArgumentParser:
    p = _parent()
    p.add_argument("--matrix", type=Path, metavar="FILE", help="compatibility matrix to use (default: environments/matrix.yaml)")
    return p


def _env() -> argparse.ArgumentParser:
    p = _parent()
    p.add_argument(
        "--env",
        type=Path,
        metavar="PREFIX",
        help="training env to use (default: the one `aipc-env env` built, else the one the last run "
        "used, else the active conda env, else this interpreter)",
    )
    return p


def _pair() -> argparse.ArgumentParser:
    p = _parent()
    p.add_argument(
        "--pair",
        metavar="ID",
        help="torch+xpu / oneAPI pair of environments/matrix.yaml, e.g. xpu-2.13 "
        "(default, by the pair policy: the env's pair from its packages or its record; where a pair is "
        "needed anyway, the installed oneAPI toolkit's, else the newest)",
    )
    return p


def _device() -> argparse.ArgumentParser:
    p = _parent()
    p.add_argument(
        "--device", default="auto", metavar="DEV", help="xpu:0, cuda:0, cpu or auto (default auto: XPU, then CUDA, then CPU)"
    )
    return p


def _platform() -> argparse.ArgumentParser:
    p = _parent()
    p.add_argument("--platform", choices=["win-64", "linux-64"], default=None, help="target platform (default: this machine's)")
    return p


def _lock_root() -> argparse.ArgumentParser:
    p = _parent()
    p.add_argument("--lock-root", type=Path, metavar="DIR", help="lockfiles folder (default: lockfiles/ of the checkout)")
    return p


def lock_root(args: argparse.Namespace) -> Path:
    """--lock-root (made absolute: uv and the installers run in other folders), else the data home's lockfiles/."""
    from aipc_env.paths import lockfiles_dir

    given = getattr(args, "lock_root", None)
    return given.absolute() if given else lockfiles_dir()


def device_of(args: argparse.Namespace) -> str | None:
    """--device as a device name, None for auto."""
    return None if args.device in (None, "auto") else args.device


def platform_of(args: argparse.Namespace) -> str:
    """--platform, else this machine's."""
    from aipc_env.core.platforms import current_platform

    return args.platform or current_platform()


def add_env_option(
    p: argparse.ArgumentParser | argparse._ArgumentGroup,
    flag: str,
    *,
    env: str,
    help: str,
    metavar: str,
    type: Callable[[str], Any] = str,
) -> None:
    """An option whose default comes from an environment variable (the flag wins), declared once: the variable
    is named in the help and read here only, and an empty one counts as unset."""
    value = os.environ.get(env) or None
    p.add_argument(flag, type=type, default=type(value) if value else None, metavar=metavar, help=f"{help} [env {env}]")


def _indexes() -> argparse.ArgumentParser:
    p = _parent()
    add_env_option(p, "--pypi-url", env="AIPC_ENV_PYPI_URL", metavar="URL", help="PyPI (or a mirror) simple index URL")
    add_env_option(
        p,
        "--xpu-index-url",
        env="AIPC_ENV_XPU_INDEX_URL",
        metavar="URL",
        help="PyTorch XPU index URL, used only for torch/torchvision/Triton",
    )
    p.add_argument("--pip-layer", type=Path, metavar="FILE", help="common pip requirements (default: environments/pip-layer.txt)")
    return p


def add_find_links(p: argparse.ArgumentParser) -> None:
    """--find-links DIR (repeatable): local folders of a lock's wheels (container build, fleet bundle)."""
    p.add_argument(
        "--find-links",
        type=Path,
        action="append",
        default=[],
        metavar="DIR",
        help="folders holding the lock's wheels (searched before their URLs)",
    )


JSON = _json()
MATRIX = _matrix()
ENV = _env()
PAIR = _pair()
DEVICE = _device()
PLATFORM = _platform()
LOCK_ROOT = _lock_root()
INDEXES = _indexes()


def console_for(stream: TextIO | None = None) -> Console:
    """The one console for people (core.terminal.console): styled on a terminal, every value escaped."""
    from aipc_env.core.terminal import console

    return console(stream)


def python_minor(value: str) -> str:
    """argparse type of every --python option: a bad value is a usage error (exit 2) naming the option."""
    from aipc_env.core.specs import check_python_minor

    try:
        return check_python_minor(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def seed(value: str) -> int:
    """argparse type of every --seed option: an integer from 0 to SEED_MAX, else a usage error (exit 2)."""
    from aipc_env.core.formats import SEED_MAX

    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not an integer") from None
    if not 0 <= number <= SEED_MAX:
        raise argparse.ArgumentTypeError(f"{value} is out of range: a seed is 0 to {SEED_MAX}")
    return number


def _output(value: str, folder: bool) -> Path:
    from aipc_env.core.fileio import check_writable
    from aipc_env.errors import InputError

    try:
        return check_writable(Path(value), "the output", folder=folder)
    except InputError as exc:
        raise argparse.ArgumentTypeError(exc.message + (f" (fix: {exc.fix})" if exc.fix else "")) from None


def output_file(value: str) -> Path:
    """argparse type of a file an option names for writing: checked writable when the command line is parsed,
    before any work (exit 2 naming the option)."""
    return _output(value, folder=False)


def output_folder(value: str) -> Path:
    """argparse type of a folder an option names for writing (see output_file)."""
    return _output(value, folder=True)
