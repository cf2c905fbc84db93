"""One rule for the network: a request that failed for a passing reason (a DNS lookup answered "try again", a
reset or aborted connection, a time-out) is tried again, twice, after 0.5 s and then 1.5 s; a refusal (an HTTP
status, a name that does not exist, a TLS failure) is answered at once. Index reads, reachability probes and wheel
downloads all go through here."""

from __future__ import annotations

import http.client
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

__all__ = ["TRANSIENT_TRIES", "CutShort", "copy_body", "download", "is_transient", "open_url", "reachable"]

TRANSIENT_TRIES = 3
"""Attempts of a request that failed for a passing reason; a refusal is not retried."""
CHUNK = 1 << 20
T = TypeVar("T")


class CutShort(OSError):
    """A body that ended before the length its headers gave (the server or the network hung up early)."""


def is_transient(exc: BaseException) -> bool:
    """Whether a urllib/socket failure is one that may pass by itself."""
    if isinstance(exc, (CutShort, http.client.IncompleteRead)):
        return True
    reason = getattr(exc, "reason", exc)
    if isinstance(reason, socket.gaierror):
        return reason.errno == socket.EAI_AGAIN
    return isinstance(reason, (ConnectionResetError, ConnectionAbortedError, TimeoutError))


def _pause(attempt: int) -> None:
    time.sleep(0.5 + attempt)


def _with_retries(once: Callable[[], T]) -> T:
    """once() tried again while it fails for a passing reason, up to TRANSIENT_TRIES in all. http.client's own
    errors (IncompleteRead, BadStatusLine), which are not OSErrors, are raised as OSError so every caller catches
    one kind."""
    for attempt in range(TRANSIENT_TRIES):
        try:
            return once()
        except urllib.error.HTTPError:
            raise
        except http.client.HTTPException as exc:
            if attempt + 1 == TRANSIENT_TRIES or not is_transient(exc):
                raise OSError(f"{type(exc).__name__}: {exc}") from None
        except (urllib.error.URLError, OSError) as exc:
            if attempt + 1 == TRANSIENT_TRIES or not is_transient(exc):
                raise
        _pause(attempt)
    raise AssertionError("unreachable")


def open_url(request: urllib.request.Request | str, timeout: float) -> Any:
    """urllib's urlopen, tried again when it failed for a passing reason."""
    return _with_retries(lambda: urllib.request.urlopen(request, timeout=timeout))


def copy_body(response: Any, target: Path) -> int:
    """The body into target; its size. CutShort when it ends before its Content-Length: urllib's read(n) then
    returns a short body without a word, and http.client's own count (`length`, what is still owed) says so."""
    got = 0
    with target.open("wb") as fh:
        for block in iter(lambda: response.read(CHUNK), b""):
            fh.write(block)
            got += len(block)
    owed = getattr(response, "length", None)
    if isinstance(owed, int) and owed > 0:
        raise CutShort(f"the body ended after {got} bytes, {owed} short of its Content-Length")
    return got


def download(url: str, target: Path, timeout: float) -> None:
    """Write url's body to target (emptied first on every try); a connection or a body that fails for a passing
    reason starts the download again (one count of tries for both). Raises urllib.error.URLError or OSError
    (CutShort included) when it cannot, ValueError for a URL urllib cannot open."""

    def once() -> None:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            copy_body(response, target)

    _with_retries(once)


def reachable(url: str, timeout: float = 8.0) -> bool:
    """Whether a URL answers at all (any HTTP status counts; a DNS, connection or TLS failure that persists past
    the retries does not). A file:// URL is there when its path is."""
    if url.startswith("file:"):  # a local index (mirrors, tests): there when its folder is
        from urllib.parse import unquote, urlparse

        return Path(unquote(urlparse(url).path)).exists()
    try:
        with open_url(urllib.request.Request(url, method="HEAD"), timeout):
            return True
    except urllib.error.HTTPError:
        return True
    except (urllib.error.URLError, OSError, ValueError):
        return False
