"""`container run` opens the GPU the way the host grants it: the numeric group of each render and card node (read
from real device nodes made with mknod in a /dev-like folder), never root silently, --ipc=host on request, and the
rlimits podman cannot raise here. The command is checked with --dry-run (the engine is found, nothing runs)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
from pathlib import Path

import pytest

from tests.conftest import require_tool, run_cli


@pytest.fixture
def engine():
    require_tool(None if shutil.which("podman") or shutil.which("docker") else "no podman or docker (apt install podman)")


def _dev_root(tmp_path: Path, nodes: dict[str, tuple[int, int]]) -> Path:
    """A /dev-like folder with real character devices: name -> (gid, mode)."""
    require_tool(None if os.geteuid() == 0 else "mknod of a character device needs root")
    dri = tmp_path / "dev" / "dri"
    dri.mkdir(parents=True)
    for minor, (name, (gid, mode)) in enumerate(nodes.items(), start=128):
        path = dri / name
        os.mknod(path, 0o600 | 0o020000, os.makedev(226, minor))  # S_IFCHR
        os.chown(path, 0, gid)
        os.chmod(path, mode)
    return tmp_path / "dev"


def _command(result) -> list[str]:
    line = next(ln for ln in result.stderr.splitlines() if ln.startswith("aipc-env: ") and " run --rm " in ln)
    return shlex.split(line.removeprefix("aipc-env: "))


def _groups(argv: list[str]) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == "--group-add"]


def _run(*extra: str, output: Path | None = None):
    args = ["container", "run", "--image", "localhost/x:y", "--dry-run", *extra]
    if output is not None:
        args += ["--output", str(output), "--allow-root"]
    return run_cli(*args, "--", "doctor")


def test_the_hosts_numeric_group_of_each_node_is_added(engine, tmp_path):
    dev = _dev_root(tmp_path, {"renderD128": (4242, 0o660), "card0": (4343, 0o660)})
    result = _run("--dev-root", str(dev))
    assert result.returncode == 0, result.stderr
    argv = _command(result)
    assert sorted(_groups(argv)) == ["4242", "4343"]  # exactly those: no name that resolves inside the image
    assert f"{dev / 'dri'}:/dev/dri" in argv and "warning" not in result.stderr


@pytest.mark.parametrize("gid, mode, added", [(108, 0o660, ["108"]), (108, 0o666, []), (0, 0o660, []), (108, 0o664, ["108"])])
def test_which_nodes_need_a_group(engine, tmp_path, gid, mode, added):
    dev = _dev_root(tmp_path, {"renderD128": (gid, mode)})
    assert _groups(_command(_run("--dev-root", str(dev)))) == added


def test_an_explicit_device_brings_its_own_group(engine, tmp_path):
    dev = _dev_root(tmp_path, {"renderD129": (777, 0o660)})
    argv = _command(_run("--device", f"{dev / 'dri' / 'renderD129'}:/dev/dri/renderD128"))
    assert _groups(argv) == ["777"]


def test_no_render_node_is_said(engine, tmp_path):
    (tmp_path / "dev" / "dri").mkdir(parents=True)
    result = _run("--dev-root", str(tmp_path / "dev"))
    assert result.returncode == 0 and "no render node" in result.stderr and _groups(_command(result)) == []


def test_never_root_silently(engine, tmp_path):
    mine = tmp_path / "root-owned"
    mine.mkdir()
    os.chown(mine, 0, 0)
    refused = run_cli("container", "run", "--image", "localhost/x:y", "--dry-run", "--output", str(mine), "--", "doctor")
    assert refused.returncode == 2 and "owned by root" in refused.stderr and "--allow-root" in refused.stderr
    argv = _command(_run(output=mine))
    assert argv[argv.index("--user") + 1] == "0:0"
    theirs = tmp_path / "user-owned"
    theirs.mkdir()
    os.chown(theirs, 1234, 2345)
    argv = _command(run_cli("container", "run", "--image", "localhost/x:y", "--dry-run", "--output", str(theirs), "--", "doctor"))
    assert argv[argv.index("--user") + 1] == "1234:2345"


def test_ipc_host_only_on_request(engine):
    assert "--ipc=host" not in _command(_run())
    assert "--ipc=host" in _command(_run("--ipc-host"))


@pytest.mark.parametrize(
    "hard, expected",
    [
        (20000, ["--ulimit=nofile=20000:20000"]),
        (1_048_575, ["--ulimit=nofile=1048575:1048575"]),
        (1_048_576, []),
        (2_000_000, []),
    ],
)
def test_rlimits_podman_cannot_raise(hard, expected):
    import resource

    from aipc_env.container.gpu_access import rlimit_options

    limits = {"nofile": hard, "nproc": resource.RLIM_INFINITY}
    options, notes = rlimit_options("podman", [], hard_limit=limits.__getitem__)
    assert options == expected and len(notes) == len(expected)
    assert rlimit_options("docker", [], hard_limit=limits.__getitem__) == ([], [])
    assert rlimit_options("podman", ["--ulimit=nofile=10:10"], hard_limit=limits.__getitem__)[0] == []
    limits["nproc"] = 32768
    assert "--ulimit=nproc=32768:32768" in rlimit_options("podman", [], hard_limit=limits.__getitem__)[0]


def test_the_default_image_is_the_tag_container_build_gives_the_policys_pair():
    """No literal image: --pair's tag, else the newest supported pair's (what `container build` tags)."""
    from aipc_env.matrix import load_matrix

    def image(*extra: str) -> str:
        result = run_cli("container", "run", "--dry-run", "--json", *extra, "--", "doctor")
        assert result.returncode == 0, result.stderr[-2000:]
        return json.loads(result.stdout)["image"]

    assert image("--pair", "xpu-2.12") == "localhost/aipc-env:xpu-2.12"
    assert image() == f"localhost/aipc-env:{load_matrix().newest('linux-64').id}"


def test_quiet_silences_the_notes_but_not_the_warning_or_the_result(tmp_path):
    args = ["container", "run", "--image", "localhost/x:y", "--dry-run", "--dev-root", str(tmp_path), "--json"]
    loud = run_cli(*args, "--", "doctor")
    quiet = run_cli(*args, "--quiet", "--", "doctor")
    assert loud.returncode == quiet.returncode == 0
    assert "warning: no render node" in loud.stderr and "warning: no render node" in quiet.stderr
    command = json.loads(quiet.stdout)["command_line"]
    assert command in loud.stderr and command not in quiet.stderr
    assert json.loads(loud.stdout) == json.loads(quiet.stdout)


def test_every_message_is_kept_as_data_silenced_or_not():
    import argparse

    from aipc_env.commands.result import progress

    args = argparse.Namespace(json=True, quiet=True)
    channel = progress(args)
    channel.say("step")
    channel.note("env")
    channel.warn("careful")
    assert progress(args) is channel  # one channel per command line
    assert channel.said == [("say", "step"), ("note", "env"), ("warn", "careful")]
