"""A command that needs the training stack runs its worker in the training env (launch/worker_call.py): the
worker's refusal comes back as the same error (text and --json), a worker that ends without a result is a named
error, a missing interpreter is one too, and Ctrl-C reaches the worker, which stops and still reports. Real
processes: the CLI in a subprocess, the real monitor and quantize workers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest

from aipc_env.errors import AipcError, ExitCode, InputError
from aipc_env.launch.hops import WorkerArgs, error_file, run_worker
from aipc_env.launch.worker_call import call_worker, worker_env
from aipc_env.train.results import MonitorReport
from tests.conftest import ROOT, run_cli


@dataclass(frozen=True)
class _NoSuchWorker(WorkerArgs):
    MODULE: ClassVar[str] = "aipc_env.workers.no_such_worker"
    result: Path


def test_a_worker_that_writes_no_result_is_a_named_error():
    said: list[str] = []
    with pytest.raises(AipcError) as err:
        call_worker(_NoSuchWorker, MonitorReport, what="monitor", say=said.append)
    assert err.value.exit_code == ExitCode.PROBLEMS
    assert "the monitor worker" in err.value.message and "ended with exit code 1 and wrote no result" in err.value.message
    assert "training env" in (err.value.fix or "")


def test_an_env_without_an_interpreter_is_a_named_error(tmp_path):
    with pytest.raises(InputError) as err:
        call_worker(_NoSuchWorker, MonitorReport, what="monitor", say=print, env_flag=tmp_path)
    assert err.value.key == "--env" and "no Python interpreter" in err.value.message


def test_the_refusal_a_worker_writes_is_the_error_it_raised(tmp_path, capsys):
    def refuse() -> int:
        raise InputError("no such thing", path=tmp_path / "x ü", key="--src", fix="name it")

    result = tmp_path / "result.json"
    assert run_worker("w", refuse, result=result) == ExitCode.USAGE
    assert capsys.readouterr().err == ""  # said once, by the command that started the worker
    from aipc_env.launch.worker_call import read_refusal

    again = read_refusal(error_file(result))
    assert (again.message, again.path, again.key, again.fix, again.exit_code) == (
        "no such thing",
        str(tmp_path / "x ü"),
        "--src",
        "name it",
        ExitCode.USAGE,
    )
    assert not result.exists()


def test_quantize_refusal_from_the_worker_is_the_commands_error_document(tmp_path):
    """The worker refuses a model folder without a transformer; the command prints the same error document
    (--json on stdout) and exits 2, as when the work ran in process."""
    (tmp_path / "empty model").mkdir()
    out = run_cli(
        "quantize",
        "transformer",
        "--src",
        str(tmp_path / "empty model"),
        "--dst",
        str(tmp_path / "o"),
        "--device",
        "cpu",
        "--json",
    )
    assert out.returncode == 2, out.stderr
    doc = json.loads(out.stdout)
    assert doc["error"] is True and doc["code"] == 2 and doc["code_name"] == "USAGE"
    assert out.stderr.count("error:") == 1 and "Traceback" not in out.stderr


def test_worker_env_puts_this_aipc_env_first():
    env = worker_env({"PYTHONPATH": "/elsewhere", "PYTHONHOME": "/x", "PATH": "/bin"})
    assert env["PYTHONPATH"].split(os.pathsep) == [str(ROOT / "src"), "/elsewhere"]
    assert "PYTHONHOME" not in env and env["PYTHONUTF8"] == "1" and env["PATH"] == "/bin"
    assert worker_env({})["PYTHONPATH"] == str(ROOT / "src")


def test_ctrl_c_reaches_the_monitor_worker_which_stops_and_reports(tmp_path):
    csv = tmp_path / "m.csv"
    # started as from a terminal, with Ctrl-C at its default: a test run started in the background (`.ci/run &`)
    # passes SIGINT on ignored, which Python then keeps (POSIX: a background job's Ctrl-C is not its own)
    foreground = (
        "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
        "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            foreground,
            "-m",
            "aipc_env",
            "monitor",
            "--out",
            str(csv),
            "--interval",
            "0.1",
            "--device",
            "none",
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (csv.is_file() and len(csv.read_text().splitlines()) >= 3):
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)  # the command only: it passes Ctrl-C on to the worker's group
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:  # say whether the command still ran, and leave no worker behind
        alive = proc.poll() is None
        subprocess.run(["pkill", "-KILL", "-f", str(csv)], check=False)
        proc.kill()
        _, err = proc.communicate(timeout=10)
        pytest.fail(
            f"60 s after Ctrl-C the command was {'still running' if alive else f'gone (exit {proc.returncode})'}; "
            f"its stderr: {err[-3000:]}"
        )
    assert proc.returncode == 0, err
    report = MonitorReport.model_validate(json.loads(out))
    assert report.samples >= 2 and report.csv == str(csv)
    assert len(csv.read_text().splitlines()) == report.samples + 1


@pytest.mark.parametrize(("written", "raised"), [(2, 2), (130, 130), (0, 1), (4, 1), (-1, 1)])
def test_a_refusal_exits_with_a_failing_code_of_the_table(tmp_path, written, raised):
    """A refusal's exit code is kept where the table has it and is not OK; anything else is PROBLEMS."""
    from aipc_env.launch.worker_call import read_refusal

    path = tmp_path / "result.error.json"
    path.write_text(json.dumps({"message": "m", "exit_code": written}), encoding="utf-8")
    assert read_refusal(path).exit_code == raised
