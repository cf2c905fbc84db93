"""Generated .sh launchers run for real under bash and dash: environment, exit codes, phases, signals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from aipc_env.launch.plan import Activation, LaunchPlan, Phase, base_env
from aipc_env.launch.render import write_launcher
from tests.conftest import ROOT

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX launchers")
SHELLS = ["bash", "dash"]
NASTY = "run & echo INJECTED; $(touch pwned) `id` 'q' \"d\" | 100% !x! ^ (x86) ü"
RECORD = (
    "import json, os, sys; json.dump({'argv': sys.argv[1:], 'cwd': os.getcwd(), 'env': dict(os.environ)}, "
    "open(os.environ['AIPC_RECORD'], 'w'))"
)


def _plan(tmp: Path, phases: list[Phase], oneapi: Activation | None = None, **env: str) -> LaunchPlan:
    run = tmp / NASTY
    return LaunchPlan(
        platform="linux-64",
        run_dir=str(run),
        python=sys.executable,
        oneapi=oneapi,
        env={**base_env("linux-64", pythonpath=[str(ROOT / "src")], device=None, engine="builtin"), "USER_VALUE": NASTY, **env},
        phases=phases,
        log_file=str(run / "train.log"),
    )


def _fake_oneapi(root: Path) -> Activation:
    root.mkdir(parents=True)
    (root / "setvars.sh").write_text(
        '[ "$1" = "--force" ] || return 5\nexport SETVARS_COMPLETED=1\n'
        'export ONEAPI_ROOT="$(pwd)"\necho "oneAPI environment initialized"\n'
    )
    return Activation(folder=str(root), name="setvars.sh", release="2025.3")


@pytest.mark.parametrize("shell", SHELLS)
def test_environment_argv_and_log(shell, tmp_path):
    record = tmp_path / "record.json"
    data_arg = str(tmp_path / "data ü & $(x)")
    plan = _plan(
        tmp_path,
        [Phase(name="cache", argv=[sys.executable, "-c", RECORD, data_arg])],
        oneapi=_fake_oneapi(tmp_path / "intel one api"),
        AIPC_RECORD=str(record),
    )
    script = write_launcher(plan)
    result = subprocess.run([shell, str(script)], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    rec = json.loads(record.read_text())
    assert rec["argv"] == [data_arg]
    env = rec["env"]
    assert env["USER_VALUE"] == NASTY and env["SETVARS_COMPLETED"] == "1"
    assert env["PYTHONUTF8"] == "1" and env["SYCL_CACHE_PERSISTENT"] == "1" and "PYTHONHOME" not in env
    assert not (tmp_path / "pwned").exists() and "INJECTED\n" not in result.stdout
    log = (Path(plan.run_dir) / "train.log").read_text()
    assert "phase cache" in log and "exited with 0" in log


@pytest.mark.parametrize("shell", SHELLS)
def test_failing_cache_stops_before_fit_and_code_passes_through(shell, tmp_path):
    marker = tmp_path / "fit-ran"
    plan = _plan(
        tmp_path,
        [
            Phase(name="cache", argv=[sys.executable, "-c", "import sys; print('boom'); sys.exit(3)"]),
            Phase(name="fit", argv=[sys.executable, "-c", f"open({str(marker)!r}, 'w')"]),
        ],
    )
    result = subprocess.run([shell, str(write_launcher(plan))], capture_output=True, text=True, timeout=60)
    assert result.returncode == 3
    assert not marker.exists()
    assert "phase cache failed (exit code 3); later phases were not run" in result.stderr
    assert "boom" in (Path(plan.run_dir) / "train.log").read_text()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purpose
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_stopping_the_launcher_stops_training_no_orphans(sig, tmp_path):
    pidfile = tmp_path / "pids"
    # the phase starts a grandchild too, as accelerate launch does
    body = (
        "import os, subprocess, sys, time; child = subprocess.Popen([sys.executable, '-c', "
        "'import time; time.sleep(120)']); open(os.environ['PIDS'], 'w').write(f'{os.getpid()} {child.pid}');"
        " time.sleep(120)"
    )
    plan = _plan(tmp_path, [Phase(name="fit", argv=[sys.executable, "-c", body])], PIDS=str(pidfile))
    proc = subprocess.Popen(["dash", str(write_launcher(plan))], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while not (pidfile.exists() and pidfile.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.05)
    pids = [int(p) for p in pidfile.read_text().split()]
    assert all(_alive(p) for p in pids)
    proc.send_signal(sig)
    rc = proc.wait(timeout=30)
    assert rc == 128 + sig
    deadline = time.monotonic() + 15
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(p) for p in pids), "a training process outlived the launcher"


@pytest.mark.parametrize("shell", SHELLS)
def test_failing_oneapi_activation_is_a_named_exit_code(shell, tmp_path):
    """setvars.sh failing stops the launcher with ExitCode.PROBLEMS (not 'internal error') before the runner."""
    from aipc_env.errors import ExitCode

    root = tmp_path / "oneapi"
    root.mkdir()
    (root / "setvars.sh").write_text("return 7\n")
    marker = tmp_path / "ran"
    plan = _plan(
        tmp_path,
        [Phase(name="fit", argv=[sys.executable, "-c", f"open({str(marker)!r}, 'w')"])],
        oneapi=Activation(folder=str(root), name="setvars.sh", release="2025.3"),
    )
    result = subprocess.run([shell, str(write_launcher(plan))], capture_output=True, text=True, timeout=60)
    assert result.returncode == ExitCode.PROBLEMS and "oneAPI activation failed" in result.stderr
    assert not marker.exists()


def test_ctrl_c_says_stopped_by_you_and_how_to_resume_and_the_log_has_no_traceback(tmp_path):
    """The phase (and a grandchild, as under accelerate) dies of the KeyboardInterrupt with a traceback each; the
    person sees one line that says who stopped it and what resumes it, and train.log keeps what the phase said
    before the stop and on its way out, less the tracebacks."""
    pidfile = tmp_path / "pids"
    body = (
        "import os, subprocess, sys, time; child = subprocess.Popen([sys.executable, '-c', "
        '\'import os, time; open(os.environ["PIDS"] + ".up", "w").close(); time.sleep(120)\']);'
        " print('step 3: checkpoint saved', flush=True);"
        " open(os.environ['PIDS'], 'w').write(f'{os.getpid()} {child.pid}');"
        " exec('try:\\n time.sleep(120)\\nfinally:\\n print(\"saving on the way out\", flush=True)')"
    )
    plan = _plan(tmp_path, [Phase(name="fit", argv=[sys.executable, "-c", body])], PIDS=str(pidfile))
    plan = plan.model_copy(update={"resume": 'aipc-env train "my run.yaml"'})
    proc = subprocess.Popen(["bash", str(write_launcher(plan))], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    up = Path(f"{pidfile}.up")  # the grandchild's interpreter is up (a Ctrl-C during its start is another story)
    while not (pidfile.exists() and pidfile.read_text().strip() and up.exists()) and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130
    log = Path(plan.log_file).read_text(encoding="utf-8")
    line = f'[aipc-env] stopped by you (Ctrl-C) during phase fit; resume with: aipc-env train "my run.yaml"; log {plan.log_file}'
    assert line in err.decode() and line in log
    assert "step 3: checkpoint saved" in log and "saving on the way out" in log
    assert "Traceback" not in log and "KeyboardInterrupt" not in log, log
    assert "Traceback" not in err.decode() + out.decode()


def test_a_traceback_is_cut_whole_and_nothing_else() -> None:
    from aipc_env.launch.runner import stop_line, without_tracebacks

    text = (
        "step 3 saved\n"
        "Traceback (most recent call last):\n"
        '  File "x.py", line 1, in <module>\n'
        "    foo()\n"
        "    ^^^^^\n"
        "KeyboardInterrupt\n"
        "During handling of the above exception, another exception occurred:\n"
        "Traceback (most recent call last):\n"
        '  File "launch.py", line 9, in simple_launcher\n'
        "subprocess.CalledProcessError: Command '[...]' returned non-zero exit status 130.\n"
        "  an indented line of the phase's own\n"
        "bye\n"
    )
    assert without_tracebacks(text) == "step 3 saved\n  an indented line of the phase's own\nbye\n"
    assert without_tracebacks("no trace here\n  indented\n") == "no trace here\n  indented\n"
    assert stop_line(signal.SIGTERM, "cache", "t.log", None) == "[aipc-env] stopped (signal 15) during phase cache; log t.log\n"


def test_a_failure_that_is_not_a_stop_keeps_its_traceback_in_the_log() -> None:
    from aipc_env.launch.runner import TracebackGate

    text = b'work\nTraceback (most recent call last):\n  File "x.py", line 1\nValueError: bad\n  after\npartial'
    out = bytearray()

    class Sink:
        def write(self, data: bytes) -> None:
            out.extend(data)

    gate = TracebackGate(Sink(), lambda: False)
    for i in range(0, len(text), 7):  # in chunks cut anywhere, as a pipe delivers them
        gate.write(text[i : i + 7])
    gate.close()
    assert bytes(out) == text
