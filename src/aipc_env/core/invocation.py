"""How to spell an aipc-env command for the person reading a fix: THE one rule. Standard library only.

Run by nox (the README's path: `pipx run --spec "nox[uv]" nox -s doctor`, or `nox -s doctor` where nox is
installed), a fix names the nox session the person can type in that same checkout; run as `aipc-env` (an installed
tool, a fleet bundle, a container, a folder with no noxfile), it names `aipc-env COMMAND`. A command without a
nox session is always `aipc-env COMMAND`."""

from __future__ import annotations

import os
import shutil

__all__ = ["DEFAULT_MODEL_REPO", "NOX_SESSIONS", "QFLUX_MODEL_REPO", "command", "download_model"]

NOX_SESSIONS = frozenset(
    {"doctor", "recommend", "resolve", "lock", "env", "patch-requirements", "verify", "train", "adapt", "distill"}
)
"""The noxfile's sessions that run `aipc-env <the same name>` (tests/test_invocation.py reads the noxfile)."""


def _nox() -> str:
    """`nox` where it is on PATH, else the README's `pipx run` of it (py -m pipx on Windows)."""
    if shutil.which("nox"):
        return "nox"
    return ("py -m pipx" if os.name == "nt" else "pipx") + ' run --spec "nox[uv]" nox'


def command(name: str, *args: str) -> str:
    """`nox -s NAME -- ARGS` under a nox session, else `aipc-env NAME ARGS` (see the module docstring)."""
    if os.environ.get("NOX_CURRENT_SESSION") and name in NOX_SESSIONS:
        return f"{_nox()} -s {name}" + (f" -- {' '.join(args)}" if args else "")
    return f"aipc-env {name}" + (f" {' '.join(args)}" if args else "")


DEFAULT_MODEL_REPO = "Qwen/Qwen-Image-Edit-2511"
"""The model the built-in engine trains by default (recommend's config, the doctor's model check)."""
QFLUX_MODEL_REPO = "Qwen/Qwen-Image-Edit-2509"
"""The newest model the qflux engine trains as itself (not 2511: train/recommend.py says why)."""


def download_model(folder: str, repo: str = DEFAULT_MODEL_REPO) -> str:
    """The command that puts a Hugging Face model repo into `folder` (it resumes an interrupted download)."""
    quoted = f'"{folder}"' if any(c in folder for c in " &()%!") else folder
    return f"huggingface-cli download {repo} --local-dir {quoted}"
