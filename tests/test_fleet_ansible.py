"""The fleet playbook: `ansible-playbook --syntax-check` and `ansible-lint --offline` pass (Windows collections
from the PyPI `ansible` package), every `win_*` task argument exists in `ansible-doc`, and the Linux play runs
for real against localhost into temporary roots — apply, apply again with changed=0, check mode with no changes —
for a 2-host inventory (forks), each host its own root, with no network."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, distro_python_with_venv, require_tool, run_cli
from tests.support.ansible import collections_path
from tests.support.isolation import isolated_env, tool_dirs

pytestmark = pytest.mark.slow
HOSTS = 2  # several hosts in parallel (forks); each more costs ~40 s of the four plays on two cores
# the four plays are a unit of work of their own in the slow tier (tests/conftest.py worker_groups): they run on
# another worker than ansible-lint and the other plays (the playbook fixture is rendered once per worker)
WORKER_GROUPS = {"test_the_linux_play_on_several_hosts_is_idempotent_and_check_mode_writes_nothing": "plays"}


def _bin(name: str) -> str:
    path = shutil.which(name) or str(Path(sys.executable).parent / name)
    require_tool(None if Path(path).exists() else f"{name} is not installed (pip install ansible-core ansible-lint)")
    return path


@pytest.fixture(scope="module")
def playbook(tmp_path_factory, fleet_bundle):
    out = tmp_path_factory.mktemp("playbook") / "fleet ü"
    result = run_cli("fleet", "ansible", "--pair", "xpu-2.13", "--out", str(out))
    assert result.returncode == 0, result.stderr
    shutil.copytree(fleet_bundle, out / "bundle-linux-64")
    collections = collections_path(Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "aipc-env-tests")
    env = isolated_env(
        out.parent,
        ANSIBLE_COLLECTIONS_PATH=str(collections),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_HOST_KEY_CHECKING="False",
        ANSIBLE_LOCAL_TEMP=str(out.parent / "ansible-tmp"),
    )
    return out, env


def test_syntax_check_and_lint(playbook):
    out, env = playbook
    syntax = subprocess.run(
        [_bin("ansible-playbook"), "-i", "inventory.example.yml", "site.yml", "--syntax-check"],
        cwd=out,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert syntax.returncode == 0, syntax.stdout + syntax.stderr
    bundle = out / "bundle-linux-64"
    moved = out.parent / "bundle-aside"
    bundle.rename(moved)  # lint the playbook, not the bundle's files
    try:
        lint = subprocess.run(
            [_bin("ansible-lint"), "--offline", "--nocolor"], cwd=out, env=env, capture_output=True, text=True, timeout=600
        )
    finally:
        moved.rename(bundle)
    assert lint.returncode == 0, lint.stdout[-3000:] + lint.stderr[-3000:]
    assert "production" in lint.stdout + lint.stderr


def test_win_task_arguments_exist_in_ansible_doc(playbook):
    out, env = playbook
    plays = yaml.safe_load((out / "site.yml").read_text())
    docs: dict[str, dict] = {}
    checked = 0
    for play in plays:
        for task in play["tasks"]:
            module = next(k for k in task if "." in k and k.split(".")[0] in ("ansible", "community"))
            if not module.split(".")[-1].startswith("win_"):
                continue
            if module not in docs:
                raw = subprocess.run(
                    [_bin("ansible-doc"), "-t", "module", "-j", module], env=env, capture_output=True, text=True, timeout=120
                )
                assert raw.returncode == 0, raw.stderr
                docs[module] = json.loads(raw.stdout)[module]["doc"]["options"]
            options = docs[module]
            names = {n for name, spec in options.items() for n in [name, *spec.get("aliases", [])]}
            args = task[module] if isinstance(task[module], dict) else {"_raw_params": task[module]}
            for arg, value in args.items():
                if arg == "_raw_params":
                    assert module.endswith(("win_shell", "win_command")), module
                    continue
                assert arg in names, f"{module}: unknown option {arg}"
                choices = options.get(arg, {}).get("choices")
                if choices and isinstance(value, str) and "{{" not in value:
                    assert value in choices, f"{module}: {arg}={value} not in {choices}"
            checked += 1
    assert checked >= 7


def _inventory(out: Path, hosts: int, uv_cache: str) -> Path:
    """Each host its own root, state and cache; uv's cache (downloads and unpacked wheels, nothing of the result)
    is the run's shared one, as a fleet's machines would each have filled their own."""
    lines = ["aipc_linux:", "  hosts:"]
    for i in range(1, hosts + 1):
        root = out.parent / f"host root {i}"
        env = {**tool_dirs(root), "UV_CACHE_DIR": uv_cache, "PATH": "/usr/bin:/bin"}
        lines += [
            f"    aipc-pc-{i:03d}:",
            "      ansible_connection: local",
            f"      ansible_python_interpreter: {sys.executable}",
            f"      aipc_root: {json.dumps(str(root))}",
            f"      aipc_environment: {json.dumps(env)}",
        ]  # the GPU runtime variables stay at their defaults
    path = out / "inventory.test.yml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _play(out: Path, env: dict, inventory: Path, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    require_tool(
        None
        if shutil.which("unshare") and subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode == 0
        else "unshare -n is not available"
    )
    result = subprocess.run(
        ["unshare", "-n", "--", _bin("ansible-playbook"), "-i", str(inventory), "site.yml", "--forks", str(HOSTS), *extra],
        cwd=out,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    recap = {
        m.group(1): {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m.group(2))}
        for m in re.finditer(r"^(aipc-pc-\d+)\s+:\s+(.*)$", result.stdout, re.MULTILINE)
    }
    return result, recap


@pytest.mark.timeout(1500)  # four plays over two hosts on two cores: about 3 minutes here
def test_the_linux_play_on_several_hosts_is_idempotent_and_check_mode_writes_nothing(playbook, warm_caches):
    require_tool(distro_python_with_venv())
    out, env = playbook
    inventory = _inventory(out, HOSTS, warm_caches["UV_CACHE_DIR"])
    preview, recap = _play(out, env, inventory, "--check", "--diff")
    assert preview.returncode == 0, preview.stdout[-3000:]
    assert all(r["changed"] >= 2 for r in recap.values()) and len(recap) == HOSTS  # it predicts the changes ...
    assert not any((out.parent / f"host root {i}").exists() for i in range(1, HOSTS + 1))  # ... and writes nothing
    first, recap = _play(out, env, inventory)
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-2000:]
    assert "NOT INSTALLED: Debian 12 (bookworm)" in first.stdout  # default variables: said, not failed
    assert all(r["failed"] == 0 and r["changed"] >= 3 for r in recap.values()) and len(recap) == HOSTS
    again, recap = _play(out, env, inventory)
    assert again.returncode == 0 and all(r["changed"] == 0 for r in recap.values()), again.stdout[-3000:]
    check, recap = _play(out, env, inventory, "--check", "--diff")
    assert check.returncode == 0 and all(r["changed"] == 0 for r in recap.values()), check.stdout[-3000:]
    for i in range(1, HOSTS + 1):
        report = json.loads((out / "reports" / f"aipc-pc-{i:03d}.json").read_text())
        assert report["facts"]["training_env"]["prefix"] == str(out.parent / f"host root {i}" / "env")
        assert report["facts"]["training_env"]["distributions"]["torch"] == "2.13.0+xpu"
    fleet = run_cli("fleet", "report", str(out / "reports"), "--json")
    assert len(json.loads(fleet.stdout)["machines"]) == HOSTS


def test_doctor_tasks_accept_problems_found_so_the_report_is_always_fetched(playbook):
    """The doctor exits 1 when it finds problems: on both platforms the task fails only on other codes, and the
    aipc-env that runs it is the one the bootstrap kept outside the bundle."""
    import yaml

    out, _ = playbook
    plays = yaml.safe_load((out / "site.yml").read_text(encoding="utf-8"))
    doctor = [t for play in plays for t in play.get("tasks", []) if t["name"].startswith("Run the doctor")]
    assert len(doctor) == 2
    for task in doctor:
        assert task["failed_when"].endswith(".rc not in [0, 1]"), task
        assert task["failed_when"].split(".")[0] == task["register"]
        command = str(task.get("ansible.builtin.command", task.get("ansible.windows.win_shell")))
        assert "bundle/.tool" not in command and "bundle\\.tool" not in command and "tool" in command


def test_the_gpu_runtime_follows_the_distribution_table(playbook, warm_caches):
    """This Debian 12 host cannot provide the runtime: with default variables the play says why and goes on (the
    main play test runs it through); an unknown distribution is refused by name."""
    import yaml

    out, env = playbook
    linux = _ansible_vars(out / "group_vars" / "aipc_linux.yml")
    table = yaml.safe_load((ROOT / "environments" / "gpu-runtime.yaml").read_text(encoding="utf-8"))
    assert linux["aipc_gpu_packages"] == table["packages"] and linux["aipc_gpu_runtime_source"] == ""
    assert set(linux["aipc_gpu_runtime_by_distribution"]) == set(table["distributions"])
    inventory = _inventory(out, 1, warm_caches["UV_CACHE_DIR"])
    said, _ = _play(out, env, inventory, "--tags", "gpu")
    assert said.returncode == 0 and "NOT INSTALLED: Debian 12 (bookworm) cannot provide" in said.stdout, said.stdout
    refused, _ = _play(
        out, env, inventory, "--tags", "gpu", "-e", "ansible_distribution=Fedora", "-e", "ansible_distribution_major_version=41"
    )
    assert refused.returncode == 2 and "does not know where fedora-41 gets the Intel GPU runtime" in refused.stdout


def _ansible_vars(path: Path) -> dict:
    """group_vars as Ansible itself reads them (its YAML loader knows the !unsafe tag; in a child process)."""
    from tests.support.ansible_yaml import ansible_load

    return ansible_load(path.read_text(encoding="utf-8"))


def test_intel_repository_given_when_written(tmp_path, signing_key):

    key, fingerprint = signing_key
    line = "deb [arch=amd64] https://repositories.intel.com/gpu/ubuntu noble unified"
    out = tmp_path / "play"
    wrong = run_cli(
        "fleet",
        "ansible",
        "--pair",
        "xpu-2.13",
        "--out",
        str(out),
        "--gpu-runtime-source",
        line,
        "--gpu-runtime-key",
        str(key),
        "--gpu-runtime-key-fingerprint",
        "0" * 40,
    )
    assert wrong.returncode == 2 and "fingerprint" in wrong.stderr and not out.exists()
    unsafe = run_cli(
        "fleet",
        "ansible",
        "--pair",
        "xpu-2.13",
        "--out",
        str(out),
        "--gpu-runtime-source",
        line.replace("[arch=amd64]", "[trusted=yes]"),
        "--gpu-runtime-key",
        str(key),
        "--gpu-runtime-key-fingerprint",
        fingerprint,
    )
    assert unsafe.returncode == 2 and not out.exists()
    ok = run_cli(
        "fleet",
        "ansible",
        "--pair",
        "xpu-2.13",
        "--out",
        str(out),
        "--gpu-runtime-source",
        line,
        "--gpu-runtime-key",
        str(key),
        "--gpu-runtime-key-fingerprint",
        fingerprint,
    )
    assert ok.returncode == 0, ok.stderr
    linux = _ansible_vars(out / "group_vars" / "aipc_linux.yml")
    assert linux["aipc_gpu_runtime_source"] == (
        "deb [signed-by=/usr/share/keyrings/aipc-gpu-keyring.asc arch=amd64] "
        "https://repositories.intel.com/gpu/ubuntu noble unified"
    )
    assert (out / "files" / linux["aipc_gpu_runtime_key"]).read_bytes() == key.read_bytes()
