"""Ctrl-C (SIGINT: handlers run) and a power cut (SIGKILL: nothing runs) at named instants of the commands that
write folders: what is left is consistent, and the next run finishes or undoes it. The instants are hooks
(aipc_env.core.interrupts.checkpoint), not timing. env, adapt and fleet bundle have theirs beside their own tests."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.conftest import run_cli

SCRIPT = textwrap.dedent("""
    import sys
    from pathlib import Path
    from aipc_env.core.fileio import atomic_dir
    dst = Path(sys.argv[1])
    with atomic_dir(dst) as tmp:
        (tmp / "data.txt").write_text(sys.argv[2])
""")


def _atomic(dst, content: str, at: str | None = None, kill: bool = False) -> subprocess.CompletedProcess:
    import os

    env = dict(os.environ, AIPC_ENV_INTERRUPT_AT=at or "", AIPC_ENV_INTERRUPT_SIGNAL="KILL" if kill else "")
    return subprocess.run([sys.executable, "-c", SCRIPT, str(dst), content], env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("at", ["atomic-dir:before-rename", "atomic-dir:after-old-moved"])
@pytest.mark.parametrize("kill", [False, True])
def test_an_interrupted_atomic_folder_keeps_the_old_one_and_the_next_run_cleans_up(tmp_path, at, kill):
    from aipc_env.core.fileio import recover_atomic_dir

    dst = tmp_path / "out dir (x86)"
    assert _atomic(dst, "old").returncode == 0
    stopped = _atomic(dst, "new", at=at, kill=kill)
    assert stopped.returncode == (-9 if kill else -2), stopped.stderr[-2000:]  # -2: a script ended by SIGINT
    leftovers = sorted(p.name for p in tmp_path.iterdir() if p.name != dst.name)
    if not kill:
        assert (dst / "data.txt").read_text() == "old" and leftovers == []
        return
    # a power cut: the partial folder stays; after "old moved aside", dst itself is missing
    assert any("-partial-" in n for n in leftovers)
    assert dst.exists() == (at == "atomic-dir:before-rename")
    done = recover_atomic_dir(dst)
    assert done and (dst / "data.txt").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == [dst.name]
    assert _atomic(dst, "new").returncode == 0 and (dst / "data.txt").read_text() == "new"


def test_a_live_runs_partial_folder_is_left_alone(tmp_path):
    import os

    from aipc_env.core.fileio import recover_atomic_dir

    mine = tmp_path / f".out-partial-{os.getpid()}-abc"
    mine.mkdir()
    gone = tmp_path / ".out-partial-999999999-abc"
    gone.mkdir()
    recover_atomic_dir(tmp_path / "out")
    assert mine.exists() and not gone.exists()


@pytest.mark.parametrize("kill", [False, True])
def test_an_interrupted_render_is_finished_by_the_next_and_refused_by_a_build(tmp_path, kill):
    from aipc_env.container.build import CONTAINERFILE, RENDERING_MARK, SPEC_NAME, build_image
    from aipc_env.errors import InputError

    out = tmp_path / "ctx"
    argv = ["container", "render", "--pair", "xpu-2.12", "--gpu-runtime", "none", "--out", str(out)]
    stopped = run_cli(
        *argv, env={"AIPC_ENV_INTERRUPT_AT": "container:render-partial", "AIPC_ENV_INTERRUPT_SIGNAL": "KILL" if kill else ""}
    )
    assert stopped.returncode == (-9 if kill else 130), stopped.stderr[-2000:]
    assert (out / CONTAINERFILE).is_file() and (out / RENDERING_MARK).is_file() and not (out / SPEC_NAME).exists()
    with pytest.raises(InputError, match="render was interrupted"):
        build_image(None, out, "localhost/x:y", tmp_path / "log")  # type: ignore[arg-type]
    again = run_cli(*argv)
    assert again.returncode == 0, again.stderr[-2000:]
    assert (out / SPEC_NAME).is_file() and not (out / RENDERING_MARK).exists()


def test_a_render_still_refuses_someone_elses_folder(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "Containerfile").write_text("FROM scratch\n")
    result = run_cli("container", "render", "--pair", "xpu-2.12", "--gpu-runtime", "none", "--out", str(out))
    assert result.returncode == 2 and "holds no earlier render" in result.stderr
    assert (out / "Containerfile").read_text() == "FROM scratch\n"
