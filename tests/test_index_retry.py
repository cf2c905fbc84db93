"""Index reads try again when the network failed for a passing reason (a DNS "try again", a reset), and only then:
a name that does not exist or an HTTP refusal is answered at once."""

from __future__ import annotations

import io
import socket
import urllib.error
import urllib.request

import pytest

from aipc_env.core import net
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
    assert len(seen) == net.TRANSIENT_TRIES == 3


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


# The same rule for reachability probes and wheel downloads (core/net.py), checked against a real HTTP server on
# loopback that drops connections the way a flaky network does.


class _Flaky:
    """A loopback HTTP server whose first `drops` answers are cut: before any answer when `at_once` (any request),
    else after half the body (GETs only: a HEAD has no body). The cut is a TCP reset, or a plain close when `reset`
    is false (the server hung up early). `requests` counts every request, HEAD and GET."""

    def __init__(self, body: bytes, drops: int, *, at_once: bool = False, reset: bool = True) -> None:
        import http.server
        import struct
        import threading

        self.body, self.drops, self.requests = body, drops, 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _reset(self) -> None:
                if reset:  # SO_LINGER 0: close() sends a reset, as a dropped connection does
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.connection.close()
                self.close_connection = True

            def _answer(self, with_body: bool) -> None:
                outer.requests += 1
                cut = outer.drops > 0 and (at_once or with_body)
                outer.drops -= cut
                if cut and at_once:
                    return self._reset()
                self.send_response(200)
                self.send_header("Content-Length", str(len(outer.body)))
                self.end_headers()
                if not with_body:
                    return
                if cut:
                    self.wfile.write(outer.body[: len(outer.body) // 2])
                    self.wfile.flush()
                    return self._reset()
                self.wfile.write(outer.body)

            def do_GET(self) -> None:
                self._answer(True)

            def do_HEAD(self) -> None:
                self._answer(False)

            def log_message(self, *args) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/pkg-1.0-py3-none-any.whl"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def _artifact(url: str, body: bytes):
    import hashlib

    from aipc_env.lock.artifacts import Artifact

    return Artifact("pkg", "1.0", "pkg-1.0-py3-none-any.whl", url, None, hashlib.sha256(body).hexdigest())


@pytest.mark.parametrize("reset", [True, False], ids=["reset", "hung-up"])
@pytest.mark.parametrize("drops", [0, 1, 2])
def test_a_wheel_download_cut_mid_body_starts_again_and_the_file_checks_out(tmp_path, monkeypatch, drops, reset):
    from aipc_env.lock.artifacts import fill_wheelhouse

    monkeypatch.setattr("time.sleep", lambda _s: None)
    body = bytes(range(256)) * 4096  # 1 MiB
    with _Flaky(body, drops=drops, reset=reset) as server:
        (out,) = fill_wheelhouse(
            [_artifact(server.url, body)], tmp_path / "wh", lock_dir=tmp_path, cache=tmp_path / "cache", log=lambda _m: None
        )
        assert out.read_bytes() == body
        assert server.requests == 1 + drops + 1  # the host check's HEAD, then one GET per try


@pytest.mark.parametrize("reset", [True, False], ids=["reset", "hung-up"])
def test_a_download_that_keeps_failing_stops_at_the_bound_names_the_file_and_leaves_nothing(tmp_path, monkeypatch, reset):
    from aipc_env.errors import AipcError
    from aipc_env.lock.artifacts import fill_wheelhouse

    monkeypatch.setattr("time.sleep", lambda _s: None)
    body = bytes(range(256)) * 4096
    with _Flaky(body, drops=10**6, reset=reset) as server:
        monkeypatch.setattr("aipc_env.lock.artifacts.reachable", lambda _url: True)
        with pytest.raises(AipcError, match=r"cannot fetch pkg-1\.0-py3-none-any\.whl") as info:
            fill_wheelhouse(
                [_artifact(server.url, body)], tmp_path / "wh", lock_dir=tmp_path, cache=tmp_path / "cache", log=lambda _m: None
            )
        assert server.requests == net.TRANSIENT_TRIES == 3
    assert "--find-links" in (info.value.fix or "")
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]  # no .part left, nothing cached
    assert not (tmp_path / "wh" / "pkg-1.0-py3-none-any.whl").exists()


def test_a_reachability_probe_tries_again_before_it_says_a_host_cannot_be_reached(monkeypatch):
    seen = _calls(monkeypatch, [_gai(socket.EAI_AGAIN), _gai(socket.EAI_AGAIN)])
    assert net.reachable("https://files.example/x.whl") and len(seen) == 3
    seen = _calls(monkeypatch, [_gai(socket.EAI_AGAIN)] * 3)
    assert not net.reachable("https://files.example/x.whl") and len(seen) == 3
    seen = _calls(monkeypatch, [_gai(socket.EAI_NONAME)])
    assert not net.reachable("https://files.example/x.whl") and len(seen) == 1  # a name that does not exist: at once
    seen = _calls(monkeypatch, [urllib.error.HTTPError("https://files.example/", 405, "no HEAD", {}, None)])
    assert net.reachable("https://files.example/x.whl") and len(seen) == 1  # any answer is an answer


def test_a_reachability_probe_of_a_real_server_that_drops_the_first_connection(monkeypatch):
    monkeypatch.setattr("time.sleep", lambda _s: None)
    with _Flaky(b"x", drops=1, at_once=True) as server:
        assert net.reachable(server.url)
        assert server.requests == 2
    with _Flaky(b"x", drops=3, at_once=True) as server:
        assert not net.reachable(server.url)
        assert server.requests == 3


def test_a_download_refused_at_connect_counts_its_tries_once(tmp_path, monkeypatch):
    """The connection and the body share one count of tries: a server that resets every connection gets
    TRANSIENT_TRIES requests, not that many for each try of the body."""
    monkeypatch.setattr("time.sleep", lambda _s: None)
    with _Flaky(b"x", drops=10**6, at_once=True) as server:
        with pytest.raises(OSError):
            net.download(server.url, tmp_path / "x.whl", timeout=10)
        assert server.requests == net.TRANSIENT_TRIES
