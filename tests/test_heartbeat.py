"""The heartbeat (core.heartbeat): a line at least every `every` seconds of silence, naming what the step waits on,
the seconds since it began and what is left; the step's own lines restart the count; nothing after stop. And the
installers' heartbeat (core.procs.run_logged) on a real silent child process."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from aipc_env.core.heartbeat import HEARTBEAT_SECONDS, Heartbeat, last_line


def test_the_interval_holds_the_silence_bound_with_room():
    assert HEARTBEAT_SECONDS <= 5.0  # half the 10 s bound of benchmarks/bench_silence.py: a late wake-up still holds it


def test_it_fills_silences_only_and_names_what_it_waits_on_and_what_is_left():
    said: list[str] = []
    with Heartbeat(said.append, "fit: step 1/3 running", every=0.1, left="2 more step(s) after it") as beat:
        for _ in range(8):  # the step speaks every 0.05 s: no heartbeat between its lines
            time.sleep(0.05)
            beat.say("own line")
        assert said == ["own line"] * 8
        beat.waiting("fit: step 2/3 running", left=lambda: "1 more step(s) after it")
        time.sleep(0.35)
    count = len(said)
    time.sleep(0.25)
    assert len(said) == count  # none after the block
    beats = said[8:]
    assert 2 <= len(beats) <= 4, beats
    assert all(b.startswith("fit: step 2/3 running (") and b.endswith(" s; 1 more step(s) after it)") for b in beats)


def test_touch_restarts_the_count_without_a_line():
    said: list[str] = []
    with Heartbeat(said.append, "waiting", every=0.15) as beat:
        for _ in range(6):
            time.sleep(0.05)
            beat.touch()
    assert said == []


def test_last_line_quotes_the_log_as_the_installer_left_it(tmp_path: Path):
    log = tmp_path / "build.log"
    assert last_line(log)() is None  # not written yet
    log.write_bytes(b"Resolved 40 packages\r\nDownloading torch (174.3MiB)\r\x1b[2K\n\n")
    assert last_line(log)() == "build.log: ?[2K"
    log.write_bytes(b"Resolved 40 packages\nDownloading torch (174.3MiB)\n  \n")
    assert last_line(log, limit=11)() == "build.log: Downloading"


def test_a_silent_installer_step_gets_heartbeat_lines_on_stderr(tmp_path: Path, capfd, monkeypatch):
    from aipc_env.core import heartbeat, procs

    monkeypatch.setattr(heartbeat, "HEARTBEAT_SECONDS", 0.2)
    code = "import sys, time; print('Resolved 3 packages', flush=True); time.sleep(1.0); print('Installed 3')"
    out = procs.run_logged([sys.executable, "-c", code], tmp_path / "build.log")
    err = capfd.readouterr().err
    assert "Installed 3" in out
    beats = [line for line in err.splitlines() if "still running" in line]
    assert len(beats) >= 3, err
    assert all(b.startswith(f"  ... {Path(sys.executable).stem} still running (") for b in beats)
    assert all(b.endswith("; build.log: Resolved 3 packages)") for b in beats)
    assert "Resolved 3 packages" in err and "Installed 3" in err  # the installer's own output as before


def test_an_installer_that_speaks_gets_no_heartbeat(tmp_path: Path, capfd, monkeypatch):
    from aipc_env.core import heartbeat, procs

    monkeypatch.setattr(heartbeat, "HEARTBEAT_SECONDS", 0.4)
    code = "import time\nfor i in range(12):\n    print(f'Downloading {i}', flush=True); time.sleep(0.1)"
    procs.run_logged([sys.executable, "-c", code], tmp_path / "build.log")
    err = capfd.readouterr().err
    assert "Downloading 11" in err and "still running" not in err


def test_a_silent_phase_gets_the_runners_heartbeat_on_the_console_not_in_its_log(capfd, monkeypatch):
    import io

    from aipc_env.launch import runner

    monkeypatch.setattr(runner, "HEARTBEAT_SECONDS", -1.7)  # the runner waits 2 s more than a worker's heartbeat: 0.3 s
    code = "import time; print('loading', flush=True); time.sleep(1.2); print('done', flush=True)"
    log = io.BytesIO()
    assert runner.run_phase({"name": "fit", "argv": [sys.executable, "-c", code]}, dict(__import__("os").environ), log) == 0
    lines = capfd.readouterr().out.splitlines()
    beats = [n for n, line in enumerate(lines) if line.startswith("[aipc-env] phase fit: still running (")]
    assert 2 <= len(beats) <= 5, lines
    assert lines.index("loading") < beats[0] and beats[-1] < lines.index("done")
    assert b"still running" not in log.getvalue() and b"done" in log.getvalue()


def test_a_phase_that_speaks_gets_no_runner_heartbeat(capfd, monkeypatch):
    import io
    import os

    from aipc_env.launch import runner

    monkeypatch.setattr(runner, "HEARTBEAT_SECONDS", -1.6)  # 0.4 s
    code = "import time\nfor i in range(12):\n    print(f'step {i}', flush=True); time.sleep(0.1)"
    assert runner.run_phase({"name": "fit", "argv": [sys.executable, "-c", code]}, dict(os.environ), io.BytesIO()) == 0
    out = capfd.readouterr().out
    assert "step 11" in out and "still running" not in out


def test_a_heartbeat_is_running_from_start_to_stop_only():
    beat = Heartbeat(lambda _line: None, "waiting", every=0.05)
    assert not beat.running
    beat.start()
    assert beat.running
    beat.stop()
    assert not beat.running  # stop() waits for the thread
