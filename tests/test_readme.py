"""The README's Linux main command, run verbatim with the distro's Python (PEP 668 in force) in a clean HOME,
from a clean copy of this checkout: it must leave a LoRA, and install no CUDA build of torch."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT, require_tool
from tests.support.isolation import isolated_env

SKIP_DIRS = {".git", ".nox", ".ci-venv", "__pycache__", ".pytest_cache", "build", "dist", ".venv"}


def readme_commands() -> dict[str, str]:
    """{"train": ..., "tests": ...} from the Linux block of the README's "Two commands" section."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Two commands that work on a fresh machine", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.DOTALL)
    assert block, "the README lost its Linux command block"
    commands = {}
    for line in block.group(1).splitlines():
        command = line.split("#", 1)[0].strip()
        if command:
            commands[command.split()[-1]] = command
    return commands


def test_readme_names_one_main_command_and_one_test_command_per_os():
    commands = readme_commands()
    assert set(commands) == {"train", "tests"}
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    windows = re.search(r"```powershell\n(.*?)```", text, re.DOTALL).group(1)
    assert "&&" not in windows  # Windows PowerShell 5.1 has no &&
    assert sum(1 for line in windows.splitlines() if line.strip() and not line.startswith("#")) == 2


def _copy_checkout(dst: Path) -> None:
    for path in ROOT.rglob("*"):
        rel = path.relative_to(ROOT)
        if any(part in SKIP_DIRS or part.endswith(".egg-info") for part in rel.parts) or not path.is_file():
            continue
        target = dst / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)


@pytest.mark.slow
def test_readme_main_command_verbatim_on_the_distro_python(tmp_path, warm_caches):
    require_tool(None if Path("/usr/bin/pipx").is_file() else "the distro's pipx is missing (apt-get install pipx)")
    externally_managed = list(Path("/usr/lib").glob("python3*/EXTERNALLY-MANAGED"))
    require_tool(None if externally_managed else "the distro Python here is not PEP 668 externally managed")
    refused = subprocess.run(["/usr/bin/python3", "-m", "pip", "install", "--dry-run", "nox"], capture_output=True, text=True)
    assert refused.returncode != 0 and "externally-managed-environment" in refused.stderr + refused.stdout
    repo, home = tmp_path / "checkout", tmp_path / "home"
    _copy_checkout(repo)
    env = isolated_env(tmp_path, clean_home=True, PATH="/usr/bin:/bin", **warm_caches)  # HOME: tmp_path/home
    command = readme_commands()["train"]
    result = subprocess.run(["bash", "-c", command], cwd=repo, env=env, capture_output=True, text=True, timeout=1500)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    last = [line for line in result.stdout.splitlines() if line.strip()][-1]
    assert last.startswith("aipc-env: LoRA "), last
    lora = Path(last.removeprefix("aipc-env: LoRA "))
    assert lora.is_file() and home in lora.parents
    assert ": the LoRA learned the edit" in result.stdout, output[-4000:]  # judged on held-out samples
    assert "torch==2.13.0+cpu" in output or "torch==2.13.0+xpu" in output
    assert not re.search(r"^\s*\+ nvidia-", output, re.MULTILINE), "a CUDA package was installed"


def readme_install_line() -> str:
    """The Linux line of the README's "Installing the `aipc-env` command" section."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Installing the `aipc-env` command", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.DOTALL)
    assert block, "the README lost its install line"
    (line,) = [ln.split("#", 1)[0].strip() for ln in block.group(1).splitlines() if ln.split("#", 1)[0].strip()]
    return line


@pytest.mark.slow
def test_readme_install_line_gives_a_cli_whose_smoke_starts(tmp_path, upstream_pristine, warm_caches):
    """`pipx install .` verbatim on the distro Python in a clean HOME: the `aipc-env` it puts on PATH has uv with it,
    so `adapt CLONE --smoke` gets past adapting and starts building the qflux env with uv (stopped there: the
    full env is 2 GB; test_qflux runs the smoke itself)."""
    require_tool(None if Path("/usr/bin/pipx").is_file() else "the distro's pipx is missing (apt-get install pipx)")
    repo, home = tmp_path / "checkout", tmp_path / "home"
    _copy_checkout(repo)
    env = isolated_env(tmp_path, clean_home=True, PATH="/usr/bin:/bin", **warm_caches)  # HOME: tmp_path/home
    install = subprocess.run(
        ["bash", "-c", readme_install_line()], cwd=repo, env=env, capture_output=True, text=True, timeout=900
    )
    assert install.returncode == 0, (install.stdout + install.stderr)[-4000:]
    cli = home / ".local" / "bin" / "aipc-env"
    assert cli.is_file(), install.stdout
    clone = tmp_path / "qflux clone"
    shutil.copytree(upstream_pristine, clone)
    proc = subprocess.Popen(
        [str(cli), "adapt", str(clone), "--smoke"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    seen = []
    try:
        for line in proc.stdout:  # type: ignore[union-attr]
            seen.append(line)
            if "installing" in line and "requirements with uv" in line:
                break
    finally:
        proc.kill()
        proc.wait(timeout=60)
    text = "".join(seen)
    assert "requirements with uv" in text, text[-4000:]
    assert "uv is not installed" not in text
