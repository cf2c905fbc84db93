"""The Windows collections for Ansible tests, taken from the PyPI `ansible` package (Galaxy is not reachable):
its wheel is downloaded once and only the collections the playbook uses are unpacked."""

from __future__ import annotations

import json
import shutil
import urllib.request
import zipfile
from pathlib import Path

ANSIBLE_RELEASE = "12.3.0"
COLLECTIONS = ("ansible/windows/",)


def collections_path(cache: Path) -> Path:
    """A collections folder holding ansible.windows (from ansible==12.3.0 on PyPI), cached under `cache`."""
    root = cache / f"ansible-{ANSIBLE_RELEASE}-collections"
    marker = root / ".complete"
    if marker.is_file():
        return root
    shutil.rmtree(root, ignore_errors=True)
    cache.mkdir(parents=True, exist_ok=True)
    request = urllib.request.Request(
        "https://pypi.org/simple/ansible/", headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    with urllib.request.urlopen(request, timeout=60) as r:
        files = json.load(r)["files"]
    wheel_url = next(f["url"] for f in files if f["filename"] == f"ansible-{ANSIBLE_RELEASE}-py3-none-any.whl")
    wheel = cache / wheel_url.rsplit("/", 1)[-1]
    if not wheel.is_file():
        part = wheel.with_suffix(".part")
        with urllib.request.urlopen(wheel_url, timeout=600) as r, part.open("wb") as fh:
            shutil.copyfileobj(r, fh, 1 << 20)
        part.rename(wheel)
    with zipfile.ZipFile(wheel) as zf:
        for name in zf.namelist():
            if name.startswith("ansible_collections/") and any(name.startswith("ansible_collections/" + c) for c in COLLECTIONS):
                zf.extract(name, root)
    marker.write_text(ANSIBLE_RELEASE)
    return root
