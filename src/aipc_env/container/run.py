"""`container run`: the engine's command line for an image with the GPU passed in (device nodes and their numeric
groups, rlimits the host cannot raise, the output folder's owner, read-only inputs, no network unless asked), and
what a run reports."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal

from aipc_env.core.formats import VersionedModel
from aipc_env.errors import InputError

__all__ = ["ContainerRun", "ContainerRunReport", "plan_container_run"]


@dataclass(frozen=True)
class ContainerRun:
    image: str
    cmd: list[str]
    engine: str | None = None
    devices: list[str] = field(default_factory=list)
    """Device specs (HOST[:TARGET]); empty: DIR/dri of dev_root."""
    dev_root: Path = Path("/dev")
    dataset: Path | None = None
    models: Path | None = None
    output: Path | None = None
    network: str = "none"
    ipc_host: bool = False
    allow_root: bool = False
    engine_options: list[str] = field(default_factory=list)
    run_options: list[str] = field(default_factory=list)


class ContainerRunReport(VersionedModel):
    """`aipc-env container run --json`: the command it ran (or would run) and its exit code."""

    FORMAT: ClassVar[str] = "container run report"
    schema_version: Literal[1] = 1
    image: str
    engine: str
    argv: list[str]
    command_line: str
    notes: list[str] = []
    """Warnings and the rlimits chosen, also said on stderr."""
    dry_run: bool
    exit_code: int


def plan_container_run(run: ContainerRun) -> tuple[str, list[str], list[str]]:
    """The engine's name, its argv and the notes for people (a missing render node, the rlimits set)."""
    from aipc_env.container.engine import find_engine, run_argv
    from aipc_env.container.gpu_access import device_nodes, group_options, rlimit_options, user_options

    engine = find_engine(run.engine, can_run=True)
    cmd = list(run.cmd)
    if cmd[:1] == ["--"]:
        cmd = cmd[1:]
    mounts: list[tuple[Path, str, bool]] = []
    for folder, target, ro in ((run.dataset, "/data", True), (run.models, "/models", True), (run.output, "/output", False)):
        if folder is not None:
            if not folder.is_dir():
                raise InputError("not a folder", path=folder, fix="create it or pass another folder")
            mounts.append((folder.resolve(), target, ro))
    if cmd[:1] == ["train"] and len(cmd) > 1 and Path(cmd[1]).is_file():  # the config goes in read-only
        config = Path(cmd[1]).resolve()
        mounts.append((config.parent, "/config", True))
        cmd[1] = f"/config/{config.name}"
    devices = run.devices or [f"{run.dev_root / 'dri'}:/dev/dri" if run.dev_root != Path("/dev") else "/dev/dri"]
    nodes = device_nodes(devices)
    notes = []
    if not any(n.target.rsplit("/", 1)[-1].startswith("renderD") for n in nodes):
        notes.append(f"warning: no render node among {', '.join(devices)}: the container will see no GPU")
    limits, limit_notes = rlimit_options(engine.name, run.run_options)
    notes += limit_notes
    argv = run_argv(
        engine,
        run.image,
        cmd,
        devices=devices,
        mounts=mounts,
        network=run.network,
        engine_options=run.engine_options,
        run_options=[*user_options(run.output, allow_root=run.allow_root), *limits, *run.run_options],
        groups=group_options(nodes),
        ipc_host=run.ipc_host,
    )
    return engine.name, argv, notes
