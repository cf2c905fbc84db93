"""The guard that a test run leaves the user's own folders alone (a pytest plugin: tests/conftest.py takes its hooks;
`-p tests.support.user_folders` loads it alone). At the start of the run, in the one process that is not an xdist
worker (a plain run's only process, or xdist's controller), it records aipc-env's per-user folders as the tool finds
them in the environment pytest started with, before conftest.py's isolation: the data, state and cache folders of
src/aipc_env/paths.py (an AIPC_ENV_*_DIR override the caller set, else the per-user default) and the per-user
defaults themselves, config included (aipc-env has no config folder; one added later is watched already). For each:
whether it exists, and every entry under it with its size and modification time. At the end, after every worker
has finished, a folder that changed fails the run, naming each changed path."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

Entry = tuple[str, int, int]
"""(kind, size, mtime in ns) of one path: kind is "dir", "file" or "link"."""
Snapshot = dict[str, Entry]
"""Every path under the watched folders (and each folder itself) with its Entry; a missing folder has none."""

SHOWN = 20
"""Changed paths listed in the summary; the rest are counted."""

_BEFORE = pytest.StashKey[tuple[list[Path], Snapshot]]()
_CHANGED = pytest.StashKey[list[str]]()


def real_folders() -> list[Path]:
    """aipc-env's per-user folders for the environment of this process, as the tool would use them, and the
    per-user defaults (data, state, cache, config) in case a caller's override hid them."""
    import platformdirs

    from aipc_env import paths

    found = [paths.data_dir(), paths.state_dir(), paths.cache_dir()]
    found += [
        Path(where("aipc-env", appauthor=False))
        for where in (
            platformdirs.user_data_dir,
            platformdirs.user_state_dir,
            platformdirs.user_cache_dir,
            platformdirs.user_config_dir,
        )
    ]
    unique: list[Path] = []
    for folder in (Path(os.path.abspath(f)) for f in found):
        if folder not in unique:
            unique.append(folder)
    return unique


def _entry(st: os.stat_result, kind: str) -> Entry:
    return (kind, 0 if kind == "dir" else st.st_size, st.st_mtime_ns)


def snapshot(folders: list[Path]) -> Snapshot:
    """Each existing folder and everything under it, symbolic links not followed; unreadable parts are left out."""
    seen: Snapshot = {}
    for folder in folders:
        try:
            st = folder.lstat()
        except OSError:
            continue
        if not os.path.isdir(folder) or folder.is_symlink():
            seen[str(folder)] = _entry(st, "link" if folder.is_symlink() else "file")
            continue
        seen[str(folder)] = _entry(st, "dir")
        for top, dirs, files in os.walk(folder):
            for name in (*dirs, *files):
                path = os.path.join(top, name)
                try:
                    st = os.lstat(path)
                except OSError:
                    continue
                kind = "link" if os.path.islink(path) else "dir" if name in dirs else "file"
                seen[path] = _entry(st, kind)
    return seen


def changes(before: Snapshot, after: Snapshot) -> list[str]:
    """'PATH (new|gone|changed)' for each path that differs, in path order."""
    out = []
    for path in sorted(before.keys() | after.keys()):
        if path not in before:
            out.append(f"{path} (new)")
        elif path not in after:
            out.append(f"{path} (gone)")
        elif before[path] != after[path]:
            out.append(f"{path} (changed)")
    return out


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    if _is_worker(session.config):
        return
    folders = real_folders()
    session.config.stash[_BEFORE] = (folders, snapshot(folders))


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    recorded = session.config.stash.get(_BEFORE, None)
    if recorded is None:
        return
    folders, before = recorded
    changed = changes(before, snapshot(folders))
    if not changed:
        return
    session.config.stash[_CHANGED] = changed
    if session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    changed = config.stash.get(_CHANGED, None)
    if not changed:
        return
    terminalreporter.section("the user's own aipc-env folders changed during the run", sep="=", red=True)
    terminalreporter.write_line(
        "a test (or a process it started) used the real per-user folders instead of its own: "
        "give it tests/support/isolation.py's isolated_env"
    )
    for line in changed[:SHOWN]:
        terminalreporter.write_line(f"  {line}")
    if len(changed) > SHOWN:
        terminalreporter.write_line(f"  ... and {len(changed) - SHOWN} more")
