"""What `container run` adds so the process in the image can open the GPU, read from the host: the numeric group
of each render and card node (a group *name* such as `render` resolves inside the image, to another number), the
rlimits podman cannot raise on this host, and who the process runs as. Pure given the host's files and limits."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from aipc_env.errors import InputError

__all__ = ["GpuNode", "device_nodes", "group_options", "rlimit_options", "user_options"]

PODMAN_DEFAULT_NOFILE = 1_048_576
"""What podman sets RLIMIT_NOFILE to in a container unless told; a host whose hard limit is lower makes it fail."""
RLIMITS = {"nofile": "RLIMIT_NOFILE", "nproc": "RLIMIT_NPROC"}


@dataclass(frozen=True)
class GpuNode:
    host: Path
    target: str
    gid: int
    mode: int


def _is_gpu_node(name: str) -> bool:
    return name.startswith(("renderD", "card"))


def device_nodes(devices: list[str]) -> list[GpuNode]:
    """The GPU nodes behind `--device HOST[:TARGET]` arguments (a folder such as /dev/dri is expanded): each with
    its host path, the path in the container and the host's numeric group."""
    found: list[GpuNode] = []
    for device in devices:
        host, _, target = device.partition(":")
        target = target.split(":", 1)[0] or host
        path = Path(host)
        if path.is_dir():
            children = sorted(p for p in path.iterdir() if _is_gpu_node(p.name))
            pairs = [(p, f"{target.rstrip('/')}/{p.name}") for p in children]
        else:
            pairs = [(path, target)] if _is_gpu_node(target.rsplit("/", 1)[-1]) else []
        for node, inside in pairs:
            try:
                st = node.stat()
            except OSError:
                continue
            found.append(GpuNode(node, inside, st.st_gid, stat.S_IMODE(st.st_mode)))
    return found


def group_options(nodes: list[GpuNode]) -> list[str]:
    """`--group-add GID` for each numeric group a node needs: nodes every user may open (0666) need none, and
    group 0 is never added (a root-only node is not opened by adding root's group)."""
    gids = sorted({n.gid for n in nodes if n.gid != 0 and (n.mode & 0o006) != 0o006})
    return [arg for gid in gids for arg in ("--group-add", str(gid))]


def rlimit_options(
    engine: str, run_options: list[str], hard_limit: Callable[[str], int] | None = None
) -> tuple[list[str], list[str]]:
    """(options, notes): podman raises RLIMIT_NOFILE to 1048576 in every container and fails where the host's hard
    limit is lower ("cannot raise rlimits"); set each limit to the host's hard limit instead, unless the user
    passed --ulimit for it."""
    if engine != "podman":
        return [], []
    import resource

    hard_limit = hard_limit or (lambda name: resource.getrlimit(getattr(resource, RLIMITS[name]))[1])
    given = " ".join(run_options)
    options, notes = [], []
    for name in RLIMITS:
        if f"{name}=" in given:
            continue
        hard = hard_limit(name)
        if hard == resource.RLIM_INFINITY or (name == "nofile" and hard >= PODMAN_DEFAULT_NOFILE):
            continue
        options.append(f"--ulimit={name}={hard}:{hard}")
        notes.append(f"{name} set to the host's hard limit {hard} (podman cannot raise it here)")
    return options, notes


def user_options(output: Path | None, *, allow_root: bool) -> list[str]:
    """Run as the output folder's owner, so what a run writes there belongs to them; never as root silently."""
    if output is None or not hasattr(os, "getuid"):
        return []
    st = output.stat()
    if st.st_uid == 0 and not allow_root:
        raise InputError(
            "the output folder is owned by root: the container would run as root",
            path=output,
            key="--output",
            fix="give the folder to the user who will read the results (chown), or "
            "pass --allow-root to run the container as root on purpose",
        )
    return ["--user", f"{st.st_uid}:{st.st_gid}"]
