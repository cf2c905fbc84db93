"""YAML as Ansible itself reads it (its loader knows the !unsafe tag), in a child process: importing ansible patches
`sys.intern`, after which torch's dynamo refuses to import in the same process (a later test file on the same
xdist worker then fails for nothing it did)."""

from __future__ import annotations

import json
import subprocess
import sys

_CHILD = """
import json, sys
from ansible.parsing.dataloader import DataLoader
texts = json.load(sys.stdin)
json.dump([DataLoader().load(t) for t in texts], sys.stdout)
"""


def ansible_load_many(texts: list[str]) -> list:
    """Each text loaded by Ansible's DataLoader (one child for all of them)."""
    result = subprocess.run(
        [sys.executable, "-c", _CHILD], input=json.dumps(texts), capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def ansible_load(text: str):
    return ansible_load_many([text])[0]
