"""The one writer for outputs of several files (aipc_env.core.outputs): only files the tool wrote are replaced, nothing is
written through a symlink, and a set of files lands whole or not at all across a Ctrl-C or a kill at each instant;
through the commands that use it (fleet ansible, fleet keygen, distill init --force)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from aipc_env.core.outputs import RECORD, OutputFolder, commit_files, recover
from aipc_env.errors import InputError
from tests.conftest import find_tool, require_tool, run_cli

INSTANTS = ["outputs:staged-one", "outputs:journal-ready", "outputs:renamed-one"]


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# --- the folder's rules -------------------------------------------------------------------------------------------


def test_a_folder_takes_new_files_and_replaces_only_its_own_unedited_ones(tmp_path):
    out = tmp_path / "out"
    OutputFolder(out).write({"a.yml": b"1", "sub/b.yml": b"2"})
    assert _tree(out).keys() == {RECORD, "a.yml", "sub/b.yml"}
    OutputFolder(out).write({"a.yml": b"1 again", "sub/b.yml": b"2 again", "c.yml": b"3"})  # its own: replaced
    assert (out / "a.yml").read_bytes() == b"1 again"
    (out / "sub" / "b.yml").write_bytes(b"edited by the admin")
    with pytest.raises(InputError, match="was edited since aipc-env wrote it") as err:
        OutputFolder(out).write({"a.yml": b"x", "sub/b.yml": b"y"})
    assert err.value.path == str(out / "sub" / "b.yml") and "--force" in err.value.fix
    assert (out / "a.yml").read_bytes() == b"1 again"  # nothing written when one target is refused
    (out / "mine.yml").write_bytes(b"the admin's own")
    with pytest.raises(InputError, match="is not a file aipc-env wrote here"):
        OutputFolder(out).write({"mine.yml": b"x"})
    OutputFolder(out, force=True).write({"mine.yml": b"x", "sub/b.yml": b"y"})
    assert (out / "mine.yml").read_bytes() == b"x" and (out / "sub" / "b.yml").read_bytes() == b"y"
    OutputFolder(out).write({"mine.yml": b"z"})  # now recorded as its own
    (out / RECORD).write_text("{not json")  # a damaged record: nothing counts as ours
    with pytest.raises(InputError, match="is not a file aipc-env wrote here"):
        OutputFolder(out).write({"a.yml": b"x"})


def test_nothing_is_written_through_a_symlink_in_the_folder(tmp_path):
    out, outside = tmp_path / "out", tmp_path / "outside.txt"
    outside.write_text("keep")
    out.mkdir()
    (out / "site.yml").symlink_to(outside)
    with pytest.raises(InputError, match="is a link"):
        OutputFolder(out).write({"site.yml": b"x"})
    OutputFolder(out, force=True).write({"site.yml": b"x"})  # the link itself is replaced, never its target
    assert outside.read_text() == "keep" and not (out / "site.yml").is_symlink()
    (out / "group_vars").symlink_to(tmp_path, target_is_directory=True)
    for force in (False, True):  # a folder on the way that is a link: refused even with --force
        with pytest.raises(InputError, match="is a link or a file where the output needs a folder"):
            OutputFolder(out, force=force).write({"group_vars/all.yml": b"x"})
    assert not (tmp_path / "all.yml").exists()
    (tmp_path / "linked").symlink_to(out, target_is_directory=True)
    with pytest.raises(InputError, match="the output folder is a link"):
        OutputFolder(tmp_path / "linked")


@pytest.mark.parametrize(
    "name", ["../x", "a/../../x", "/etc/passwd", "a//b", "./a", "a\nb", "a\\b", "c:x", "", "x" * 201, "/".join("d" * 9)]
)
def test_names_stay_inside_the_folder(tmp_path, name):
    with pytest.raises(InputError, match="is not a plain file name inside the output folder"):
        OutputFolder(tmp_path / "out").write({name: b"x"})
    assert not (tmp_path / "out").exists() or _tree(tmp_path / "out") == {}


def test_names_at_the_bounds_are_written(tmp_path):
    OutputFolder(tmp_path / "out").write({"x" * 200: b"1", "/".join("d" * 8): b"2", "ü & (x86) %a%.yml": b"3"})
    assert (tmp_path / "out" / ("x" * 200)).read_bytes() == b"1"


# --- all or nothing ---------------------------------------------------------------------------------------------

_WRITER = """
import sys
from pathlib import Path
from aipc_env.core.outputs import OutputFolder
OutputFolder(Path(sys.argv[1])).write({"a.yml": sys.argv[2].encode(), "sub/b.yml": sys.argv[2].encode(),
                                       "c.yml": sys.argv[2].encode()})
"""


@pytest.mark.parametrize("kill", [False, True], ids=["ctrl-c", "kill"])
@pytest.mark.parametrize("at", INSTANTS)
def test_an_interrupt_at_each_instant_leaves_the_old_set_or_the_new_one(tmp_path, at, kill):
    """A real SIGINT (or SIGKILL) at each instant of a commit; what is on disk is the old set, or (the journal was
    ready) the next run finishes the new one; no temp file stays after the next run."""
    import sys

    out = tmp_path / "out"
    subprocess.run([sys.executable, "-c", _WRITER, str(out), "old"], check=True, timeout=60)
    env = {**os.environ, "AIPC_ENV_INTERRUPT_AT": at, **({"AIPC_ENV_INTERRUPT_SIGNAL": "KILL"} if kill else {})}
    stopped = subprocess.run([sys.executable, "-c", _WRITER, str(out), "new"], env=env, capture_output=True, timeout=60)
    assert stopped.returncode != 0
    contents = {k: v for k, v in _tree(out).items() if not k.startswith(".")}
    if at == "outputs:staged-one" and not kill:  # Ctrl-C while staging: undone at once
        assert set(contents.values()) == {b"old"} and not list(out.rglob(".aipc-tmp-*"))
    recover(OutputFolder(out).journal, OutputFolder(out).owns)
    contents = {k: v for k, v in _tree(out).items() if not k.startswith(".")}
    expected = b"old" if at == "outputs:staged-one" else b"new"
    assert contents == {"a.yml": expected, "sub/b.yml": expected, "c.yml": expected}
    assert not list(out.rglob(".aipc-tmp-*")) and not OutputFolder(out).journal.exists()
    OutputFolder(out).write({"a.yml": b"next"})  # the record matches what is there: its own files again


def test_a_journal_that_cannot_be_read_is_a_named_error(tmp_path):
    journal = tmp_path / "j.json"
    journal.write_text("{half")
    with pytest.raises(InputError, match="an interrupted write left a journal that cannot be read") as err:
        commit_files({tmp_path / "a": b"x"}, journal)
    assert err.value.path == str(journal) and not (tmp_path / "a").exists()


# --- through the commands -----------------------------------------------------------------------------------------


def test_fleet_ansible_keeps_an_admins_files_and_follows_no_link(tmp_path):
    out = tmp_path / "playbook & ü"
    out.mkdir()
    (out / "site.yml").write_text("# the admin's own play\n")
    refused = run_cli("fleet", "ansible", "--out", str(out))
    assert refused.returncode == 2 and "is not a file aipc-env wrote here" in refused.stderr
    assert "--force" in refused.stderr and (out / "site.yml").read_text() == "# the admin's own play\n"
    assert sorted(p.name for p in out.iterdir()) == ["site.yml"]  # nothing else written either
    outside = tmp_path / "outside.yml"
    outside.write_text("keep\n")
    (out / "site.yml").unlink()
    (out / "site.yml").symlink_to(outside)
    assert run_cli("fleet", "ansible", "--out", str(out)).returncode == 2
    forced = run_cli("fleet", "ansible", "--out", str(out), "--force")
    assert forced.returncode == 0, forced.stderr
    assert outside.read_text() == "keep\n" and not (out / "site.yml").is_symlink()
    again = run_cli("fleet", "ansible", "--out", str(out))  # its own, unedited: replaced without --force
    assert again.returncode == 0, again.stderr
    record = json.loads((out / RECORD).read_text())["files"]
    assert {"site.yml", "group_vars/all.yml", "ansible.cfg"} <= set(record)


@pytest.mark.parametrize("at", INSTANTS)
def test_keygen_interrupted_at_each_instant_leaves_no_half_pair(tmp_path, at):
    """A Ctrl-C between the two key files: the next keygen either writes a new pair (staging was cut short) or
    finishes this one (exit 0); never a secret key without its public key. The pair verifies with real minisign."""
    require_tool(None if find_tool("minisign") else "minisign (Debian package minisign)")
    keys = tmp_path / "admin keys"
    keys.mkdir()
    args = ["fleet", "keygen", "--secret", str(keys / "admin.key"), "--public", str(keys / "admin.pub")]
    env = {"AIPC_ENV_SIGN_PASSWORD": ""}
    stopped = run_cli(*args, env={**env, "AIPC_ENV_INTERRUPT_AT": at})
    assert stopped.returncode == 130
    assert {(keys / "admin.key").exists(), (keys / "admin.pub").exists()} != {True, False} or at != INSTANTS[0]
    again = run_cli(*args, env=env)
    assert again.returncode == 0, again.stderr
    if at != INSTANTS[0]:
        assert "the key pair an interrupted keygen began is complete" in again.stdout
    assert sorted(p.name for p in keys.iterdir()) == ["admin.key", "admin.pub"]
    assert oct((keys / "admin.key").stat().st_mode & 0o777) == "0o600"
    message = tmp_path / "m.txt"
    message.write_text("hello\n")
    sign = subprocess.run(
        [find_tool("minisign"), "-S", "-s", str(keys / "admin.key"), "-m", str(message)],
        capture_output=True,
        text=True,
        timeout=60,
        input="\n",
    )
    assert sign.returncode == 0, sign.stderr
    verify = subprocess.run(
        [find_tool("minisign"), "-Vm", str(message), "-p", str(keys / "admin.pub")], capture_output=True, text=True, timeout=60
    )
    assert verify.returncode == 0 and "Signature and comment signature verified" in verify.stdout
    third = run_cli(*args, env=env)
    assert third.returncode == 2 and "a key is never overwritten" in third.stderr


def test_distill_init_force_keeps_the_old_config_without_following_a_bak_link(tmp_path):
    folder = tmp_path / "run"
    assert run_cli("distill", "init", str(folder)).returncode == 0
    config = folder / "distill.yaml"
    edited = config.read_text(encoding="utf-8") + "# my edit\n"
    config.write_text(edited, encoding="utf-8")
    outside = tmp_path / "outside.txt"
    outside.write_text("keep\n")
    (folder / "distill.yaml.bak").symlink_to(outside)
    forced = run_cli("distill", "init", str(folder), "--force")
    assert forced.returncode == 0, forced.stderr
    assert outside.read_text() == "keep\n" and not (folder / "distill.yaml.bak").is_symlink()
    assert (folder / "distill.yaml.bak").read_text(encoding="utf-8") == edited
    assert "# my edit" not in config.read_text(encoding="utf-8")
    assert sorted(p.name for p in folder.iterdir()) == ["distill.yaml", "distill.yaml.bak"]
    (folder / "distill.yaml.bak").unlink()
    (folder / "distill.yaml.bak").mkdir()
    refused = run_cli("distill", "init", str(folder), "--force")
    assert refused.returncode == 2 and "is not a regular file: the old config cannot be kept there" in refused.stderr


@pytest.mark.parametrize("at", INSTANTS)
def test_distill_init_force_interrupted_loses_no_config(tmp_path, at):
    folder = tmp_path / "run"
    assert run_cli("distill", "init", str(folder)).returncode == 0
    config = folder / "distill.yaml"
    edited = config.read_text(encoding="utf-8") + "# my edit\n"
    config.write_text(edited, encoding="utf-8")
    stopped = run_cli("distill", "init", str(folder), "--force", env={"AIPC_ENV_INTERRUPT_AT": at})
    assert stopped.returncode == 130
    from aipc_env.core.outputs import JOURNAL_SUFFIX

    recover(folder / f".distill.yaml{JOURNAL_SUFFIX}", [config, folder / "distill.yaml.bak"])
    kept = [p.read_text(encoding="utf-8") for p in (config, folder / "distill.yaml.bak") if p.exists()]
    assert edited in kept  # the user's edit survives every instant
    assert not list(folder.glob(".aipc-tmp-*"))
