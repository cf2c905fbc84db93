"""A copy of a shipped pylock whose PyTorch-index wheels (torch, torchvision, Triton) are local stand-ins: wheels
under their real file names carrying the METADATA environments/xpu-wheels.yaml records, the copy's URLs file:// and
its hashes theirs. The PyTorch XPU index cannot be reached here; PyPI's packages stay as locked."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from aipc_env.core.platforms import Platform
from aipc_env.lock.lockfile import provenance_of, read_pylock
from aipc_env.lock.wheels import load_wheel_manifest
from tests.support.wheels import make_wheel

__all__ = ["stand_in_xpu_lock"]


def stand_in_xpu_lock(lockfile: Path, platform: Platform, folder: Path) -> Path:
    """folder/<lockfile's name> and, beside it, the stand-in wheels (also a --find-links folder)."""
    manifest = load_wheel_manifest()
    folder.mkdir(parents=True, exist_ok=True)
    text = lockfile.read_text(encoding="utf-8")
    for pkg in read_pylock(lockfile).packages:
        if provenance_of(pkg)["provenance"] != "public-lockfile":
            continue
        record = manifest.metadata_for(pkg.name, pkg.version or "", platform)
        assert record is not None, (pkg.name, pkg.version, platform)
        for wheel in pkg.wheels:
            name = (wheel.model_extra or {})["name"]
            made = make_wheel(
                folder / ".build",
                pkg.name,
                pkg.version or "",
                requires=record.requires_dist,
                requires_python=record.requires_python,
                tag=name.removesuffix(".whl").split("-", 2)[2],
            )
            shutil.move(made, folder / name)
            text = text.replace(wheel.hashes["sha256"], hashlib.sha256((folder / name).read_bytes()).hexdigest())
            text = text.replace(f'"{wheel.url}"', f'"{(folder / name).as_uri()}"')
    shutil.rmtree(folder / ".build", ignore_errors=True)
    out = folder / lockfile.name
    out.write_text(text, encoding="utf-8")
    return out
