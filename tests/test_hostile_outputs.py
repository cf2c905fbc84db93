"""The one writer trusts nothing it did not just write: a journal or record left in an output folder (by a crash, or
planted by anyone who can write there) is parsed through its model and may name only the files of the command now
running; anything else is a named refusal that changes nothing, checked before the first output is staged. In
process for the writer itself, and through each command that uses it (fleet ansible, fleet keygen, distill init
--force)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aipc_env.core.outputs import JOURNAL_SUFFIX, RECORD, OutputFolder, commit_files, recover
from aipc_env.errors import InputError
from tests.conftest import run_cli

TOKEN = "0123abcd"


def _snapshot(root: Path) -> dict[str, bytes | str]:
    """Every entry under root: a file's bytes, a link's target, a folder as 'dir'."""
    found: dict[str, bytes | str] = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        found[rel] = f"link:{p.readlink()}" if p.is_symlink() else "dir" if p.is_dir() else p.read_bytes()
    return found


def _plant(folder: Path, journal_name: str, final: Path, *, state: str = "ready", record=None) -> Path:
    """A journal naming `final`, and a temp file of the writer's naming beside it (the attacker's content)."""
    journal = folder / journal_name
    journal.write_text(json.dumps({"state": state, "renames": [{"token": TOKEN, "final": str(final)}], "record": record}))
    final.parent.mkdir(parents=True, exist_ok=True)
    (final.parent / f".aipc-tmp-{TOKEN}-{final.name}").write_bytes(b"ATTACKER")
    return journal


def _setup(tmp_path: Path) -> tuple[Path, Path]:
    out, victim = tmp_path / "out", tmp_path / "victim" / "important.txt"
    out.mkdir()
    victim.parent.mkdir()
    victim.write_text("keep\n")
    return out, victim


# --- the writer -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("state", ["ready", "staging"])
@pytest.mark.parametrize("how", ["absolute", "dotdot", "linked-folder", "linked-final"])
def test_a_journal_naming_a_file_outside_the_folder_changes_nothing(tmp_path, state, how):
    out, victim = _setup(tmp_path)
    if how == "absolute":
        final = victim
    elif how == "dotdot":
        final = out / ".." / "victim" / "important.txt"
    elif how == "linked-folder":
        (out / "sub").symlink_to(victim.parent, target_is_directory=True)
        final = out / "sub" / "important.txt"
    else:
        (out / "site.yml").symlink_to(victim)
        final = out / "site.yml"
    _plant(victim.parent if how != "linked-final" else out, "x", final)
    journal = OutputFolder(out).journal
    journal.write_text((victim.parent if how != "linked-final" else out).joinpath("x").read_text())
    before_out, before_victim = _snapshot(out), _snapshot(victim.parent)
    with pytest.raises(InputError, match="journal that cannot be trusted") as err:
        OutputFolder(out, force=True).write({"a.yml": b"mine"})
    assert err.value.path == str(journal)
    assert _snapshot(out) == before_out and _snapshot(victim.parent) == before_victim
    assert victim.read_text() == "keep\n"


@pytest.mark.parametrize(
    "body",
    [
        '{"state": "ready", "renames": [["a", "b"]], "record": null}',  # the old list form: not the model's
        '{"state": "ready", "renames": [{"token": 5, "final": "/x"}], "record": null}',
        '{"state": "ready", "renames": [{"token": "0123abcd", "final": ""}], "record": null}',
        '{"state": "ready", "renames": [{"token": "../../x", "final": "/x"}], "record": null}',
        '{"state": "done", "renames": [], "record": null}',
        '{"state": "ready", "renames": "abc", "record": null}',
        '{"state": "ready", "renames": [], "record": {"../x": "' + "0" * 64 + '"}}',
        '{"state": "ready", "renames": [], "record": {"a": "not a hash"}}',
        '{"state": "ready", "state": "staging", "renames": [], "record": null}',  # duplicate key
        "[]",
        "null",
        '"x"',
        "{half",
    ],
)
def test_a_journal_of_the_wrong_form_is_a_named_refusal_that_changes_nothing(tmp_path, body):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("keep")
    journal = OutputFolder(out).journal
    journal.write_text(body)
    before = _snapshot(out)
    with pytest.raises(InputError, match="journal that cannot be") as err:
        OutputFolder(out).write({"a.yml": b"x"})
    assert err.value.path == str(journal) and _snapshot(out) == before


def test_a_journal_inside_the_folder_is_still_finished(tmp_path):
    """The guard refuses only what is not the folder's: a genuine ready journal (with its record) is finished."""
    out = tmp_path / "out"
    out.mkdir()
    (out / f".aipc-tmp-{TOKEN}-a.yml").write_bytes(b"new")
    import hashlib

    record = {"a.yml": hashlib.sha256(b"new").hexdigest()}
    OutputFolder(out).journal.write_text(
        json.dumps({"state": "ready", "renames": [{"token": TOKEN, "final": str(out / "a.yml")}], "record": record})
    )
    assert recover(OutputFolder(out).journal, OutputFolder(out).owns) == [
        f"finished writing {out / 'a.yml'} (an interrupted run)"
    ]
    assert (out / "a.yml").read_bytes() == b"new" and OutputFolder(out).recorded() == record


@pytest.mark.parametrize("what", ["record", "journal"])
@pytest.mark.parametrize("kind", ["folder", "link"])
def test_the_records_and_journals_place_is_checked_before_anything_is_staged(tmp_path, what, kind):
    out, victim = _setup(tmp_path)
    place = out / RECORD if what == "record" else OutputFolder(out).journal
    if kind == "folder":
        place.mkdir()
    else:
        place.symlink_to(victim)
    before = _snapshot(out)
    with pytest.raises(InputError, match="is a link or not a regular file") as err:
        OutputFolder(out).write({"a.yml": b"x", "b.yml": b"y"})
    assert err.value.path == str(place)
    assert _snapshot(out) == before and victim.read_text() == "keep\n"  # no temp file left either


def test_a_record_naming_paths_outside_counts_for_nothing(tmp_path):
    out, _ = _setup(tmp_path)
    (out / "a.yml").write_text("the admin's")
    import hashlib

    (out / RECORD).write_text(
        json.dumps(
            {
                "written_by": "aipc-env",
                "files": {"a.yml": hashlib.sha256(b"the admin's").hexdigest(), "../victim/important.txt": "0" * 64},
            }
        )
    )
    with pytest.raises(InputError, match="is not a file aipc-env wrote here"):
        OutputFolder(out).write({"a.yml": b"x"})
    (out / RECORD).write_text(json.dumps({"written_by": "aipc-env", "files": {"a.yml": 5}}))
    with pytest.raises(InputError, match="is not a file aipc-env wrote here"):
        OutputFolder(out).write({"a.yml": b"x"})


def test_a_temp_name_already_taken_is_refused_before_staging(tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.setattr("aipc_env.core.outputs.secrets.token_hex", lambda n: TOKEN)
    (out / f".aipc-tmp-{TOKEN}-b.yml").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(InputError, match="a temp file of this name is already there"):
        commit_files({out / "a.yml": b"1", out / "b.yml": b"2"}, out / "j.json")
    assert not (out / "a.yml").exists() and not (tmp_path / "elsewhere").exists()
    assert not list(out.glob(f".aipc-tmp-{TOKEN}-a.yml"))


def test_a_journal_may_name_only_the_files_of_the_commit_now_running(tmp_path):
    """A set of files outside a folder of outputs (a key pair, an export): an earlier journal naming any other file
    (here a sibling the command does not write) is refused, and nothing is written."""
    victim = tmp_path / "notes.txt"
    victim.write_text("keep")
    journal = _plant(tmp_path, ".export.aipc-env-commit.json", victim)
    with pytest.raises(InputError, match="which this command does not write"):
        commit_files({tmp_path / "LICENSE": b"l", tmp_path / "model.safetensors": b"w"}, journal)
    assert victim.read_text() == "keep" and not (tmp_path / "LICENSE").exists()
    assert (tmp_path / f".aipc-tmp-{TOKEN}-notes.txt").read_bytes() == b"ATTACKER"  # not even removed
    journal.write_text(
        json.dumps({"state": "ready", "renames": [{"token": TOKEN, "final": str(tmp_path / "LICENSE")}], "record": None})
    )
    (tmp_path / f".aipc-tmp-{TOKEN}-LICENSE").write_bytes(b"from the interrupted run")
    commit_files({tmp_path / "LICENSE": b"l", tmp_path / "model.safetensors": b"w"}, journal)  # its own: finished
    assert (tmp_path / "LICENSE").read_bytes() == b"l" and not journal.exists()


def test_the_writers_own_names_are_not_output_names(tmp_path):
    for name in (RECORD, f"x{JOURNAL_SUFFIX}", ".aipc-tmp-0123abcd-a.yml", "sub/.aipc-tmp-x"):
        with pytest.raises(InputError, match="is not a plain file name"):
            OutputFolder(tmp_path / "out").write({name: b"x"})


# --- through the commands -----------------------------------------------------------------------------------------


def test_fleet_ansible_never_follows_a_planted_journal_out_of_its_folder(tmp_path):
    out, victim = _setup(tmp_path)
    _plant(out, RECORD + JOURNAL_SUFFIX, victim)
    before = _snapshot(victim.parent)
    result = run_cli("fleet", "ansible", "--out", str(out), "--force")
    assert result.returncode == 2 and "journal that cannot be trusted" in result.stderr, result.stderr
    assert _snapshot(victim.parent) == before and "Traceback" not in result.stderr
    (out / (RECORD + JOURNAL_SUFFIX)).write_text('{"state": "ready", "renames": [{"token": 1, "final": ""}]}')
    typed = run_cli("fleet", "ansible", "--out", str(out))
    assert typed.returncode == 2 and "journal that cannot be read" in typed.stderr, typed.stderr


def test_fleet_ansible_with_a_record_that_is_a_folder_writes_nothing(tmp_path):
    out = tmp_path / "out"
    (out / RECORD).mkdir(parents=True)
    result = run_cli("fleet", "ansible", "--out", str(out))
    assert result.returncode == 2 and "is a link or not a regular file" in result.stderr, result.stderr
    assert _snapshot(out) == {RECORD: "dir"}


def test_keygen_never_follows_a_planted_journal(tmp_path):
    keys, victim = _setup(tmp_path)
    _plant(keys, ".admin.key" + JOURNAL_SUFFIX, victim)
    before = _snapshot(victim.parent)
    result = run_cli(
        "fleet",
        "keygen",
        "--secret",
        str(keys / "admin.key"),
        "--public",
        str(keys / "admin.pub"),
        env={"AIPC_ENV_SIGN_PASSWORD": ""},
    )
    assert result.returncode == 2 and "journal that cannot be trusted" in result.stderr, result.stderr
    assert _snapshot(victim.parent) == before and not (keys / "admin.key").exists()


def test_distill_init_force_never_follows_a_planted_journal(tmp_path):
    folder, victim = _setup(tmp_path)
    assert run_cli("distill", "init", str(folder)).returncode == 0
    _plant(folder, ".distill.yaml" + JOURNAL_SUFFIX, victim, state="staging")
    before = _snapshot(victim.parent)
    result = run_cli("distill", "init", str(folder), "--force")
    assert result.returncode == 2 and "journal that cannot be trusted" in result.stderr, result.stderr
    assert _snapshot(victim.parent) == before
