"""The container engines (podman, buildah, docker): which one is here, the exact command lines aipc-env runs with
them (pure builders, asserted by tests), and the few steps that run them (through aipc_env.core.procs)."""

from __future__ import annotations

import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from aipc_env.core.fileio import loads_json
from aipc_env.core.procs import ProbeFailed, run_capture, run_logged
from aipc_env.errors import AipcError, ExitCode, InputError

__all__ = [
    "BASE_PACKAGES",
    "ENGINES",
    "Engine",
    "base_from_mirror",
    "build_argv",
    "debian_mirror",
    "find_engine",
    "image_id",
    "image_labels",
    "mounted_image",
    "run_argv",
]

ENGINES = ("podman", "buildah", "docker")
BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates", "usr-is-merged")


@dataclass(frozen=True)
class Engine:
    name: str
    path: str


def find_engine(prefer: str | None = None, *, can_run: bool = False) -> Engine:
    """The first engine found (podman, buildah, docker); buildah cannot run images with devices (`can_run`)."""
    names = [prefer] if prefer else [n for n in ENGINES if not (can_run and n == "buildah")]
    for name in names:
        path = shutil.which(name)
        if path:
            return Engine(name, path)
    raise AipcError(
        f"no container engine found (looked for {', '.join(names)})",
        exit_code=ExitCode.USAGE,
        fix="install podman (apt install podman runc, or Podman Desktop on Windows) or buildah",
    )


def build_argv(engine: Engine, context: Path, tag: str) -> list[str]:
    """Reproducible: chroot isolation (works in unprivileged CI too), layer cache, every timestamp 0 and
    SOURCE_DATE_EPOCH=0 (pip then writes hash-checked .pyc files, the same in every build)."""
    if engine.name == "docker":
        return [
            engine.path,
            "build",
            "--build-arg",
            "SOURCE_DATE_EPOCH=0",
            "-f",
            str(context / "Containerfile"),
            "-t",
            tag,
            str(context),
        ]
    verb = ["bud"] if engine.name == "buildah" else ["build"]
    return [
        engine.path,
        *verb,
        "--isolation",
        "chroot",
        "--layers",
        "--timestamp",
        "0",
        "--build-arg",
        "SOURCE_DATE_EPOCH=0",
        "-f",
        str(context / "Containerfile"),
        "-t",
        tag,
        str(context),
    ]


def run_argv(
    engine: Engine,
    image: str,
    command: list[str],
    *,
    devices: list[str],
    mounts: list[tuple[Path, str, bool]],
    network: str = "none",
    engine_options: Sequence[str] = (),
    run_options: Sequence[str] = (),
    groups: Sequence[str] = (),
    ipc_host: bool = False,
) -> list[str]:
    """`<engine> run` with the GPU passed in (`--device` and the host's numeric groups of its nodes), the folders
    mounted (read-only where marked), no network unless asked, the host's IPC namespace only when asked."""
    argv = [engine.path, *engine_options, "run", "--rm"]
    for device in devices:
        argv += ["--device", device]
    argv += [*groups, "--network", network]
    if ipc_host:
        argv += ["--ipc=host"]
    for host, target, read_only in mounts:
        if ":" in str(host) or ":" in target:  # -v reads HOST:TARGET:OPTIONS; `out:ro` would mount read-only
            raise InputError(
                "a folder whose path holds ':' cannot be mounted: podman and docker read ':' as the "
                "separator of -v HOST:TARGET:OPTIONS",
                path=host,
                fix="choose a folder without ':' in its path",
            )
        argv += ["-v", f"{host}:{target}" + (":ro" if read_only else "")]
    return argv + [*run_options, image, *command]


def debian_mirror(
    sources: tuple[Path, ...] = (Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list")),
) -> str:
    """The distro mirror this machine uses (deb822 `URIs:` or a one-line `deb URL suite`)."""
    for path in sources:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError:
            continue
        for line in text.splitlines():
            line = line.strip()
            match = re.match(r"^URIs:\s*(\S+)", line) or re.match(r"^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+\S+", line)
            if match and "security" not in match.group(1):
                return match.group(1)
    return "http://deb.debian.org/debian"


def base_from_mirror(engine: Engine, tag: str, work: Path, log: Path, *, suite: str = "trixie", mirror: str | None = None) -> str:
    """Bootstrap a Debian base image offline of any registry: mmdebstrap from the distro mirror into a tarball
    (identical run to run with SOURCE_DATE_EPOCH=0), then a scratch image committed with timestamp 0."""
    import os

    mmdebstrap = shutil.which("mmdebstrap")
    if not mmdebstrap:
        raise AipcError("--base-from-mirror needs mmdebstrap", fix="apt install mmdebstrap")
    buildah = shutil.which("buildah")
    if not buildah:
        raise AipcError("--base-from-mirror needs buildah to make the tarball an image", fix="apt install buildah")
    work.mkdir(parents=True, exist_ok=True)
    tarball = work / f"{suite}-base.tar"
    env = dict(os.environ, SOURCE_DATE_EPOCH="0")
    run_logged(
        [
            mmdebstrap,
            "--mode=root",
            "--variant=minbase",
            f"--include={','.join(BASE_PACKAGES)}",
            suite,
            str(tarball),
            mirror or debian_mirror(),
        ],
        log,
        env=env,
        echo=False,
    )
    ctr = run_logged([buildah, "from", "scratch"], log, echo=False).strip().splitlines()[-1]
    try:
        run_logged([buildah, "add", ctr, str(tarball), "/"], log, echo=False)
        run_logged(
            [
                buildah,
                "config",
                "--env",
                "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "--env",
                "LANG=C.UTF-8",
                ctr,
            ],
            log,
            echo=False,
        )
        run_logged([buildah, "commit", "--timestamp", "0", ctr, tag], log, echo=False)
    finally:
        run_logged([buildah, "rm", ctr], log, echo=False)
    tarball.unlink(missing_ok=True)
    return tag


def image_id(engine: Engine, image: str) -> str:
    tool = shutil.which("buildah") if engine.name in ("podman", "buildah") else engine.path
    argv = (
        [tool, "inspect", "--type", "image", "--format", "{{.FromImageID}}", image]
        if tool and tool.endswith("buildah")
        else [engine.path, "image", "inspect", "--format", "{{.Id}}", image]
    )
    try:
        return run_capture(argv, timeout=60).stdout.strip().removeprefix("sha256:")
    except ProbeFailed as exc:
        raise InputError(f"no image {image}: {exc}", fix="build it: aipc-env container build") from None


def image_labels(image: str) -> dict[str, str]:
    buildah = shutil.which("buildah")
    if not buildah:
        raise AipcError("reading an image needs buildah", fix="apt install buildah")
    try:
        out = run_capture([buildah, "inspect", "--type", "image", image], timeout=60).stdout
    except ProbeFailed as exc:
        raise InputError(f"no image {image}: {exc}", fix="build it: aipc-env container build") from None
    return labels_of(loads_json(out))


def labels_of(data: object) -> dict[str, str]:
    """The labels in `buildah inspect`'s output (another program's JSON: any other shape is no labels)."""
    oci = data.get("OCIv1") if isinstance(data, dict) else None
    config = oci.get("config") if isinstance(oci, dict) else None
    labels = config.get("Labels") if isinstance(config, dict) else None
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}


class mounted_image:
    """`with mounted_image(image) as root:` the image's file system, read through a throw-away working container
    (buildah from + mount; nothing in the image runs)."""

    def __init__(self, image: str, log: Path):
        self.image, self.log = image, log
        buildah = shutil.which("buildah")
        if not buildah:
            raise AipcError("reading an image needs buildah", fix="apt install buildah")
        self.buildah: str = buildah
        self.ctr: str | None = None

    def __enter__(self) -> Path:
        try:
            self.ctr = (
                run_capture([self.buildah, "from", "--pull-never", self.image], timeout=120).stdout.strip().splitlines()[-1]
            )
            return Path(run_capture([self.buildah, "mount", self.ctr], timeout=60).stdout.strip())
        except ProbeFailed as exc:
            self.__exit__(None, None, None)
            raise InputError(f"cannot open the image {self.image}: {exc}", fix="check the name: buildah images") from None

    def __exit__(self, *exc: object) -> None:
        if self.ctr:
            for argv in ([self.buildah, "umount", self.ctr], [self.buildah, "rm", self.ctr]):
                try:
                    run_capture(argv, timeout=60)
                except ProbeFailed:
                    pass
            self.ctr = None
