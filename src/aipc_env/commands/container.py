"""`aipc-env container render | build | run | check`: the training env as a reproducible OCI image."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from aipc_env.commands.options import JSON, LOCK_ROOT, MATRIX, PAIR, lock_root, output_folder, python_minor
from aipc_env.commands.result import Result, progress
from aipc_env.errors import ExitCode

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
    _source(p)
    p.add_argument(
        "--base",
        default="localhost/aipc-base:trixie",
        metavar="IMAGE",
        help="base image with python3 and python3-venv (default: localhost/aipc-base:trixie, Debian 13, "
        "made by --base-from-mirror; Debian 12 cannot run Intel's current GPU runtime: glibc 2.36)",
    )
    p.add_argument(
        "--gpu-runtime",
        choices=["intel-apt", "none"],
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


def add_parser(sub: argparse._SubParsersAction) -> None:
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
    b.add_argument(
        "--find-links",
        type=Path,
        action="append",
        default=[],
        metavar="DIR",
        help="folders holding the lock's wheels (searched before their URLs)",
    )
    x = inner.add_parser(
        "run",
        help="run the image with /dev/dri, its numeric groups and no network",
        description="Run the image: the GPU device passed in with the host's numeric group of each "
        "render and card node (a group name resolves inside the image, to another number), "
        "dataset/models read-only and the output folder mounted (the run is its owner; root only "
        "with --allow-root), --network none unless asked. With podman, rlimits the host cannot "
        "raise are set to its hard limits (pass --run-option=--ulimit=... to choose). Prints the "
        "exact command. `aipc-env container run -- train` is the image form of `nox -s train`.",
    )
    x.add_argument("--image", default="localhost/aipc-env:xpu-2.13", help="the image (default: %(default)s)")
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


def _lockfile(args: argparse.Namespace) -> tuple[Path, str]:
    from aipc_env.errors import InputError
    from aipc_env.lock.lockfile import pylock_path
    from aipc_env.matrix import load_matrix

    if args.lock and getattr(args, "pair", None):
        raise InputError(
            "--pair and --lock name two locks; give one",
            key="--lock",
            fix="--pair ID uses lockfiles/<ID>/pylock.linux-64.toml; --lock PYLOCK uses that file",
        )
    if args.lock:
        if not args.lock.is_file():
            raise InputError("lockfile not found", path=args.lock, key="--lock")
        return args.lock, "custom"
    from aipc_env.trainenv.select import decide
    from aipc_env.trainenv.situation import situation_for

    situation = situation_for("target", load_matrix(getattr(args, "matrix", None)), "linux-64", pair_flag=args.pair)
    pair = decide(situation, "target").pair.pair
    assert pair is not None
    path = pylock_path(lock_root(args) / pair.id, "linux-64")
    if not path.is_file():
        raise InputError(
            f"no linux-64 lock for {pair.id}", path=path, fix=f"make one: nox -s lock -- --pair {pair.id}, or pass --lock PYLOCK"
        )
    return path, pair.id


def _render(args: argparse.Namespace):
    from aipc_env.container.build import RenderRequest, render_context
    from aipc_env.paths import cache_dir

    lockfile, pair = _lockfile(args)
    out = args.out or cache_dir() / "images" / pair
    python = args.python or _base_python(args.base)
    return (
        render_context(
            RenderRequest(
                lockfile=lockfile,
                pair=pair,
                out=out,
                base=args.base,
                gpu_runtime=args.gpu_runtime,
                gpu_runtime_source=args.gpu_runtime_source,
                gpu_runtime_key=args.gpu_runtime_key,
                gpu_runtime_key_fingerprint=args.gpu_runtime_key_fingerprint,
                python=python,
            )
        ),
        out,
        lockfile,
    )


def _base_python(base: str) -> str:
    """The python3 of a base image the distribution table knows (else the user says it)."""
    from aipc_env.errors import InputError
    from aipc_env.matrix.gpu_runtime import distribution_of_image, load_gpu_runtime

    python = load_gpu_runtime().python_of(distribution_of_image(base))
    if python is None:
        raise InputError(
            f"the Python of {base} is not known", key="--python", fix="pass the base image's python3 version, e.g. --python 3.12"
        )
    return python


def run(args: argparse.Namespace) -> int | Result:
    return {"render": _cmd_render, "build": _cmd_build, "run": _cmd_run, "check": _cmd_check}[args.container_command](args)


def _cmd_render(args: argparse.Namespace) -> Result:
    (spec, _), out, _ = _render(args)
    return Result(spec, lambda: print(f"wrote the build context for {spec.pair} to {out} ({len(spec.wheels)} wheels named)"))


def _cmd_build(args: argparse.Namespace) -> Result:
    import time

    from aipc_env.container.build import ImageBuildReport, build_aipc_wheel, build_image
    from aipc_env.container.engine import base_from_mirror, find_engine
    from aipc_env.lock.artifacts import fill_wheelhouse
    from aipc_env.paths import cache_dir, log_path

    start = time.perf_counter()
    engine = find_engine(args.engine)
    log = log_path("container-build")
    say = progress(args).say
    (spec, artifacts), out, lockfile = _render(args)  # the lock and every input are checked before any long step
    if args.base_from_mirror:
        say(f"bootstrapping {args.base} from the distro mirror (log {log})")
        base_from_mirror(engine, args.base, cache_dir() / "images" / "base", log, suite=_suite_of(args.base))
    say(f"fetching {len(artifacts)} wheels (sha256-checked) into {out / 'wheels'}")
    fill_wheelhouse(
        artifacts, out / "wheels", lock_dir=lockfile.parent, cache=cache_dir() / "wheels", find_links=args.find_links, log=say
    )
    build_aipc_wheel(out / "wheels", log)
    tag = args.tag or f"localhost/aipc-env:{spec.pair}"
    say(f"building {tag} with {engine.name} (log {log})")
    ident = build_image(engine, out, tag, log)
    report = ImageBuildReport(
        image=tag,
        image_id=ident,
        engine=engine.name,
        context=str(out),
        spec=spec,
        seconds=round(time.perf_counter() - start, 1),
        log=str(log),
    )
    return Result(report, lambda: print(f"built {tag} ({ident[:12]}) in {report.seconds:.0f} s"))


def _suite_of(base: str) -> str:
    """The Debian suite --base-from-mirror bootstraps for a base tag (…:trixie, …:bookworm)."""
    from aipc_env.errors import InputError
    from aipc_env.matrix.gpu_runtime import distribution_of_image

    suites = {"debian-13": "trixie", "debian-12": "bookworm"}
    suite = suites.get(distribution_of_image(base) or "")
    if suite is None:
        raise InputError(
            f"--base-from-mirror bootstraps Debian from the distro mirror; {base} names no Debian suite",
            key="--base",
            fix="name it localhost/aipc-base:trixie (or :bookworm)",
        )
    return suite


def _cmd_run(args: argparse.Namespace) -> int:
    from aipc_env.container.engine import find_engine, run_argv
    from aipc_env.container.gpu_access import device_nodes, group_options, rlimit_options, user_options
    from aipc_env.core.procs import command_line, run_foreground
    from aipc_env.errors import InputError

    engine = find_engine(args.engine, can_run=True)
    cmd = list(args.cmd)
    if cmd[:1] == ["--"]:
        cmd = cmd[1:]
    mounts: list[tuple[Path, str, bool]] = []
    for folder, target, ro in ((args.dataset, "/data", True), (args.models, "/models", True), (args.output, "/output", False)):
        if folder is not None:
            if not folder.is_dir():
                raise InputError("not a folder", path=folder, fix="create it or pass another folder")
            mounts.append((folder.resolve(), target, ro))
    if cmd[:1] == ["train"] and len(cmd) > 1 and Path(cmd[1]).is_file():  # the config goes in read-only
        config = Path(cmd[1]).resolve()
        mounts.append((config.parent, "/config", True))
        cmd[1] = f"/config/{config.name}"
    devices = args.device or [f"{args.dev_root / 'dri'}:/dev/dri" if args.dev_root != Path("/dev") else "/dev/dri"]
    nodes = device_nodes(devices)
    if not any(n.target.rsplit("/", 1)[-1].startswith("renderD") for n in nodes):
        print(f"aipc-env: warning: no render node among {', '.join(devices)}: the container will see no GPU", file=sys.stderr)
    limits, notes = rlimit_options(engine.name, args.run_option)
    for note in notes:
        print(f"aipc-env: {note}", file=sys.stderr)
    run_options = [*user_options(args.output, allow_root=args.allow_root), *limits, *args.run_option]
    argv = run_argv(
        engine,
        args.image,
        cmd,
        devices=devices,
        mounts=mounts,
        network=args.network,
        engine_options=args.engine_option,
        run_options=run_options,
        groups=group_options(nodes),
        ipc_host=args.ipc_host,
    )
    print(f"aipc-env: {command_line(argv)}", file=sys.stderr)
    if args.dry_run:
        return ExitCode.OK
    return run_foreground(argv, cwd=Path.cwd())


def _cmd_check(args: argparse.Namespace) -> Result:
    from aipc_env.container.build import check_image
    from aipc_env.paths import log_path

    lockfile, _ = _lockfile(args)
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
