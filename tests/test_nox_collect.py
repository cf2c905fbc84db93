"""`nox -s tests -- --collect-only` collects and reports nothing else: no coverage figure for tests that did not run.
The session's own body, with its installer and nox's runner replaced by a recorder (what runs is decided here)."""

from __future__ import annotations

import importlib.util
import sys
from typing import Any

import pytest

from tests.conftest import ROOT


class _Session:
    def __init__(self, posargs: list[str]) -> None:
        self.posargs = posargs
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
