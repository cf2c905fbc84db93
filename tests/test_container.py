"""The training env as an OCI image, built and run for real: a Debian base bootstrapped from the distro mirror,
buildah/podman builds (chroot isolation) from a lock over the local CPU torch wheel and the package index, the
doctor and the built-in default training inside the image, bit-identical rebuilds, a changed pin, a wrong hash,
`container check`, and `container run` under podman + runc with a stand-in device node. Minutes; its own storage."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.conftest import ROOT, THREAD_VARS, require_tool, run_cli
from tests.support.json_outputs import check_json_output
from tests.test_readme import _copy_checkout

pytestmark = pytest.mark.slow
TOOLS = ("buildah", "podman", "mmdebstrap", "runc")
# this machine's podman needs runc and raised limits (crun refuses its cgroups; see shared/facts/container.md)
RUNTIME = [
    "--engine-option=--runtime=runc",
    "--run-option=--ulimit=nofile=20000:20000",
    "--run-option=--ulimit=nproc=32768:32768",
    # a container starts with its image's environment, not the test's: one math thread, as every test process runs
    # (tests/conftest.py, decision 74)
    *(f"--run-option=--env={var}={os.environ[var]}" for var in THREAD_VARS if var in os.environ),
]


def _torch_wheels() -> str | None:
    folder = os.environ.get("AIPC_ENV_TORCH_WHEELS")
    return folder if folder and list(Path(folder).glob("torch-2.13.0+cpu-cp311-*.whl")) else None


def _need_tools() -> str:
    missing = [t for t in TOOLS if not shutil.which(t)]
    require_tool(f"missing {', '.join(missing)} (apt-get install -y buildah podman mmdebstrap runc)" if missing else None)
    wheels = _torch_wheels()
    require_tool(None if wheels else "no local torch 2.13.0+cpu wheel for Python 3.11 (AIPC_ENV_TORCH_WHEELS)")
    assert wheels
    return wheels


def _new_box(base: Path, wheels: str) -> dict:
    """Container storage, a wheel cache, build contexts and a copy of the checkout of their own under `base`: each
    build makes aipc-env's wheel in the checkout it runs from (setuptools writes build/ there) and two builds run at
    once (the rebuild beside the first); a fresh copy has no stale build/ either."""
    conf = base / "storage.conf"
    conf.write_text(f'[storage]\ndriver = "overlay"\ngraphroot = "{base / "graph"}"\nrunroot = "{base / "run"}"\n')
    _copy_checkout(base / "checkout")
    env = {
        "CONTAINERS_STORAGE_CONF": str(conf),
        "AIPC_ENV_CACHE_DIR": str(base / "cache"),
        "AIPC_ENV_HOME": str(base / "checkout"),
    }
    return {"base": base, "env": env, "wheels": wheels}


@pytest.fixture(scope="module")
def box(tmp_path_factory):
    box = _new_box(tmp_path_factory.mktemp("containers"), _need_tools())
    yield box
    _wipe(box["base"], box["env"])


@pytest.fixture
def other_box(tmp_path_factory):
    """A second storage, wheel cache and checkout copy: the from-scratch rebuild runs there while the first image's
    checks go on in `box` (two container engines never share one storage: two runs at once hung on its database)."""
    box = _new_box(tmp_path_factory.mktemp("containers-rebuild"), _need_tools())
    yield box
    _wipe(box["base"], box["env"])


def _wipe(base: Path, env: dict) -> None:
    full = {**os.environ, **env}
    subprocess.run(["buildah", "rm", "--all"], env=full, capture_output=True)
    subprocess.run(["buildah", "rmi", "--all", "--force"], env=full, capture_output=True)
    for sub in ("graph", "run"):
        shutil.rmtree(base / sub, ignore_errors=True)


def _lock(box, name: str, *extra: str) -> Path:
    from aipc_env.lock.tools import find_uv

    folder = box["base"] / name
    folder.mkdir(exist_ok=True)
    (folder / "req.in").write_text("\n".join(["torch==2.13.0+cpu", f"{ROOT}[train]", *extra]) + "\n")
    out = folder / "pylock.linux-64.toml"
    subprocess.run(
        [
            find_uv(),
            "pip",
            "compile",
            "req.in",
            "--format",
            "pylock.toml",
            "-o",
            str(out),
            "--python-version",
            "3.11",
            "--python-platform",
            "x86_64-unknown-linux-gnu",
            "--find-links",
            box["wheels"],
            "-c",
            str(ROOT / "environments" / "constraints-dev.txt"),
            "--no-header",
            "--quiet",
        ],
        cwd=folder,
        check=True,
        timeout=300,
    )
    return out


def _build(box, lock: Path, tag: str, *extra: str, env: dict | None = None) -> subprocess.CompletedProcess:
    # a Debian 12 base: its Python 3.11 is the one the local torch CPU wheel is for (the default base is Debian 13)
    return run_cli(
        "container",
        "build",
        "--lock",
        str(lock),
        "--gpu-runtime",
        "none",
        "--base",
        "localhost/aipc-base:bookworm",
        "--python",
        "3.11",
        "--find-links",
        box["wheels"],
        "--out",
        str(box["base"] / f"ctx-{tag}"),
        "--tag",
        f"localhost/aipc-env:{tag}",
        "--json",
        *extra,
        env={**box["env"], **(env or {})},
        timeout=1200,
    )


def _image_id(box, image: str) -> str | None:
    found = subprocess.run(
        ["buildah", "images", "--quiet", "--no-trunc", image], env={**os.environ, **box["env"]}, capture_output=True, text=True
    )
    return found.stdout.strip().removeprefix("sha256:") or None if found.returncode == 0 else None


def _layer_of(box, image: str, step: str) -> str:
    """The digest of the layer an image's build step made, the step found by a text of its command (the engine's own
    record: the image's history, and its layers in the same order, empty steps aside)."""
    found = subprocess.run(
        ["buildah", "inspect", "--type", "image", image], env={**os.environ, **box["env"]}, capture_output=True, text=True
    )
    assert found.returncode == 0, found.stderr[-2000:]
    oci = json.loads(found.stdout)["OCIv1"]
    layers = iter(oci["rootfs"]["diff_ids"])
    made = {entry.get("created_by", ""): next(layers) for entry in oci["history"] if not entry.get("empty_layer")}
    (layer,) = [digest for command, digest in made.items() if step in command]
    return layer


@pytest.mark.timeout(1500)  # eight image builds (two from scratch, at once), two runs: 5-10 minutes on two busy cores
def test_image_built_from_a_lock_runs_the_doctor_and_trains_into_a_mounted_folder(box, other_box):
    lock = _lock(box, "a", "pyyaml==6.0.2")
    # a second build from scratch (other storage, no cache layers, the base bootstrapped again, another copy of the
    # checkout) runs beside everything below and must end with the same image: the from-scratch build's 2-3 minutes
    # are off this test's critical path (it ran after the training, on a wiped storage)
    with ThreadPoolExecutor(1) as pool:
        rebuild = pool.submit(_build, other_box, lock, "a", "--base-from-mirror")
        try:
            ident = _first_image_checks(box, lock)
        finally:
            second = rebuild.result()  # never leave a build running past the test
        assert second.returncode == 0, second.stderr[-3000:]
        assert json.loads(second.stdout)["image_id"] == ident


def _first_image_checks(box, lock: Path) -> str:
    """Everything the test checks in the first image's storage; returns the image's id."""
    first = _build(box, lock, "a", "--base-from-mirror")
    assert first.returncode == 0, first.stderr[-3000:]
    report = check_json_output("container build", first.stdout)
    ident = report["image_id"]
    assert report["spec"]["lock_sha256"] and report["spec"]["pair"] == "custom"
    containerfile = (box["base"] / "ctx-a" / "Containerfile").read_text()
    assert "--require-hashes" in containerfile and "--mount=type=bind,source=wheels" in containerfile
    assert "COPY pylock.linux-64.toml" in containerfile and "USER aipc" in containerfile
    # the image's packages match its lock
    clean = run_cli("container", "check", "localhost/aipc-env:a", "--lock", str(lock), "--json", env=box["env"], timeout=300)
    assert clean.returncode == 0 and check_json_output("container check", clean.stdout)["drift"] == [], clean.stdout[-2000:]
    # the doctor runs inside, and sees the container and the stand-in render node
    out = box["base"] / "host output ü"
    out.mkdir()
    os.chown(out, 1000, 1000)  # a user's folder: the run is its owner (a root-owned one needs --allow-root)
    doctor = run_cli(
        "container",
        "run",
        "--image",
        "localhost/aipc-env:a",
        "--device",
        "/dev/null:/dev/dri/renderD128",
        *RUNTIME,
        "--",
        "doctor",
        "--json",
        env=box["env"],
        timeout=300,
    )
    assert doctor.returncode in (0, 1), doctor.stderr[-2000:]
    command = next(line for line in doctor.stderr.splitlines() if line.startswith("aipc-env: "))
    assert "--device /dev/null:/dev/dri/renderD128" in command and "--group-add render" not in command
    assert "--network none" in command
    facts = json.loads(doctor.stdout)["facts"]
    assert facts["container"]["engine"] == "podman" and "/dev/dri/renderD128" in facts["container"]["dri_nodes"]
    # the built-in default trains inside the image and leaves its LoRA in the mounted host folder
    train = run_cli(
        "container",
        "run",
        "--image",
        "localhost/aipc-env:a",
        "--device",
        "/dev/null:/dev/dri/renderD128",
        "--output",
        str(out),
        *RUNTIME,
        "--",
        "train",
        env=box["env"],
        timeout=900,
    )
    assert train.returncode == 0, train.stdout[-3000:] + train.stderr[-3000:]
    assert (out / "runs" / "builtin-default" / "lora" / "pytorch_lora_weights.safetensors").is_file()
    # interrupted builds (hooks, not timing): Ctrl-C before the image step leaves the tag on the image it had; a
    # power cut right after it leaves the new image tagged; a context left mid-render is finished by the next
    # build; each next build ends with the same image
    assert _image_id(box, "localhost/aipc-env:a") == ident.removeprefix("sha256:")
    for at, kill, code in (
        ("container:render-partial", True, -9),
        ("container:before-image", False, 130),
        ("container:after-image", True, -9),
    ):
        stopped = _build(box, lock, "a", env={"AIPC_ENV_INTERRUPT_AT": at, "AIPC_ENV_INTERRUPT_SIGNAL": "KILL" if kill else ""})
        assert stopped.returncode == code, (at, stopped.stderr[-2000:])
        assert _image_id(box, "localhost/aipc-env:a") == ident.removeprefix("sha256:"), at
        again = _build(box, lock, "a")
        assert again.returncode == 0 and json.loads(again.stdout)["image_id"] == ident, (at, again.stderr[-2000:])
    # one pin changed: another image, on the first one's torch layer (torch is not installed again), and `container
    # check` against the first lock names the drift
    changed_lock = _lock(box, "c", "pyyaml==6.0.3")
    changed = _build(box, changed_lock, "c")
    assert changed.returncode == 0, changed.stderr[-3000:]
    assert json.loads(changed.stdout)["image_id"] != ident
    torch_step, rest_step = "-r /opt/aipc-env-lock/requirements.torch.txt", "-r /opt/aipc-env-lock/requirements.lock.txt"
    assert _layer_of(box, "localhost/aipc-env:c", torch_step) == _layer_of(box, "localhost/aipc-env:a", torch_step)
    assert _layer_of(box, "localhost/aipc-env:c", rest_step) != _layer_of(box, "localhost/aipc-env:a", rest_step)
    drift = run_cli("container", "check", "localhost/aipc-env:c", "--lock", str(lock), "--json", env=box["env"], timeout=300)
    report = json.loads(drift.stdout)
    assert drift.returncode == 1 and report["lock_sha256"] != report["image_lock_sha256"]
    assert [(d["kind"], d["name"], d["locked"], d["installed"]) for d in report["drift"]] == [
        ("version", "pyyaml", "6.0.2", "6.0.3")
    ]
    return ident


def test_a_wrong_hash_fails_the_build_with_a_named_error(box):
    lock = _lock(box, "d", "pyyaml==6.0.2")
    text = lock.read_text()
    start = text.index('name = "pyyaml"\nversion = "6.0.2"')
    end = text.index("[[packages]]", start)
    block = re.sub(r'sha256 = "[0-9a-f]{64}"', 'sha256 = "' + "0" * 63 + '1"', text[start:end])
    bad = lock.parent / "bad" / "pylock.linux-64.toml"
    bad.parent.mkdir()
    bad.write_text(text[:start] + block + text[end:])
    result = _build(box, bad, "d")
    assert result.returncode == 1 and "does not match the lock" in result.stderr and "PyYAML" in result.stderr
    assert "Traceback" not in result.stderr
    assert sys.version_info >= (3, 11)
