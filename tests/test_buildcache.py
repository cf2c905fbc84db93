"""The one "build a tiny model once and cache it" rule (aipc_env.train.buildcache): reused only whole, built under a
lock by one process at a time (two real processes race for it here), published atomically (a failed build leaves
the old folder or nothing), refused in a second where the folder cannot be one."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from aipc_env.errors import InputError
from aipc_env.train import buildcache
from aipc_env.train.buildcache import build_once, folder_digests, is_current, recipe_key

RECORD = "record.json"
RECIPE = {"version": 1, "steps": 3}


def _writer(calls: list[Path]):
    def build(tmp: Path) -> None:
        calls.append(tmp)
        (tmp / "sub").mkdir()
        (tmp / "sub" / "weights.bin").write_bytes(b"\0weights")
        (tmp / "config.json").write_text('{"n": 1}')

    return build


def _once(folder: Path, calls: list[Path], recipe=RECIPE, log=lambda _m: None) -> bool:
    return build_once(folder, record=RECORD, recipe=recipe, build=_writer(calls), what="the test cache", log=log)


def test_built_once_then_reused_whole(tmp_path):
    calls: list[Path] = []
    folder = tmp_path / "cache" / f"model-{recipe_key(RECIPE)}"
    assert _once(folder, calls) is True and len(calls) == 1 and calls[0] != folder  # built aside, then published
    record = json.loads((folder / RECORD).read_text())
    assert record == {"recipe": RECIPE, "files": folder_digests(folder, record=RECORD)}
    assert set(record["files"]) == {"config.json", "sub/weights.bin"}
    assert _once(folder, calls) is False and len(calls) == 1
    assert {p.name for p in folder.parent.iterdir()} - {f".{folder.name}.lock"} == {folder.name}  # no partial left


@pytest.mark.parametrize("edit", ["nested-file", "extra-file", "record-recipe", "record-garbage", "record-gone", "link"])
def test_anything_edited_is_rebuilt(tmp_path, edit):
    calls: list[Path] = []
    folder = tmp_path / "m"
    _once(folder, calls)
    if edit == "nested-file":
        (folder / "sub" / "weights.bin").write_bytes(b"\1weights")
    elif edit == "extra-file":
        (folder / "sub" / "more.bin").write_bytes(b"")
    elif edit == "record-recipe":
        record = json.loads((folder / RECORD).read_text())
        (folder / RECORD).write_text(json.dumps({**record, "recipe": {"version": 0, "steps": 3}}))
    elif edit == "record-garbage":
        (folder / RECORD).write_bytes(b"\xff\xfe{")
    elif edit == "record-gone":
        (folder / RECORD).unlink()
    else:
        real = tmp_path / "elsewhere.json"
        (folder / "config.json").rename(real)
        (folder / "config.json").symlink_to(real)
        assert folder_digests(folder, record=RECORD) is None
    told: list[str] = []
    assert _once(folder, calls, log=told.append) is True and len(calls) == 2
    assert any("does not match its record" in m for m in told)
    assert is_current(folder, record=RECORD, recipe=RECIPE)


def test_another_recipe_is_not_this_one(tmp_path):
    calls: list[Path] = []
    _once(tmp_path / "m", calls)
    assert not is_current(tmp_path / "m", record=RECORD, recipe={**RECIPE, "steps": 4})
    assert is_current(tmp_path / "m", record=RECORD, recipe=dict(reversed(list(RECIPE.items()))))  # order is no key
    assert recipe_key(RECIPE) == recipe_key(dict(reversed(list(RECIPE.items())))) != recipe_key({**RECIPE, "steps": 4})


def test_a_failed_build_keeps_the_old_folder_and_leaves_no_partial(tmp_path):
    calls: list[Path] = []
    folder = tmp_path / "m"
    _once(folder, calls)
    (folder / "config.json").write_text('{"n": 2}')  # stale: a rebuild is due
    before = {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}

    def broken(tmp: Path) -> None:
        (tmp / "half.bin").write_bytes(b"half")
        raise RuntimeError("the build failed")

    with pytest.raises(RuntimeError, match="the build failed"):
        build_once(folder, record=RECORD, recipe=RECIPE, build=broken, what="the test cache", log=lambda _m: None)
    assert {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()} == before
    assert {p.name for p in tmp_path.iterdir()} - {".m.lock"} == {"m"}  # the lock file may stay, as filelock leaves it


def test_a_build_that_writes_nothing_is_refused(tmp_path):
    with pytest.raises(InputError, match="wrote no files"):
        build_once(tmp_path / "m", record=RECORD, recipe=RECIPE, build=lambda _t: None, what="the test cache")
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize("where", ["folder-is-file", "folder-is-link", "parent-is-file"])
def test_a_folder_that_cannot_be_one_is_refused_before_the_build(tmp_path, where):
    calls: list[Path] = []
    folder = tmp_path / "m"
    if where == "folder-is-file":
        folder.write_text("a file")
    elif where == "folder-is-link":
        (tmp_path / "real").mkdir()
        folder.symlink_to(tmp_path / "real")
    else:
        (tmp_path / "parent").write_text("a file")
        folder = tmp_path / "parent" / "m"
    with pytest.raises(InputError):
        _once(folder, calls)
    assert calls == []


def test_a_waiting_process_says_so_then_reuses_the_build(tmp_path, monkeypatch):
    """While another holds the lock, build_once waits with a line every LOCK_WAIT_LINE_S; when the holder has
    published, it reuses the folder instead of building again."""
    from filelock import FileLock

    monkeypatch.setattr(buildcache, "LOCK_WAIT_LINE_S", 0.2)
    folder = tmp_path / "m"
    held = FileLock(str(tmp_path / ".m.lock"))
    held.acquire()
    calls: list[Path] = []
    told: list[str] = []
    result: list[bool] = []
    waiter = threading.Thread(target=lambda: result.append(_once(folder, calls, log=told.append)))
    waiter.start()
    deadline = time.monotonic() + 30
    while len(told) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(told) >= 2 and all("waiting for another process" in m for m in told)
    (folder.parent / "staged").mkdir()  # the holder publishes its build while it holds the lock
    _writer([])(folder.parent / "staged")
    (folder.parent / "staged").rename(folder)
    (folder / RECORD).write_text(json.dumps({"recipe": RECIPE, "files": folder_digests(folder, record=RECORD)}))
    held.release()
    waiter.join(30)
    assert result == [False] and calls == []


_RACER = """
import sys, time
from pathlib import Path
from aipc_env.train.buildcache import build_once

def build(tmp):
    with open(sys.argv[2], "a") as log:
        log.write("build\\n")
    time.sleep(1.0)
    (tmp / "weights.bin").write_bytes(b"w")

print(build_once(Path(sys.argv[1]), record="record.json", recipe={"v": 1}, build=build, what="race", log=lambda m: None))
"""


def test_two_processes_build_once(tmp_path):
    """Two real processes start on an empty cache at once: one builds, the other waits and reuses it."""
    import os

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    builds = tmp_path / "builds.log"
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", _RACER, str(tmp_path / "m"), str(builds)], stdout=subprocess.PIPE, text=True, env=env
        )
        for _ in range(2)
    ]
    outs = sorted(p.communicate(timeout=120)[0].strip() for p in racers)
    assert [p.returncode for p in racers] == [0, 0]
    assert outs == ["False", "True"]
    assert builds.read_text() == "build\n"
    assert is_current(tmp_path / "m", record="record.json", recipe={"v": 1})
