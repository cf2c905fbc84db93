"""Reading a package index the way installers do: a project's files from its simple API page (PEP 691 JSON, else
the PEP 503 HTML page, with PEP 658/714 metadata attributes), and a file's core metadata from the `<file>.metadata`
the index serves beside it (checked against the hash the page gives), else from the wheel itself through HTTP range
requests (only the zip's directory and its METADATA member are read). Metadata is cached by the wheel's sha256:
the same bytes have the same metadata. Works on https:// indexes and local file:// stand-ins alike."""

from __future__ import annotations

import hashlib
import html.parser
import io
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name

from aipc_env.core.fileio import parse_json
from aipc_env.core.net import open_url
from aipc_env.errors import InputError
from aipc_env.lock.coremeta import MAX_METADATA_BYTES, CoreMetadata, MetadataError, parse_core_metadata

__all__ = ["IndexFile", "IndexReadError", "MetadataCache", "fetch_metadata", "project_files"]

ACCEPT = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.1"
MAX_PAGE_BYTES = 64 * 2**20
"""numpy's PEP 691 page is about 3 MB; a page past this is not an index page."""
TIMEOUT = 60.0


class IndexReadError(Exception):
    """An index page or file that cannot be read or does not check out; the message says which and why."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        """The HTTP status when the server answered with an error (404: the index has no such file or project)."""


@dataclass(frozen=True)
class IndexFile:
    filename: str
    url: str
    sha256: str | None
    metadata: str | bool | None
    """The sha256 of its PEP 658 metadata file when the page gives one, True when the page says there is one without
    a hash, False when it says there is none, None when the page says nothing."""


def _read(
    url: str, *, accept: str | None = None, limit: int, timeout: float = TIMEOUT, headers: dict[str, str] | None = None
) -> tuple[bytes, str]:
    """The body (at most `limit` bytes) and content type of a URL; a file:// folder reads its index.html."""
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme == "file":
        path = Path(urllib.request.url2pathname(parsed.path))
        if path.is_dir():
            path = path / "index.html"
        if not path.is_file():
            raise IndexReadError(f"{url}: not found", 404)
        with path.open("rb") as fh:
            data = fh.read(limit + 1)
        kind = "application/vnd.pypi.simple.v1+json" if path.suffix == ".json" else "text/html"
    else:
        request = urllib.request.Request(url, headers={**({"Accept": accept} if accept else {}), **(headers or {})})
        try:
            with open_url(request, timeout) as response:
                data = response.read(limit + 1)
                kind = response.headers.get("Content-Type", "")
        except urllib.error.HTTPError as exc:
            raise IndexReadError(f"{url}: HTTP {exc.code}", exc.code) from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise IndexReadError(f"{url}: {getattr(exc, 'reason', None) or exc}") from None
    if len(data) > limit:
        raise IndexReadError(f"{url}: larger than {limit // 2**20} MiB")
    return data, kind


class _Links(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.anchors: list[dict[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.anchors.append(dict(attrs))


def _metadata_attr(value: object) -> str | bool | None:
    """A PEP 658/714 attribute or PEP 691 key: "sha256=<hex>" / {"sha256": hex} / "true" / true / false."""
    if value is None:
        return None
    if isinstance(value, dict):
        return str(value["sha256"]).lower() if "sha256" in value else bool(value)
    if isinstance(value, bool):
        return value
    text = str(value)
    if text.startswith("sha256="):
        return text.split("=", 1)[1].lower()
    return text.lower() != "false"


def _parse_page(data: bytes, kind: str, page_url: str) -> dict[str, IndexFile]:
    files: dict[str, IndexFile] = {}
    if "json" in kind:
        try:
            page = parse_json(data.decode("utf-8"), page_url, "index page")
            entries = [
                (
                    f["filename"],
                    f["url"],
                    (f.get("hashes") or {}).get("sha256"),
                    _metadata_attr(f.get("core-metadata", f.get("data-dist-info-metadata"))),
                )
                for f in page["files"]
            ]
        except (ValueError, KeyError, TypeError, InputError) as exc:
            raise IndexReadError(f"{page_url}: not a PEP 691 project page ({getattr(exc, 'message', exc)})") from None
    else:
        parser = _Links()
        parser.feed(data.decode("utf-8", "replace"))
        entries = []
        for a in parser.anchors:
            href = a.get("href") or ""
            link, _, fragment = href.partition("#")
            name = urllib.parse.unquote(link.rsplit("/", 1)[-1])
            sha = fragment.split("=", 1)[1] if fragment.startswith("sha256=") else None
            meta = a.get("data-core-metadata", a.get("data-dist-info-metadata"))
            entries.append((name, link, sha, _metadata_attr(meta)))
    for name, link, sha, metadata in entries:
        files[name.replace("%2B", "+")] = IndexFile(
            name.replace("%2B", "+"), urllib.parse.urljoin(page_url, link), sha.lower() if sha else None, metadata
        )
    return files


def project_files(index_url: str, project: str) -> dict[str, IndexFile]:
    """The files of `project` on a simple index (file name -> IndexFile)."""
    page = f"{index_url.rstrip('/')}/{canonicalize_name(project)}/"
    data, kind = _read(page, accept=ACCEPT, limit=MAX_PAGE_BYTES)
    return _parse_page(data, kind, page)


class _RangeFile(io.RawIOBase):
    """A remote file read by HTTP range requests (what zipfile needs: seek, tell, read), in 64 KiB blocks kept once
    fetched: zipfile's many small reads of the directory and one member cost a few requests, not dozens."""

    BLOCK = 64 * 1024

    def __init__(self, url: str, size: int) -> None:
        self.url, self.size, self.pos = url, size, 0
        self._blocks: dict[int, bytes] = {}

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = {0: offset, 1: self.pos + offset, 2: self.size + offset}[whence]
        return self.pos

    def tell(self) -> int:
        return self.pos

    def _block(self, index: int) -> bytes:
        if index not in self._blocks:
            first = index * self.BLOCK
            last = min(self.size, first + self.BLOCK) - 1
            data, _ = _read(self.url, limit=self.BLOCK, headers={"Range": f"bytes={first}-{last}"})
            if len(data) != last - first + 1:
                raise IndexReadError(f"{self.url}: the server does not answer range requests")
            self._blocks[index] = data
        return self._blocks[index]

    def read(self, n: int = -1) -> bytes:
        end = self.size if n is None or n < 0 else min(self.size, self.pos + n)
        if end <= self.pos:
            return b""
        if end - self.pos > MAX_METADATA_BYTES + self.BLOCK:
            raise IndexReadError(f"{self.url}: a read of {end - self.pos} bytes is not a metadata read")
        out = bytearray()
        while self.pos < end:
            block = self._block(self.pos // self.BLOCK)
            start = self.pos % self.BLOCK
            piece = block[start : start + end - self.pos]
            out += piece
            self.pos += len(piece)
        return bytes(out)


def _size(url: str) -> int:
    try:
        with open_url(urllib.request.Request(url, method="HEAD"), TIMEOUT) as response:
            return int(response.headers["Content-Length"])
    except (urllib.error.URLError, OSError, ValueError, KeyError, TypeError) as exc:
        raise IndexReadError(f"{url}: {getattr(exc, 'reason', None) or exc}") from None


def _metadata_from_wheel(file: IndexFile) -> bytes:
    """The METADATA member of a wheel, read without downloading it (local files are opened directly)."""
    parsed = urllib.parse.urlparse(file.url)
    source: io.RawIOBase | Path
    if parsed.scheme == "file":
        source = Path(urllib.request.url2pathname(parsed.path))
    else:
        source = _RangeFile(file.url, _size(file.url))
    try:
        with zipfile.ZipFile(source) as zf:
            members = [i for i in zf.infolist() if i.filename.count("/") == 1 and i.filename.endswith(".dist-info/METADATA")]
            if len(members) != 1:
                raise IndexReadError(f"{file.url}: {len(members)} .dist-info/METADATA members, expected one")
            if members[0].file_size > MAX_METADATA_BYTES:
                raise IndexReadError(f"{file.url}: METADATA larger than {MAX_METADATA_BYTES // 2**20} MiB")
            return zf.read(members[0])
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise IndexReadError(f"{file.url}: not a readable wheel ({exc})") from None


class MetadataCache:
    """Core metadata files by the sha256 of the wheel they describe (<cache>/core-metadata/<sha256>.METADATA)."""

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder

    def _path(self, sha256: str) -> Path | None:
        if self.folder is None or len(sha256) != 64 or not all(c in "0123456789abcdef" for c in sha256):
            return None
        return self.folder / f"{sha256}.METADATA"

    def get(self, sha256: str) -> bytes | None:
        path = self._path(sha256)
        try:
            return path.read_bytes() if path is not None and path.is_file() else None
        except OSError:
            return None

    def put(self, sha256: str, data: bytes) -> None:
        path = self._path(sha256)
        if path is None:
            return
        from aipc_env.core.fileio import atomic_write_bytes

        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(path, data)
        except OSError:
            pass  # a cache that cannot be written only costs a refetch


def fetch_metadata(
    file: IndexFile, *, expect_sha256: str | None = None, cache: MetadataCache | None = None
) -> tuple[CoreMetadata, bytes]:
    """The core metadata of one index file, and its raw bytes. `expect_sha256` (the lock's hash) must be the hash the
    index gives for the file; the metadata file must match the hash the page gives for it."""
    wheel_sha = file.sha256
    if expect_sha256 and wheel_sha and wheel_sha != expect_sha256:
        raise IndexReadError(f"{file.filename}: the index gives sha256 {wheel_sha}, the lock {expect_sha256}")
    key = expect_sha256 or wheel_sha or ""
    raw = cache.get(key) if cache else None
    if raw is None:
        raw = None
        if file.metadata is not False:
            try:
                raw, _ = _read(file.url + ".metadata", limit=MAX_METADATA_BYTES)
            except IndexReadError:
                if file.metadata:  # the page promised it
                    raise
        if raw is not None and isinstance(file.metadata, str):
            got = hashlib.sha256(raw).hexdigest()
            if got != file.metadata:
                raise IndexReadError(f"{file.url}.metadata: sha256 {got}, the index page gives {file.metadata}")
        if raw is None:
            raw = _metadata_from_wheel(file)
    try:
        meta = parse_core_metadata(raw)
    except MetadataError as exc:
        raise IndexReadError(f"{file.filename}: {exc}") from None
    if cache and key:
        cache.put(key, raw)
    return meta, raw
