"""`nox -s tests -- --collect-only` collects and reports nothing else: no coverage figure for tests that did not run.
The session's own body, with its installer and nox's runner replaced by a recorder (what runs is decided here). And
the suite's processes keep the bytecode they compile (decision 78)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import NOX_SESSION, ROOT, require_tool


class _Session:
    def __init__(self, posargs: list[str]) -> None:
        self.posargs = posargs
        self.env: dict[str, str | None] = {}
        self.cache_dir = Path("/nox-cache")
        self.ran: list[tuple[str, ...]] = []
        self.logged: list[str] = []

    def run(self, *args: str, **_: Any) -> str:
        self.ran.append(args)
        return "97"

    def log(self, text: str) -> None:
        self.logged.append(text)

    def install(self, *args: str, **_: Any) -> None:
        self.installed = [*getattr(self, "installed", []), args]


def _noxfile(monkeypatch: pytest.MonkeyPatch) -> Any:
    spec = importlib.util.spec_from_file_location("noxfile_under_test", ROOT / "noxfile.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "noxfile_under_test", module)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "_install", lambda session, *a, **k: list(session.posargs))
    return module


@pytest.mark.parametrize("flag", ["--collect-only", "--co"])
def test_collect_only_reports_no_coverage(monkeypatch: pytest.MonkeyPatch, flag: str) -> None:
    module = _noxfile(monkeypatch)
    session = _Session(["tests/test_docs.py", flag])
    module.tests.func(session) if hasattr(module.tests, "func") else module.tests(session)
    assert session.ran == [("python", "-m", "pytest", "tests/test_docs.py", flag)]
    assert not any("coverage" in line for line in session.logged)


def test_a_run_of_some_tests_reports_their_coverage(monkeypatch: pytest.MonkeyPatch) -> None:
    module = _noxfile(monkeypatch)
    session = _Session(["tests/test_docs.py"])
    module.tests.func(session) if hasattr(module.tests, "func") else module.tests(session)
    assert session.ran[0][:4] == ("python", "-m", "pytest", "--cov")
    assert any("coverage" in line and "97%" in line for line in session.logged)


@pytest.mark.parametrize("outer", [None, "/elsewhere/pyc"])
def test_the_tests_session_keeps_bytecode_in_one_folder(monkeypatch: pytest.MonkeyPatch, outer: str | None) -> None:
    """PYTHONDONTWRITEBYTECODE left out of every command the session runs; the bytecode under nox's cache, or where
    PYTHONPYCACHEPREFIX already says."""
    module = _noxfile(monkeypatch)
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    if outer:
        monkeypatch.setenv("PYTHONPYCACHEPREFIX", outer)
    else:
        monkeypatch.delenv("PYTHONPYCACHEPREFIX", raising=False)
    session = _Session(["tests/test_docs.py"])
    module.tests.func(session) if hasattr(module.tests, "func") else module.tests(session)
    prefix = session.env["PYTHONPYCACHEPREFIX"]
    assert session.env == {"PYTHONDONTWRITEBYTECODE": None, "PYTHONPYCACHEPREFIX": outer or prefix}
    assert prefix and Path(prefix).is_absolute() and (outer or Path(prefix).name == "pycache")


def test_this_run_of_the_tests_session_writes_bytecode() -> None:
    """The real session: this process (and every process it starts that keeps the environment) writes bytecode, into
    the one folder, whatever folder a process starts in (CI runs the suite with `nox -s tests`)."""
    require_tool(None if NOX_SESSION == "tests" else "checks a run of `nox -s tests`")
    assert not sys.flags.dont_write_bytecode
    assert sys.pycache_prefix and Path(sys.pycache_prefix).is_absolute()
