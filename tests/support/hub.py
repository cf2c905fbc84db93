"""A local stand-in of the Hugging Face Hub's HTTP API, for the real `huggingface_hub` client when the hub cannot be
reached: repo creation, the preupload and commit endpoints (every file "regular": its bytes travel base64 in the
commit, no LFS or Xet), and resolve (HEAD and GET) by branch or commit id. Repos live in memory.

It speaks the endpoints as huggingface_hub calls them (`_commit_api.py`, `file_download.py`); what it does not know
answers 404, so a client path it does not cover fails loudly. `fail` injects faults: "create" (HTTP 403 on repo
creation), "corrupt" (resolve serves other bytes than committed).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self
from urllib.parse import unquote, urlsplit


class Hub:
    def __init__(self) -> None:
        self.repos: dict[str, dict] = {}  # id -> {"commits": [(oid, {path: bytes})], "private": bool}
        self.fail: set[str] = set()
        self.requests: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def files(self, repo: str) -> dict[str, bytes]:
        return dict(self.repos[repo]["commits"][-1][1])

    def _handler(self):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def _send(self, code: int, body: bytes = b"", headers: dict | None = None, *, head: bool = False):
                self.send_response(code)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if not head:
                    self.wfile.write(body)

            def _json(self, code: int, data: dict) -> None:
                self._send(code, json.dumps(data).encode(), {"Content-Type": "application/json"})

            def _body(self) -> bytes:
                return self.rfile.read(int(self.headers.get("Content-Length", 0)))

            def do_POST(self) -> None:
                path = unquote(urlsplit(self.path).path)
                hub.requests.append(("POST", path))
                body = self._body()
                with hub._lock:
                    if path == "/api/repos/create":
                        if "create" in hub.fail:
                            return self._json(403, {"error": "You don't have the rights to create a model"})
                        data = json.loads(body)
                        repo = f"{data['organization']}/{data['name']}" if data.get("organization") else data["name"]
                        if repo in hub.repos:
                            return self._json(409, {"error": "You already created this model repo", "url": f"{hub.url}/{repo}"})
                        hub.repos[repo] = {"commits": [("0" * 40, {})], "private": bool(data.get("private"))}
                        return self._json(200, {"url": f"{hub.url}/{repo}", "name": repo})
                    m = re.fullmatch(r"/api/models/(.+)/(preupload|commit)/([^/]+)", path)
                    if not m or m.group(1) not in hub.repos:
                        return self._json(404, {"error": f"Repository not found: {path}"})
                    repo = m.group(1)
                    if m.group(2) == "preupload":
                        files = json.loads(body)["files"]
                        return self._json(
                            200, {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False} for f in files]}
                        )
                    files = dict(hub.repos[repo]["commits"][-1][1])
                    for line in body.splitlines():
                        item = json.loads(line)
                        if item["key"] == "file":
                            files[item["value"]["path"]] = base64.b64decode(item["value"]["content"])
                        elif item["key"] == "deletedFile":
                            files.pop(item["value"]["path"], None)
                        elif item["key"] != "header":
                            return self._json(400, {"error": f"unsupported commit operation {item['key']}"})
                    oid = hashlib.sha1(
                        repr(sorted(files.items())).encode() + str(len(hub.repos[repo]["commits"])).encode()
                    ).hexdigest()
                    hub.repos[repo]["commits"].append((oid, files))
                    return self._json(200, {"commitUrl": f"{hub.url}/{repo}/commit/{oid}", "commitOid": oid})

            def _resolve(self, head: bool) -> None:
                path = unquote(urlsplit(self.path).path)
                hub.requests.append(("HEAD" if head else "GET", path))
                m = re.fullmatch(r"/(.+?)/resolve/([^/]+)/(.+)", path)
                if not m or m.group(1) not in hub.repos:
                    return self._send(404, b"Repository not found", {"X-Error-Code": "RepoNotFound"}, head=head)
                commits = hub.repos[m.group(1)]["commits"]
                rev = m.group(2)
                found = commits[-1] if rev == "main" else next((c for c in commits if c[0] == rev), None)
                if found is None:
                    return self._send(404, b"Revision not found", {"X-Error-Code": "RevisionNotFound"}, head=head)
                data = found[1].get(m.group(3))
                if data is None:
                    return self._send(404, b"Entry not found", {"X-Error-Code": "EntryNotFound"}, head=head)
                etag = hashlib.sha1(data).hexdigest()
                if "corrupt" in hub.fail:
                    data = bytes(b ^ 0xFF for b in data)
                self._send(200, data, {"X-Repo-Commit": found[0], "ETag": f'"{etag}"'}, head=head)

            def do_HEAD(self) -> None:
                self._resolve(head=True)

            def do_GET(self) -> None:
                self._resolve(head=False)

        return Handler
