"""The XPU wheels' real METADATA is read before an env is installed: a copy of the shipped xpu-2.12 lock whose torch,
torchvision and Triton point at local stand-in wheels (file:// URLs, the lock's hashes theirs) carrying the
manifest's METADATA builds past the check; a torch whose METADATA differs stops the build before anything is
installed, naming package, field and both values, unless --accept-metadata-drift."""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

import pytest

from aipc_env.core.platforms import PLATFORMS
from aipc_env.errors import AipcError
from aipc_env.lock.lockfile import provenance_of, pylock_path, read_pylock
from aipc_env.lock.simple_index import MetadataCache
from aipc_env.lock.wheelcheck import check_xpu_metadata, read_wheel_metadata
from aipc_env.lock.wheels import load_wheel_manifest
from aipc_env.trainenv.build import EnvRequest, build_env, building_mark
from tests.conftest import ROOT
from tests.support.wheels import make_wheel

PAIR = "xpu-2.12"
PY = f"{sys.version_info[0]}.{sys.version_info[1]}"
TORCH_LINUX = f"torch-2.12.0+xpu-cp3{sys.version_info[1]}-cp3{sys.version_info[1]}-linux_x86_64.whl"


def _stand_in(tmp_path: Path, torch_change=None) -> Path:
    """lockfiles/xpu-2.12 copied under tmp_path/locks, its XPU wheels replaced by stand-ins with the manifest's
    METADATA (`torch_change(requires, requires_python)` alters torch's); the lock's Python set to this one."""
    manifest = load_wheel_manifest()
    root = tmp_path / "locks"
    shutil.copytree(ROOT / "lockfiles" / PAIR, root / PAIR)
    meta = json.loads((root / PAIR / "lock-meta.json").read_text())
    (root / PAIR / "lock-meta.json").write_text(json.dumps({**meta, "python": PY}))
    files = tmp_path / "xpu files"
    for platform in PLATFORMS:
        path = pylock_path(root / PAIR, platform)
        text = path.read_text(encoding="utf-8")
        for pkg in read_pylock(path).packages:
            if provenance_of(pkg)["provenance"] != "public-lockfile":
                continue
            record = manifest.metadata_for(pkg.name, pkg.version, platform)
            requires, python = list(record.requires_dist), record.requires_python
            if pkg.name == "torch" and torch_change:
                requires, python = torch_change(requires, python)
            for wheel in pkg.wheels:
                name = wheel.model_extra["name"]
                made = make_wheel(
                    tmp_path / "build",
                    pkg.name,
                    pkg.version,
                    requires=requires,
                    requires_python=python,
                    tag=name.removesuffix(".whl").split("-", 2)[2],
                )
                files.mkdir(exist_ok=True)
                shutil.move(made, files / name)
                text = text.replace(wheel.hashes["sha256"], hashlib.sha256((files / name).read_bytes()).hexdigest())
                text = text.replace(f'"{wheel.url}"', f'"{(files / name).as_uri()}"')
        path.write_text(text, encoding="utf-8")
    return root


def _request(matrix, root: Path, prefix: Path, **kw) -> EnvRequest:
    return EnvRequest(
        pair=matrix.get(PAIR),
        prefix=prefix,
        platform="linux-64",
        lock_root=root,
        log=prefix.parent / "env.log",
        base_python=sys.executable,
        **kw,
    )


@pytest.mark.parametrize("platform", PLATFORMS)
def test_wheels_as_the_manifest_records_them_pass(tmp_path, platform):
    root = _stand_in(tmp_path)
    lock = read_pylock(pylock_path(root / PAIR, platform))
    report = check_xpu_metadata(lock, platform, PY, load_wheel_manifest(), read_wheel_metadata(MetadataCache(None)))
    assert report.problems == []


def _no_setuptools_cap(requires, python):
    return [r.replace("setuptools<82", "setuptools") for r in requires], python


def _python_312(requires, python):
    return requires, ">=3.12"


@pytest.mark.parametrize(
    ("change", "problems"),
    [
        (
            _no_setuptools_cap,
            [
                f"torch 2.12.0+xpu ({TORCH_LINUX}): Requires-Dist: environments/xpu-wheels.yaml says [setuptools<82] (not in "
                "the wheel), the wheel says [setuptools] (not in environments/xpu-wheels.yaml)"
            ],
        ),
        (
            _python_312,
            [
                f"torch 2.12.0+xpu ({TORCH_LINUX}): Requires-Python: environments/xpu-wheels.yaml says >=3.10, the wheel "
                "says >=3.12",
                f"with the real metadata the lock does not hold: linux-64 Python {PY}: torch 2.12.0+xpu requires Python >=3.12",
            ],
        ),
    ],
)
def test_a_torch_whose_metadata_differs_stops_the_build_before_anything_is_installed(tmp_path, matrix, change, problems):
    root = _stand_in(tmp_path, change)
    prefix = tmp_path / "env (x86) ü"
    with pytest.raises(AipcError) as caught:
        build_env(_request(matrix, root, prefix))
    assert caught.value.message == (
        f"the real METADATA of the {PAIR} XPU wheels differs from what the lock stands on; nothing was installed:\n  "
        + "\n  ".join(problems)
    )
    assert "--accept-metadata-drift" in caught.value.fix
    assert not prefix.exists() and not building_mark(prefix).exists()


def test_accepting_the_drift_builds_on_and_logs_it(tmp_path, matrix, monkeypatch):
    """With the flag the build goes past the check: the interpreter layer is made (then the run is interrupted
    there, and the half-built env is removed, so the full pip layer is not fetched)."""
    root = _stand_in(tmp_path, _no_setuptools_cap)
    prefix = tmp_path / "env"
    monkeypatch.setenv("AIPC_ENV_INTERRUPT_AT", "env:after-interpreter")
    with pytest.raises(KeyboardInterrupt):
        build_env(_request(matrix, root, prefix, accept_metadata_drift=True))
    log = (tmp_path / "env.log").read_text(encoding="utf-8")
    assert (
        f"accepted (--accept-metadata-drift): torch 2.12.0+xpu ({TORCH_LINUX}): Requires-Dist: "
        "environments/xpu-wheels.yaml says [setuptools<82]"
    ) in log
    assert "uv" in log and "venv" in log  # the interpreter layer was being made
    assert not prefix.exists()


def test_an_unreadable_wheel_stops_the_build_too(tmp_path, matrix):
    root = _stand_in(tmp_path)
    (tmp_path / "xpu files" / TORCH_LINUX).unlink()
    prefix = tmp_path / "env"
    with pytest.raises(AipcError) as caught:
        build_env(_request(matrix, root, prefix))
    assert f"cannot read: torch 2.12.0+xpu: {(tmp_path / 'xpu files' / TORCH_LINUX).as_uri()}" in caught.value.message
    assert not prefix.exists()


def test_accepted_differences_are_kept_in_the_env_record(tmp_path, matrix):
    from aipc_env.trainenv.build import _record
    from aipc_env.trainenv.record import read_env_record

    lockfile = pylock_path(ROOT / "lockfiles" / PAIR, "linux-64")
    req = _request(matrix, ROOT / "lockfiles", tmp_path / "env")
    _record(req, lockfile, accepted=["torch 2.12.0+xpu (w.whl): Requires-Python: a says >=3.10, the wheel says >=3.12"])
    assert read_env_record().accepted_metadata_drift == [
        "torch 2.12.0+xpu (w.whl): Requires-Python: a says >=3.10, the wheel says >=3.12"
    ]
    _record(req, lockfile)
    assert read_env_record().accepted_metadata_drift == []
