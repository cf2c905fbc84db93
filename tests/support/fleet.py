"""A pair lock for fleet tests: the pair's torch, Triton and Intel runtime as small stand-in wheels on local
indexes (the PyTorch XPU index cannot be reached here), and aipc-env's own dependencies from the real package
index, so a bundle of it bootstraps a working aipc-env offline."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.support.wheels import make_wheel, write_simple_index


def _tool_deps() -> list[str]:
    """aipc-env's own dependencies, read from pyproject.toml (what its wheel will ask for), not a copy."""
    import tomllib

    root = Path(__file__).resolve().parents[2]
    return list(tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"])


TOOL_DEPS = _tool_deps()


def stand_in_lock(base: Path, pair, python: str = "3.11") -> Path:
    """lockdir/pylock.linux-64.toml for `pair`, resolved by uv with explicit routing per index."""
    from aipc_env.lock.tools import find_uv

    runtime = [f"{p.name}=={p.version}" + (f"; {p.marker}" if p.marker else "") for p in pair.runtime_pins]
    local = [make_wheel(base / "w", p.name, p.version) for p in pair.runtime_pins]
    local.append(make_wheel(base / "w", "bitsandbytes", "0.50.2"))
    xpu = [
        make_wheel(base / "x", "torch", f"{pair.newest_torch}+xpu", requires=runtime, payload="XPU"),
        make_wheel(base / "x", pair.triton.name, pair.triton.version),
    ]
    local_index = write_simple_index(local, base / "local").as_uri()
    xpu_index = write_simple_index(xpu, base / "xpu").as_uri()
    deps = runtime + [
        f"torch=={pair.newest_torch}+xpu",
        f"{pair.triton.name}=={pair.triton.version}",
        f"bitsandbytes>={pair.bitsandbytes_min}",
        *TOOL_DEPS,
    ]
    routed = sorted({p.name for p in pair.runtime_pins} | {"bitsandbytes"})
    sources = "\n".join(f'{n} = {{ index = "local" }}' for n in routed)
    sources += f'\ntorch = {{ index = "xpu" }}\n{pair.triton.name} = {{ index = "xpu" }}\n'
    (base / "pyproject.toml").write_text(
        f'[project]\nname = "fleet-test"\nversion = "0"\nrequires-python = ">={python}"\n'
        f"dependencies = {json.dumps(deps)}\n\n"
        f'[[tool.uv.index]]\nname = "xpu"\nurl = "{xpu_index}"\nexplicit = true\n\n'
        f'[[tool.uv.index]]\nname = "local"\nurl = "{local_index}"\nexplicit = true\n\n'
        f"[tool.uv.sources]\n{sources}"
    )
    out = base / "lockdir" / "pylock.linux-64.toml"
    out.parent.mkdir(exist_ok=True)
    subprocess.run(
        [
            find_uv(),
            "pip",
            "compile",
            "pyproject.toml",
            "--format",
            "pylock.toml",
            "-o",
            str(out),
            "--python-version",
            python,
            "--python-platform",
            "x86_64-unknown-linux-gnu",
            "--no-header",
            "--quiet",
        ],
        check=True,
        cwd=base,
        timeout=600,
    )
    return out
