"""Shared test fixtures: isolated state dirs, the matrix, recorded facts."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.isolation import tool_dirs
from tests.support.user_folders import (  # noqa: F401 - the guard's hooks, taken as this conftest's own
    pytest_sessionfinish,
    pytest_sessionstart,
    pytest_terminal_summary,
)

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures"
MACHINES = FIXTURES / "machines"
OUTPUTS = FIXTURES / "outputs"


SUITE_TIMES = ROOT / "benchmarks" / "results" / "suite.json"

# One math-library thread per test process and per process it starts (its training runs, the tool's workers): the
# suite runs more processes than the machine has cores (three slow-tier workers on two, each starting torch), and a
# torch of two threads spins one while another process holds the core it waits for. Measured by
# benchmarks/bench_threads.py (results/threads.json); decision 74. Set a variable to choose another count.
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
for _threads in THREAD_VARS:
    os.environ.setdefault(_threads, "1")


def measured_costs(path: Path = SUITE_TIMES) -> dict[str, float]:
    """Worker seconds per test file name, each tier's from the latest run `benchmarks/suite_times.py` recorded with
    that tier (a run may record one tier); empty when the file is missing or not of that shape (the order is then
    collection order)."""
    try:
        latest: dict[str, dict] = {}
        for run in json.loads(path.read_text(encoding="utf-8"))["runs"].values():
            latest.update(run["tiers"])
        return {Path(name).name: float(seconds) for tier in latest.values() for name, seconds in tier["files"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def slowest_first(items, costs: dict[str, float]) -> None:
    """The most costly test files first, by measured worker seconds (`measured_costs`); files never measured after
    them, in collection order. xdist hands units (files, or the parts WORKER_GROUPS splits off) to the workers in
    this order: a long unit handed out last keeps one worker busy while the others idle (test_qflux.py, collected late
    by name, did: the slow tier ran 3 minutes past its half), so the order is the measured one, not a list kept by
    hand. test_container.py stays one unit: two container engines on one storage at once hung on its database."""
    items.sort(key=lambda item: -costs.get(item.path.name, 0.0))  # stable: equal costs keep their order


_CPU_START = pytest.StashKey[float]()


def cpu_seconds() -> float:
    """CPU seconds of this process and of the children it has waited for (their own waited-for children included):
    what a test costs on a machine whose every core is busy, where its wall time mostly says what ran beside it.
    Processes that are not waited for (a container engine's daemonized monitor) are not counted."""
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_setup(item):
    if sys.platform != "win32":
        item.stash[_CPU_START] = cpu_seconds()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Each test's CPU seconds (setup, call and teardown) as the JUnit property `cpu_s`, which
    benchmarks/suite_times.py sums per file."""
    if call.when == "teardown" and _CPU_START in item.stash:
        item.user_properties.append(("cpu_s", round(cpu_seconds() - item.stash[_CPU_START], 2)))
    yield


def pytest_collection_modifyitems(config, items):
    slowest_first(items, measured_costs())
    if getattr(config.option, "loadgroup", False) or config.getoption("dist", "no") == "loadgroup":
        worker_groups(items)


def worker_groups(items) -> None:
    """Under `--dist loadgroup` (the slow tier) each test file is one unit of work for a worker, as with `--dist
    loadfile` (its module fixtures run once), except the tests its WORKER_GROUPS names ({test function: group}):
    those form units of their own, so a long file's independent parts run on two workers at once."""
    for item in items:
        name = getattr(item, "originalname", item.name)
        part = getattr(getattr(item, "module", None), "WORKER_GROUPS", {}).get(name)
        item.add_marker(pytest.mark.xdist_group(f"{item.path.name}:{part}" if part else item.path.name))


NOX_SESSION = os.environ.get("NOX_CURRENT_SESSION")
"""The nox session running the suite (`tests` in CI), read before the run's isolation hides it from the tool."""


@pytest.fixture(scope="session", autouse=True)
def _isolated_run(tmp_path_factory):
    """The run's own per-user folders, set before any fixture runs: a module's or the session's fixture (a smoke
    config, the fleet bundle, a trained run) is set up before a test's own isolation below, and a tool it started
    would otherwise fall back to the real folders (a smoke config once named the real data folder as its run folder,
    and the tests that trained it wrote there). tests/support/user_folders.py fails the run when that happens."""
    with pytest.MonkeyPatch.context() as mp:
        for name, value in tool_dirs(tmp_path_factory.mktemp("run-state")).items():
            mp.setenv(name, value)
        mp.delenv("NOX_CURRENT_SESSION", raising=False)  # the tool as a person runs it, not as `nox -s tests` does
        yield


@pytest.fixture(autouse=True)
def _isolated_state(tmp_path_factory, monkeypatch):
    """No test reads or writes the real per-user state, cache or data (runs of the built-in default): each test its
    own. A subprocess with an environment of its own gets tests/support/isolation.py's isolated_env."""
    for name, value in tool_dirs(tmp_path_factory.mktemp("state")).items():
        monkeypatch.setenv(name, value)


@pytest.fixture(scope="session")
def matrix():
    from aipc_env.matrix import load_matrix

    return load_matrix()


def run_cli(
    *args: str, env: dict | None = None, cwd: Path | None = None, timeout: float = 120, input: str | None = None
) -> subprocess.CompletedProcess:
    """Run `python -m aipc_env ...` in a real subprocess, the way users run it."""
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    return subprocess.run(
        [sys.executable, "-m", "aipc_env", *args],
        capture_output=True,
        text=True,
        env=full_env,
        cwd=cwd or ROOT,
        timeout=timeout,
        input=input,
    )


def find_tool(name: str) -> str | None:
    """A command on PATH, else beside this interpreter (the test env's own bin/ when pytest runs unactivated)."""
    import shutil

    return shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))


def require_tool(reason: str | None) -> None:
    """Skip a test whose tool is missing, with the reason; under CI=true a missing tool is a failure."""
    if reason is None:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true and a tool this test needs is missing: {reason}")
    pytest.skip(reason)


UPSTREAM_NAME = "qwen-image-finetune-460ba1a.tar.gz"


def upstream_tarball() -> Path | None:
    """The real qwen-image-finetune source at 460ba1a (MIT): $AIPC_QFLUX_UPSTREAM, else ../shared/upstream/."""
    override = os.environ.get("AIPC_QFLUX_UPSTREAM")
    candidates = [Path(override)] if override else []
    candidates.append(ROOT.parent / "shared" / "upstream" / UPSTREAM_NAME)
    return next((p for p in candidates if p.is_file()), None)


@pytest.fixture(scope="session")
def upstream_pristine(tmp_path_factory) -> Path:
    """The upstream clone, extracted once per session (never edit it: copy it with `upstream_clone`)."""
    import tarfile

    tarball = upstream_tarball()
    require_tool(None if tarball else f"the upstream source is missing: set AIPC_QFLUX_UPSTREAM to {UPSTREAM_NAME}")
    dest = tmp_path_factory.mktemp("upstream")
    with tarfile.open(tarball) as tf:
        if hasattr(tarfile, "data_filter"):  # Python >= 3.11.4 (Debian 12's distro Python is 3.11.2)
            tf.extractall(dest, filter="data")
        else:
            tf.extractall(dest)
    (root,) = [p for p in dest.iterdir() if p.is_dir()]
    return root


@pytest.fixture
def upstream_clone(upstream_pristine, tmp_path) -> Path:
    """A private copy of the upstream clone, in a folder with a space and non-ASCII characters."""
    import shutil

    dest = tmp_path / "qwen image finetune ü"
    shutil.copytree(upstream_pristine, dest, symlinks=True)
    return dest


def run_shared(tmp_path_factory) -> Path:
    """This test run's folder that every xdist worker sees (each worker's base temp is a child of it)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def warm_caches(tmp_path_factory) -> dict[str, str]:
    """uv's and pip's caches, shared by the tests that install the same packages into a clean HOME or host root (the
    README's commands, the installed tool, a bundle's bootstrap, the Ansible hosts): the first fills them, the rest
    link from them (both tools lock their caches). Each command still runs verbatim in an empty HOME or root; only
    downloads and unpacking are not repeated."""
    shared = run_shared(tmp_path_factory)
    return {"UV_CACHE_DIR": str(shared / "warm-uv-cache"), "PIP_CACHE_DIR": str(shared / "warm-pip-cache")}


def built_once(tmp_path_factory, name: str, build: Callable[[Path], None]) -> Path:
    """A folder built once per test run and shared by every xdist worker (and module) that asks for it: the first
    builds it under a file lock in the run's shared temp folder, the others wait and reuse it. Only a build that
    finished is marked done, so a failed one is redone by the next asker. Users must treat it as read-only."""
    import fcntl

    shared = run_shared(tmp_path_factory)
    folder, done = shared / f"built-{name}", shared / f"built-{name}.done"
    with open(shared / f"built-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            build(folder)
            done.touch()
    return folder


@pytest.fixture(scope="session")
def fleet_bundle(tmp_path_factory) -> Path:
    """A linux-64 offline bundle of xpu-2.13 (stand-in torch/runtime wheels, real aipc-env dependencies), built
    once per run."""

    def build(folder: Path) -> None:
        from aipc_env.matrix import load_matrix
        from tests.support.fleet import stand_in_lock

        (folder / "lock").mkdir()
        lock = stand_in_lock(folder / "lock", load_matrix().get("xpu-2.13"))
        out = folder / "bundle" / "bundle-linux-64"
        keys = out.parent / "admin keys"  # the admin's, kept outside the bundle
        keys.mkdir(parents=True)
        admin_keys(keys)
        result = run_cli(
            "fleet",
            "bundle",
            "--pair",
            "xpu-2.13",
            "--lock",
            str(lock),
            "--platform",
            "linux-64",
            "--python",
            "3.11",
            "--out",
            str(out),
            "--json",
            "--sign",
            str(keys / "admin.key"),
            timeout=900,
            env={"AIPC_ENV_CACHE_DIR": str(folder / "cache")},
        )
        assert result.returncode == 0, result.stderr[-3000:]
        from tests.support.json_outputs import check_json_output

        check_json_output("fleet bundle", result.stdout)

    return built_once(tmp_path_factory, "fleet-bundle", build) / "bundle" / "bundle-linux-64"


def admin_keys(folder: Path) -> Path:
    """An admin's key pair made by the real minisign CLI (unencrypted: -W): folder/admin.key, folder/admin.pub."""
    import shutil

    require_tool(None if shutil.which("minisign") else "minisign is not installed (apt-get install minisign)")
    subprocess.run(
        ["minisign", "-G", "-W", "-p", str(folder / "admin.pub"), "-s", str(folder / "admin.key")],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return folder


def distro_python_with_venv() -> str | None:
    """Why the distro Python cannot make venvs here (the bundle's bootstrap needs python3 -m venv), or None."""
    probe = subprocess.run(["/usr/bin/python3", "-c", "import ensurepip, venv"], capture_output=True)
    return None if probe.returncode == 0 else "the distro python3 has no venv module (apt-get install python3-venv)"


@pytest.fixture(scope="session")
def signing_key(tmp_path_factory) -> tuple[Path, str]:
    """A real OpenPGP key made by gpg in a throwaway home: (armored public key file, fingerprint)."""
    require_tool(None if shutil.which("gpg") else "gpg is not installed (apt-get install gnupg)")
    home = tmp_path_factory.mktemp("gnupg")
    home.chmod(0o700)
    env = {"GNUPGHOME": str(home), "PATH": "/usr/bin:/bin"}
    subprocess.run(
        ["gpg", "--batch", "--passphrase", "", "--quick-gen-key", "Repo Test <repo@example.org>", "ed25519", "sign", "never"],
        check=True,
        capture_output=True,
        env=env,
        timeout=120,
    )
    listing = subprocess.run(
        ["gpg", "--batch", "--with-colons", "--list-keys"], check=True, capture_output=True, text=True, env=env
    ).stdout
    fingerprint = next(line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:"))
    key = tmp_path_factory.mktemp("key") / "repo.asc"
    key.write_bytes(
        subprocess.run(["gpg", "--batch", "--armor", "--export", fingerprint], check=True, capture_output=True, env=env).stdout
    )
    return key, fingerprint


@pytest.fixture(scope="session")
def tiny_base(tmp_path_factory) -> Path:
    """The built-in default's trained tiny base (aipc_env.workers.train.tinyedit), trained once per run for every worker: a
    cache root holding it. `use_tiny_base` copies it into a test's own cache folder."""
    from aipc_env.workers.train.tinyedit import load_tiny_base

    return built_once(tmp_path_factory, "tiny-base", lambda folder: load_tiny_base(folder, log=lambda _m: None))


def use_tiny_base(tiny_base: Path, cache_dir: Path | None = None) -> None:
    """Give a test's per-user cache folder (default: $AIPC_ENV_CACHE_DIR) the already trained tiny base, so a default
    run does not train it again; the copy is checked against its record like any cached base."""
    target = Path(cache_dir or os.environ["AIPC_ENV_CACHE_DIR"]) / "builtin"
    target.mkdir(parents=True, exist_ok=True)
    for folder in tiny_base.iterdir():
        if folder.is_dir() and not (target / folder.name).exists():
            shutil.copytree(folder, target / folder.name)
