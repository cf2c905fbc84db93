"""Render a LaunchPlan into a run folder: launch.json (read by the runner), an env file, the plan's extra files
(e.g. accelerate_config.yaml), and the launcher itself, from the real templates in `launchers/`.

The scripts contain no user data. Every path and value travels in data files:
- Windows: `launch.env` lines `NAME=value`, read by `for /f` with delayed expansion off, so `& | ^ % ! ( )`
  and non-ASCII are never parsed as code; activation scripts are entered with `pushd "<folder>"` and called
  by their fixed names; the interpreter is run by its quoted path (no `call`, which would re-expand `%`).
- POSIX: `launch.env.sh` of `export NAME='value'` lines quoted with shlex.
"""

from __future__ import annotations

import json
import shlex
from importlib import resources
from pathlib import Path

from aipc_env import __version__
from aipc_env.core.fileio import atomic_write_text
from aipc_env.core.templating import render_marked
from aipc_env.launch.plan import LaunchPlan

__all__ = ["TEMPLATES", "render_env_bat", "render_env_sh", "render_launcher", "template_text", "write_launcher"]

TEMPLATES = {"win-64": "launch.bat", "linux-64": "launch.sh"}


def template_text(name: str) -> str:
    """A launcher template as shipped (launchers/ in a checkout, aipc_env/launchers in a wheel)."""
    return resources.files("aipc_env.launchers").joinpath(name).read_text(encoding="utf-8")


def _env_for_script(plan: LaunchPlan) -> dict[str, str | None]:
    env: dict[str, str | None] = {"AIPC_PYTHON": plan.python}
    if plan.oneapi:
        env.update(AIPC_ONEAPI_DIR=plan.oneapi.folder, AIPC_ONEAPI_SCRIPT=plan.oneapi.name)
    if plan.vcvars:
        env["AIPC_VCVARS_DIR"] = plan.vcvars.folder
    # PYTHONPATH etc. must be in place for the runner itself; the rest is applied by the runner too.
    env.update(plan.env)
    return env


def render_env_bat(plan: LaunchPlan) -> str:
    lines = ["# read by launch.bat: NAME=value, one per line; an empty value unsets the variable"]
    for key, value in _env_for_script(plan).items():
        lines.append(f"{key}={value or ''}")
    return "\r\n".join(lines) + "\r\n"


def render_env_sh(plan: LaunchPlan) -> str:
    lines = ["# sourced by launch.sh"]
    for key, value in _env_for_script(plan).items():
        lines.append(f"unset {key}" if value is None else f"export {key}={shlex.quote(value)}")
    return "\n".join(lines) + "\n"


def render_launcher(plan: LaunchPlan) -> tuple[str, str]:
    """(file name, text) of the plan's launcher: its platform's template with the version filled in; batch
    files get CRLF line endings."""
    name = TEMPLATES[plan.platform]
    text = render_marked(template_text(name), name, {"env_version": __version__})
    lines = text.replace("\r\n", "\n").split("\n")
    return name, ("\r\n" if name.endswith(".bat") else "\n").join(lines)


def write_launcher(plan: LaunchPlan) -> Path:
    """Write launch.json, the env file, the plan's files and the launcher into plan.run_dir (each atomically);
    return the launcher."""
    run_dir = Path(plan.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(run_dir / "launch.json", json.dumps(plan.model_dump(mode="json"), indent=2, ensure_ascii=False) + "\n")
    for name, content in plan.files.items():
        atomic_write_text(run_dir / name, content)
    name, text = render_launcher(plan)
    script = run_dir / name
    if plan.platform == "win-64":
        # cmd reads the env file in the console code page; UTF-8 (with `chcp 65001` in effect) keeps non-ASCII
        # paths intact, and Python reads launch.json itself.
        atomic_write_text(run_dir / "launch.env", render_env_bat(plan))
        atomic_write_text(script, text, newline="\n", mode=0o644)
    else:
        atomic_write_text(run_dir / "launch.env.sh", render_env_sh(plan), mode=0o644)
        atomic_write_text(script, text, mode=0o755)
    return script
