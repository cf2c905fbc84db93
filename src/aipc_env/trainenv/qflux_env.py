"""The qflux env: a venv with the clone's requirements as `patch-requirements` makes them, plus the pair's torch
from this machine's torch source (the XPU build on an Intel GPU machine; the CPU build elsewhere). Built once per
requirements digest into the aipc-env cache, with uv, by the run service. Used to run the clone's own loader and
the smoke run."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from aipc_env.matrix import Pair
from aipc_env.trainenv.record import EnvRecord

__all__ = ["ensure_qflux_env", "qflux_requirements", "record_path"]

STAMP = ".aipc-qflux-env"
RECORD = ".aipc-env.json"


def qflux_requirements(clone: Path, pair: Pair, torch_requirement: str, *, torchvision: bool) -> str:
    """The clone's requirements.txt after patch-requirements, with the XPU torch block replaced by the torch this
    machine installs (its source arguments are given to the installer, not written here)."""
    from aipc_env.core.fileio import decode_text
    from aipc_env.trainenv.requirements import edit_requirements

    path = Path(clone) / "requirements.txt"
    text = decode_text(path.read_bytes(), path, "requirements.txt")
    edited = edit_requirements(text, pair=pair, xpu_index="https://download.pytorch.org/whl/xpu").text
    keep = [line for line in edited.splitlines() if not line.startswith(("--extra-index-url", "torch==", "torchvision=="))]
    build = torch_requirement.rsplit("+", 1)[-1]
    keep.append(f"{torch_requirement}  # aipc-env: this machine's torch source")
    if torchvision and pair.newest_torchvision:
        keep.append(f"torchvision=={pair.torchvision_version(pair.newest_torch, build)}")
    return "\n".join(keep) + "\n"


def record_path(prefix: Path) -> Path:
    return prefix / RECORD


def ensure_qflux_env(
    clone: Path, pair: Pair, *, root: Path | None = None, log: Callable[[str], None] = print
) -> tuple[Path, EnvRecord]:
    """The qflux env (its prefix and record), built when its requirements changed. The record names the pair only
    when the env holds the pair's XPU torch (a CPU build is no XPU env: nothing to activate)."""
    from aipc_env.core.formats import load_versioned, timestamp, write_model
    from aipc_env.core.platforms import current_platform
    from aipc_env.paths import cache_dir
    from aipc_env.trainenv.torch_source import detect, local_wheel_folder
    from aipc_env.trainenv.uvenv import StampedVenv, build_stamped_venv, digest_of, stamp_matches

    source = detect(pair.newest_torch)
    wheels = local_wheel_folder()
    torchvision = wheels is None or any(wheels.glob("torchvision-*.whl"))
    text = qflux_requirements(clone, pair, source.requirement, torchvision=torchvision)
    digest = digest_of([text, " ".join(source.args)])
    prefix = (root or cache_dir() / "qflux-envs") / digest[:16]
    if stamp_matches(prefix, STAMP, digest) and record_path(prefix).is_file():
        return prefix, load_versioned(EnvRecord, record_path(prefix))
    count = sum(1 for line in text.splitlines() if line.strip() and not line.lstrip().startswith(("#", "-")))
    log(f"qflux env: building {prefix} for {pair.id} ({source.describe()})")
    python = build_stamped_venv(
        StampedVenv(
            label="qflux env",
            prefix=prefix,
            stamp=STAMP,
            digest=digest,
            requirements_name="requirements-qflux.txt",
            requirements=text,
            install_args=source.args,
            describe=f"{count} requirements",
            cost="about 2 GB and a few minutes the first time",
        ),
        log,
    )
    record = EnvRecord(
        prefix=str(prefix),
        python=str(python),
        pair=pair.id if source.build == "xpu" else None,
        platform=current_platform(),
        built_at=timestamp(),
    )
    write_model(record_path(prefix), record)  # after the stamp: a record missing beside a stamp is written again
    return prefix, record
