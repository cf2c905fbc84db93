"""Runs the phases of a launch plan inside the training env: standard library only.

Started by the generated launcher (`python -m aipc_env.launch.runner <run dir>/launch.json`). Applies the plan's
environment, runs each phase as an argv (never through a shell), tees its output to the console and the log,
stops at the first failing phase and exits with that phase's exit code. SIGINT/SIGTERM (Ctrl-C / Ctrl-Break on
Windows) are forwarded to the running phase's process group; if it has not ended after a grace period it is
killed, so no training process outlives the launcher.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

GRACE_SECONDS = 10.0


class _Current:
    proc: subprocess.Popen | None = None
    stopping: int | None = None


def _stamp() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")


def _forward(signum: int, _frame: object) -> None:
    _Current.stopping = signum
    proc = _Current.proc
    if proc is None or proc.poll() is not None:
        return
    try:
        if os.name == "nt":
            proc.send_signal(signal.CTRL_BREAK_EVENT)  # type: ignore[attr-defined]
        else:
            os.killpg(proc.pid, signum)
    except (ProcessLookupError, PermissionError, OSError):
        pass

    def _kill_later() -> None:
        try:
            proc.wait(timeout=GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            try:
                if os.name == "nt":
                    subprocess.run(["taskkill", "/F", "/T", "/PID", str(proc.pid)], capture_output=True)
                else:
                    os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass

    threading.Thread(target=_kill_later, daemon=True).start()


def _child_env(plan: dict) -> dict:
    env = dict(os.environ)
    for key, value in plan.get("env", {}).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def run_phase(phase: dict, env: dict, log) -> int:
    argv = phase["argv"]
    header = f"[aipc-env {_stamp()}] phase {phase['name']}: {subprocess.list2cmdline(argv)}\n"
    sys.stdout.write(header)
    sys.stdout.flush()
    log.write(header.encode("utf-8"))
    try:
        proc = subprocess.Popen(argv, cwd=phase.get("cwd") or None, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **_popen_kwargs())
    except OSError as exc:
        msg = f"[aipc-env] cannot start {argv[0]}: {exc}\n"
        sys.stderr.write(msg)
        log.write(msg.encode("utf-8"))
        return 127
    _Current.proc = proc
    out = sys.stdout.buffer
    assert proc.stdout is not None
    for chunk in iter(lambda: proc.stdout.read1(65536), b""):  # type: ignore[union-attr]
        out.write(chunk)
        out.flush()
        log.write(chunk)
        log.flush()
    rc = proc.wait()
    _Current.proc = None
    footer = f"[aipc-env {_stamp()}] phase {phase['name']} exited with {rc}\n"
    sys.stdout.write(footer)
    log.write(footer.encode("utf-8"))
    return rc


def _popen_kwargs() -> dict:
    if os.name == "nt":
        return {"creationflags": subprocess.CREATE_NEW_PROCESS_GROUP}  # type: ignore[attr-defined]
    return {"start_new_session": True}


def start_background(plan: dict, env: dict, log) -> list[subprocess.Popen]:
    procs = []
    for phase in plan.get("background", []):
        line = f"[aipc-env {_stamp()}] background {phase['name']}: {subprocess.list2cmdline(phase['argv'])}\n"
        log.write(line.encode("utf-8"))
        try:
            procs.append(subprocess.Popen(phase["argv"], cwd=phase.get("cwd") or None, env=env,
                                          stdin=subprocess.DEVNULL, stdout=log, stderr=log, **_popen_kwargs()))
        except OSError as exc:
            log.write(f"[aipc-env] cannot start {phase['name']}: {exc}\n".encode("utf-8"))
    return procs


def stop_background(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        if proc.poll() is None:
            try:
                if os.name == "nt":
                    proc.send_signal(signal.CTRL_BREAK_EVENT)  # type: ignore[attr-defined]
                else:
                    os.killpg(proc.pid, signal.SIGTERM)
            except OSError:
                pass
    for proc in procs:
        try:
            proc.wait(timeout=GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        sys.stderr.write("usage: python -m aipc_env.launch.runner PLAN.json\n")
        return 2
    with open(argv[0], encoding="utf-8") as fh:
        plan = json.load(fh)
    for sig in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGBREAK", None)):
        if sig is not None:
            signal.signal(sig, _forward)
    env = _child_env(plan)
    os.makedirs(os.path.dirname(os.path.abspath(plan["log_file"])), exist_ok=True)
    with open(plan["log_file"], "ab") as log:
        for warning in plan.get("warnings", []):
            line = f"[aipc-env] warning: {warning}\n"
            sys.stderr.write(line)
            log.write(line.encode("utf-8"))
        background = start_background(plan, env, log)
        try:
            for phase in plan["phases"]:
                rc = run_phase(phase, env, log)
                if _Current.stopping is not None:
                    return 128 + int(_Current.stopping)
                if rc != 0:
                    msg = f"[aipc-env] phase {phase['name']} failed (exit code {rc}); later phases were not run\n"
                    sys.stderr.write(msg)
                    log.write(msg.encode("utf-8"))
                    return rc
        finally:
            stop_background(background)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
