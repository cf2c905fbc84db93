"""`aipc-env container render | build | run | check`: the training env as a reproducible OCI image."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from aipc_env.commands.options import (
    JSON,
    LOCK_ROOT,
    MATRIX,
    PAIR,
    Subparsers,
    add_find_links,
    lock_root,
    output_folder,
    python_minor,
)
from aipc_env.commands.result import Result, progress
from aipc_env.container.inputs import DEFAULT_BASE
from aipc_env.errors import ExitCode

if TYPE_CHECKING:
    from aipc_env.container.build import ContextRequest, ImageLock

__all__ = ["add_parser", "run"]


def _source(p: argparse.ArgumentParser) -> None:
    """--pair (lockfiles/<pair>/pylock.linux-64.toml) or --lock PYLOCK, not both (checked in _lock_of)."""
    p.add_argument(
        "--lock",
        type=Path,
        metavar="PYLOCK",
        help="use this linux-64 pylock instead of the pair's lock (e.g. a CPU lock); not with --pair",
    )


def _context_options(p: argparse.ArgumentParser) -> None:
    from aipc_env.container.render import GPU_RUNTIMES

    _source(p)
    p.add_argument(
        "--base",
        default=DEFAULT_BASE,
        metavar="IMAGE",
        help="base image with python3 and python3-venv (default: localhost/aipc-base:trixie, Debian 13, "
        "made by --base-from-mirror; Debian 12 cannot run Intel's current GPU runtime: glibc 2.36)",
    )
    p.add_argument(
        "--gpu-runtime",
        choices=list(GPU_RUNTIMES),
        default="intel-apt",
        help="install the Intel GPU user space (Level Zero loader, compute runtime, OpenCL ICD) with apt "
        "(default), or nothing (CPU images, tests)",
    )
    p.add_argument(
        "--gpu-runtime-source",
        metavar="APT-LINE",
        help="one apt source line for the GPU packages: Intel's graphics repository, client channel "
        "for Core Ultra and Arc ('deb [arch=amd64] https://repositories.intel.com/gpu/ubuntu noble "
        "client'); needs --gpu-runtime-key and its fingerprint; trusted=yes is refused",
    )
    p.add_argument(
        "--gpu-runtime-key",
        type=Path,
        metavar="FILE",
        help="the public key that signs that source (armored or binary); it becomes the source's only signed-by key",
    )
    p.add_argument(
        "--gpu-runtime-key-fingerprint",
        metavar="FPR",
        help="the key's OpenPGP fingerprint, pinned: a key file with another fingerprint is refused",
    )
    p.add_argument(
        "--python",
        type=python_minor,
        default=None,
        metavar="X.Y",
        help="the base image's Python, which the lock must cover (default: the base's, from "
        "environments/gpu-runtime.yaml: 3.13 on Debian 13, 3.12 on Ubuntu 24.04, 3.11 on Debian 12)",
    )
    p.add_argument("--out", type=output_folder, metavar="DIR", help="the build context folder (default: per-user cache)")


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "container",
        help="the training env as an OCI image: render, build, run, check",
        description="Render a build context from a lock, build it reproducibly with podman, buildah "
        "or docker, run it with the GPU passed in, and check an image against a lock.",
    )
    inner = p.add_subparsers(dest="container_command", metavar="ACTION", required=True)
    r = inner.add_parser("render", parents=[JSON, PAIR, LOCK_ROOT, MATRIX], help="write the build context")
    _context_options(r)
    b = inner.add_parser("build", parents=[JSON, PAIR, LOCK_ROOT, MATRIX], help="render, fetch the wheels, build the image")
    _context_options(b)
    b.add_argument("--engine", choices=["podman", "buildah", "docker"], help="default: the first one found")
    b.add_argument("--tag", metavar="NAME", help="image name (default: localhost/aipc-env:<pair>)")
    b.add_argument(
        "--base-from-mirror",
        action="store_true",
        help="first bootstrap the Debian base from the distro mirror (no registry needed)",
    )
    add_find_links(b)
    x = inner.add_parser(
        "run",
        parents=[JSON, PAIR, MATRIX],
        help="run the image with /dev/dri, its numeric groups and no network",
        description="Run the image: the GPU device passed in with the host's numeric group of each "
        "render and card node (a group name resolves inside the image, to another number), "
        "dataset/models read-only and the output folder mounted (the run is its owner; root only "
        "with --allow-root), --network none unless asked. With podman, rlimits the host cannot "
        "raise are set to its hard limits (pass --run-option=--ulimit=... to choose). Prints the "
        "exact command. `aipc-env container run -- train` is the image form of `nox -s train`.",
    )
    x.add_argument(
        "--image",
        metavar="NAME",
        help="the image (default: localhost/aipc-env:<pair>, the tag `container build` gives the pair: --pair, else the "
        "newest supported)",
    )
    x.add_argument("--engine", choices=["podman", "docker"], help="default: the first one found")
    x.add_argument("--device", action="append", metavar="DEV", help="device to pass in (default /dev/dri)")
    x.add_argument(
        "--dev-root",
        type=Path,
        default=Path("/dev"),
        metavar="DIR",
        help="where the host's device nodes are (default /dev): the render nodes under DIR/dri are passed "
        "in, with their numeric groups",
    )
    x.add_argument(
        "--ipc-host",
        action="store_true",
        help="share the host's IPC namespace (--ipc=host; Intel's recipes use it for shared memory)",
    )
    x.add_argument(
        "--allow-root",
        action="store_true",
        help="accept running as root when the output folder is owned by root (refused otherwise)",
    )
    x.add_argument("--dataset", type=Path, metavar="DIR", help="mounted read-only at /data")
    x.add_argument("--models", type=Path, metavar="DIR", help="mounted read-only at /models")
    x.add_argument(
        "--output",
        type=output_folder,
        metavar="DIR",
        help="mounted read-write at /output (runs write there, as the folder's owner)",
    )
    x.add_argument("--network", default="none", help="container network (default: none)")
    x.add_argument(
        "--engine-option",
        action="append",
        default=[],
        metavar="OPT",
        help="an option for the engine itself, before `run` (e.g. --runtime=runc)",
    )
    x.add_argument(
        "--run-option",
        action="append",
        default=[],
        metavar="OPT",
        help="an extra option of `run` (e.g. --ulimit=nofile=20000:20000)",
    )
    x.add_argument("--dry-run", action="store_true", help="print the command; run nothing")
    x.add_argument("cmd", nargs=argparse.REMAINDER, help="the aipc-env command to run in the image (after --)")
    c = inner.add_parser("check", parents=[JSON, PAIR, LOCK_ROOT, MATRIX], help="compare an image's packages with a lock")
    c.add_argument("image", help="the image to check")
    _source(c)
    for q in (r, b, x, c):
        q.set_defaults(run=run)


def _lock(args: argparse.Namespace) -> ImageLock:
    from aipc_env.container.image import image_lock

    return image_lock(lock=args.lock, pair_flag=args.pair, lock_root=lock_root(args), matrix_path=args.matrix)


def _context(args: argparse.Namespace) -> ContextRequest:
    from aipc_env.container.build import ContextRequest

    return ContextRequest(
        lock=_lock(args),
        out=args.out,
        base=args.base,
        gpu_runtime=args.gpu_runtime,
        gpu_runtime_source=args.gpu_runtime_source,
        gpu_runtime_key=args.gpu_runtime_key,
        gpu_runtime_key_fingerprint=args.gpu_runtime_key_fingerprint,
        python=args.python,
    )


def run(args: argparse.Namespace) -> Result:
    commands: dict[str, Callable[[argparse.Namespace], Result]] = {
        "render": _cmd_render,
        "build": _cmd_build,
        "run": _cmd_run,
        "check": _cmd_check,
    }
    return commands[args.container_command](args)


def _cmd_render(args: argparse.Namespace) -> Result:
    from aipc_env.container.image import render_from_lock

    rendered = render_from_lock(_context(args))
    spec = rendered.spec
    return Result(
        spec, lambda: print(f"wrote the build context for {spec.pair} to {rendered.out} ({len(spec.wheels)} wheels named)")
    )


def _cmd_build(args: argparse.Namespace) -> Result:
    from aipc_env.container.image import ImageBuild, build_from_lock

    report = build_from_lock(
        ImageBuild(
            _context(args),
            engine=args.engine,
            tag=args.tag,
            base_from_mirror=args.base_from_mirror,
            find_links=list(args.find_links),
        ),
        progress(args).say,
    )
    return Result(report, lambda: print(f"built {report.image} ({report.image_id[:12]}) in {report.seconds:.0f} s"))


def _cmd_run(args: argparse.Namespace) -> Result:
    from aipc_env.container.image import default_image
    from aipc_env.container.run import ContainerRun, ContainerRunReport, plan_container_run
    from aipc_env.core.procs import command_line, run_foreground

    image = args.image or default_image(pair_flag=args.pair, matrix_path=args.matrix)
    engine, argv, notes = plan_container_run(
        ContainerRun(
            image=image,
            cmd=list(args.cmd),
            engine=args.engine,
            devices=list(args.device or []),
            dev_root=args.dev_root,
            dataset=args.dataset,
            models=args.models,
            output=args.output,
            network=args.network,
            ipc_host=args.ipc_host,
            allow_root=args.allow_root,
            engine_options=list(args.engine_option),
            run_options=list(args.run_option),
        )
    )
    channel = progress(args)
    for note in notes:
        (channel.warn if note.startswith("warning:") else channel.note)(f"aipc-env: {note}")
    channel.note(f"aipc-env: {command_line(argv)}")
    code = ExitCode.OK if args.dry_run else run_foreground(argv, cwd=Path.cwd(), stdout=channel.stream)
    report = ContainerRunReport(
        image=image, engine=engine, argv=argv, command_line=command_line(argv), notes=notes, dry_run=args.dry_run, exit_code=code
    )
    return Result(report, None, code)


def _cmd_check(args: argparse.Namespace) -> Result:
    from aipc_env.container.build import check_image
    from aipc_env.paths import log_path

    lockfile = _lock(args).path
    log = log_path("container-check")
    report = check_image(args.image, lockfile, log)

    def text() -> None:
        if report.clean:
            print(f"{args.image} matches {lockfile}")
            return
        if report.lock_sha256 != report.image_lock_sha256:
            print(
                f"{args.image} was built from another lock (sha256 {str(report.image_lock_sha256)[:12]}, this one "
                f"{report.lock_sha256[:12]})"
            )
        for d in report.drift:
            print(f"  {d.kind:8} {d.describe()}")

    return Result(report, text, ExitCode.OK if report.clean else ExitCode.PROBLEMS)
