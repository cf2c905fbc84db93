"""Index reads try again when the network failed for a passing reason (a DNS "try again", a reset), and only then:
a name that does not exist or an HTTP refusal is answered at once."""

from __future__ import annotations

import io
import socket
import urllib.error
import urllib.request

import pytest

from aipc_env.lock import simple_index
from aipc_env.lock.simple_index import IndexReadError


class _Response(io.BytesIO):
    headers = {"Content-Type": "text/html"}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _calls(monkeypatch, failures: list[BaseException]) -> list[int]:
    seen: list[int] = []

    def fake(request, timeout):
        seen.append(1)
        if failures:
            raise failures.pop(0)
        return _Response(b"<html></html>")

    monkeypatch.setattr(urllib.request, "urlopen", fake)
    monkeypatch.setattr("time.sleep", lambda _s: None)
    return seen


def _gai(code: int) -> urllib.error.URLError:
    return urllib.error.URLError(socket.gaierror(code, "Temporary failure in name resolution"))


def test_a_dns_try_again_is_retried_up_to_the_bound(monkeypatch):
    seen = _calls(monkeypatch, [_gai(socket.EAI_AGAIN), _gai(socket.EAI_AGAIN)])
    data, _ = simple_index._read("https://index.example/simple/x/", limit=1000)
    assert data == b"<html></html>" and len(seen) == 3  # two failures, the third try answers


def test_past_the_bound_the_failure_is_named(monkeypatch):
    seen = _calls(monkeypatch, [_gai(socket.EAI_AGAIN)] * 3)
    with pytest.raises(IndexReadError, match="Temporary failure in name resolution"):
        simple_index._read("https://index.example/simple/x/", limit=1000)
    assert len(seen) == simple_index.TRANSIENT_TRIES == 3


def test_a_name_that_does_not_exist_and_an_http_error_are_not_retried(monkeypatch):
    seen = _calls(monkeypatch, [_gai(socket.EAI_NONAME)])
    with pytest.raises(IndexReadError):
        simple_index._read("https://index.example/simple/x/", limit=1000)
    assert len(seen) == 1
    seen = _calls(monkeypatch, [urllib.error.HTTPError("https://index.example/", 503, "busy", {}, None)])
    with pytest.raises(IndexReadError, match="HTTP 503"):
        simple_index._read("https://index.example/simple/x/", limit=1000)
    assert len(seen) == 1


def test_a_reset_connection_is_retried(monkeypatch):
    seen = _calls(monkeypatch, [urllib.error.URLError(ConnectionResetError("reset"))])
    simple_index._read("https://index.example/simple/x/", limit=1000)
    assert len(seen) == 2
