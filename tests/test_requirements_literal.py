"""The requirements edit line by line, as literals reviewed by hand: the relax path with extras and markers, the lock
contradiction (pre-releases included), a file from an earlier run for another pair, endings of first and last
lines, a pair without torchvision, what is never parsed as a requirement, and the file I/O refusals as another
user. Each case pins a guard or a format a mutation of requirements.py changed without a test noticing."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from aipc_env.errors import InputError
from aipc_env.trainenv.requirements import _admits_older, apply_edits, edit_requirements, specifiers_conflict
from tests.conftest import ROOT

XPU = "https://download.pytorch.org/whl/xpu"
HEADER_213 = (
    "# aipc-env: the pair's XPU torch (xpu-2.13), from the PyTorch XPU index: a plain `pip install -r` keeps it and never"
)
TAKES = "# aipc-env: takes PyPI's CUDA build (and its nvidia-* packages) instead"


def test_relaxed_pins_keep_extras_and_markers_and_the_lock_is_checked(matrix):
    text = (
        "sympy[test,dev]==1.12 ; python_version >= '3.10'\r\n"
        "setuptools==69.5.1\r\n"
        "bitsandbytes[b,a]==0.45.0\r\n"
        "transformers==4.52.4\r\n"
        "accelerate>=1.0\r\n"
        "numpy>=1.26\r\n"
        "pydantic\r\n"
        "wandb"
    )
    result = edit_requirements(
        text,
        pair=matrix.get("xpu-2.13"),
        xpu_index=XPU,
        pip_layer=None,
        locked={"transformers": "5.24.0", "accelerate": "1.0", "numpy": "2.0.0rc1", "pydantic": "2.14.4"},
    )
    assert result.text.split("\r\n") == [
        'sympy[dev,test]>=1.13.3; python_version >= "3.10"  # aipc-env: was sympy[test,dev]==1.12 ; '
        "python_version >= '3.10'; torch 2.13.0 needs sympy>=1.13.3",
        "setuptools>=77.0.3  # aipc-env: was setuptools==69.5.1; torch 2.13.0 needs setuptools>=77.0.3",
        "bitsandbytes[a,b]>=0.50.2  # aipc-env: XPU needs >= 0.50.2",
        "transformers==4.52.4",
        "accelerate>=1.0",
        "numpy>=1.26",
        "pydantic",
        "wandb",
        HEADER_213,
        TAKES,
        f"--extra-index-url {XPU}",
        "torch==2.13.0+xpu",
        "torchvision==0.28.0+xpu",
        "",
    ]
    assert result.edits == [
        "line 1: \"sympy[test,dev]==1.12 ; python_version >= '3.10'\" relaxed to sympy>=1.13.3 (torch 2.13.0 needs it)",
        "line 2: 'setuptools==69.5.1' relaxed to setuptools>=77.0.3 (torch 2.13.0 needs it)",
        "line 3: 'bitsandbytes[b,a]==0.45.0' -> bitsandbytes>=0.50.2 (XPU backend)",
        f"appended torch==2.13.0+xpu, torchvision==0.28.0+xpu with the XPU index line ({XPU})",
    ]
    # the lock's pre-release counts as a version the specifier admits; an unpinned line never contradicts a lock
    assert result.report == [
        "line 4: transformers==4.52.4 contradicts the lock (transformers 5.24.0); pip would replace the locked version"
    ]
    assert result.changed


def test_a_file_without_line_endings_and_a_pair_without_torchvision(matrix):
    no_torchvision = matrix.get("xpu-2.14").model_copy(update={"torchvision": {}})
    result = edit_requirements("numpy", pair=no_torchvision, xpu_index=XPU)
    assert result.text == (
        "numpy\n# aipc-env: the pair's XPU torch (xpu-2.14), from the PyTorch XPU index: a plain "
        f"`pip install -r` keeps it and never\n{TAKES}\n--extra-index-url {XPU}\n"
        "torch==2.14.1+xpu\n"
    )
    assert result.edits == [f"appended torch==2.14.1+xpu with the XPU index line ({XPU})"]
    empty = edit_requirements("", pair=no_torchvision, xpu_index=XPU)
    assert empty.text == result.text.removeprefix("numpy\n") and empty.changed


def test_a_file_pinned_for_another_pair_is_reported_not_repinned(matrix):
    first = edit_requirements("torch\nnumpy\n", pair=matrix.get("xpu-2.10"), xpu_index=XPU).text
    result = edit_requirements(first, pair=matrix.get("xpu-2.13"), xpu_index=XPU)
    assert result.report == [
        "the XPU torch pins come from an earlier run for another pair; restore the backup "
        "(.aipc-backup) and run again for xpu-2.13"
    ]
    assert result.text == first and not result.changed and result.edits == []
    same = edit_requirements(first, pair=matrix.get("xpu-2.10"), xpu_index=XPU)
    assert same.report == [] and not same.changed


def test_only_the_pins_marker_counts_as_an_earlier_run(matrix):
    """Another aipc-env comment, or the words "XPU torch" without the marker, are not the pins block."""
    text = (
        "# aipc-env: flash-attn is CUDA-only (aipc-env uses PyTorch SDPA on XPU)\n# flash-attn\n"
        "# the XPU torch is the one we want\ntorch==2.3\n"
    )
    result = edit_requirements(text, pair=matrix.get("xpu-2.13"), xpu_index=XPU)
    assert result.text.splitlines()[3:6] == ["# aipc-env: torch comes from the pair's XPU pins below", "# torch==2.3", HEADER_213]
    assert result.text.endswith("torch==2.13.0+xpu\ntorchvision==0.28.0+xpu\n") and result.report == []


@pytest.mark.parametrize(
    "line",
    [
        "flash-attn @ https://example.org/flash_attn-2.6-cp311-win_amd64.whl",  # a direct reference stays as written
        "-r flash-attn.txt",
        "--index-url https://example.org/simple",
        "# flash-attn==2.6",
        "-e ./flash-attn",
    ],
)
def test_lines_that_are_not_requirements_are_left_alone(matrix, line):
    result = edit_requirements(line + "\n", pair=matrix.get("xpu-2.13"), xpu_index=XPU)
    assert result.text.splitlines()[0] == line and result.edits[:-1] == []


def test_only_the_first_comment_marker_ends_the_requirement(matrix):
    result = edit_requirements("flash-attn==2.6 # cuda # only\n", pair=matrix.get("xpu-2.13"), xpu_index=XPU)
    assert result.text.splitlines()[:2] == [
        "# aipc-env: flash-attn is CUDA-only (aipc-env uses PyTorch SDPA on XPU)",
        "# flash-attn==2.6 # cuda # only",
    ]


@pytest.mark.parametrize(
    ("spec", "admits"),
    [
        ("==0.50.*", False),
        ("==0.49.*", True),
        ("~=0.50.1", False),
        ("~=0.49", True),
        ("===0.50.0", False),
        # an unparsable bound is skipped and the next one still counts, in either order as written
        ("===weird,>=0.50.0", False),
        (">=0.50.0,===weird", False),
        ("===weird", True),
        ("<1.0", True),
        ("!=0.49.0", True),
        ("", True),
    ],
)
def test_bitsandbytes_specifiers_that_admit_an_older_version(spec, admits):
    assert _admits_older(SpecifierSet(spec), Version("0.50.0")) is admits


@pytest.mark.parametrize(
    ("a", "b", "conflict"),
    [
        ("", ">2,<1", False),
        (">2,<1", "", False),  # an empty side never conflicts, whatever the other says
    ],
)
def test_an_empty_specifier_never_conflicts(a, b, conflict):
    assert specifiers_conflict(SpecifierSet(a), SpecifierSet(b)) is conflict


ORIGINAL = b"torch==2.3.0\nbitsandbytes==0.43.0\ntransformers==4.52.4\n"


def _as_daemon(call):
    """Run call() with real and effective uid 1 (daemon), then back to root: the non-root branches of the
    writability check, on a machine whose tests run as root."""
    os.setresgid(1, 1, 0)
    os.setresuid(1, 1, 0)
    try:
        return call()
    finally:
        os.setresuid(0, 0, 0)
        os.setresgid(0, 0, 0)


@pytest.fixture
def shared_dir(matrix, monkeypatch):
    """A folder daemon may enter. The checkout may sit in a folder only root can read (a clone inside `mktemp -d`):
    what the edit reads as daemon comes from a world-readable copy of the data (AIPC_ENV_HOME), and the modules it
    imports are imported first, as root, by one edit of a scratch file."""
    import shutil

    if os.geteuid() != 0:
        pytest.fail("these cases switch to another user and need root (CI runs as root)")
    folder = Path(tempfile.mkdtemp(prefix="aipc-req-"))
    folder.chmod(0o777)
    home = Path(tempfile.mkdtemp(prefix="aipc-req-home-"))
    home.chmod(0o755)
    for part in ("environments", "lockfiles", "launchers"):
        shutil.copytree(ROOT / part, home / part)
    monkeypatch.setenv("AIPC_ENV_HOME", str(home))
    scratch = home / "warm-up requirements.txt"
    scratch.write_bytes(ORIGINAL)
    _apply(scratch, matrix)
    yield folder
    shutil.rmtree(home, ignore_errors=True)
    for child in folder.iterdir():
        child.unlink()
    folder.rmdir()


def _apply(path, matrix, **kw):
    return apply_edits(
        path, pair=matrix.get("xpu-2.13"), xpu_index=XPU, pip_layer=kw.get("pip_layer"), locked=kw.get("locked"), dry_run=False
    )


def test_a_file_another_user_owns_is_refused_even_with_the_owner_write_bit(matrix, shared_dir):
    path = shared_dir / "requirements.txt"
    path.write_bytes(ORIGINAL)
    path.chmod(0o644)  # root's: the owner bit says writable, but not for daemon
    with pytest.raises(InputError) as caught:
        _as_daemon(lambda: _apply(path, matrix))
    assert (caught.value.message, caught.value.path) == ("the requirements file is read-only; nothing was changed", str(path))
    assert path.read_bytes() == ORIGINAL and sorted(p.name for p in shared_dir.iterdir()) == ["requirements.txt"]


def test_an_unreadable_file_is_refused_naming_it(matrix, shared_dir):
    path = shared_dir / "requirements.txt"
    path.write_bytes(ORIGINAL)
    path.chmod(0o600)
    with pytest.raises(InputError) as caught:
        _as_daemon(lambda: _apply(path, matrix))
    assert (caught.value.message, caught.value.path) == ("cannot read the requirements file: Permission denied", str(path))


def test_a_file_daemon_may_write_is_edited(matrix, shared_dir):
    path = shared_dir / "requirements.txt"
    path.write_bytes(ORIGINAL)
    os.chown(path, 1, 1)
    result, _, backup = _as_daemon(lambda: _apply(path, matrix))
    assert result.changed and backup.read_bytes() == ORIGINAL and b"torch==2.13.0+xpu" in path.read_bytes()


def test_apply_edits_passes_the_layer_the_lock_and_the_index(tmp_path, matrix):
    path = tmp_path / "requirements.txt"
    path.write_bytes(ORIGINAL)
    result, _, _ = _apply(path, matrix, pip_layer=["transformers>=4.56"], locked={"transformers": "5.24.0"})
    assert result.report == [
        "line 3: transformers==4.52.4 conflicts with aipc-env's pip layer (transformers>=4.56): this env cannot also "
        "be aipc-env's training env",
        "line 3: transformers==4.52.4 contradicts the lock (transformers 5.24.0); pip would replace the locked version",
    ]
    assert f"--extra-index-url {XPU}\n".encode() in path.read_bytes()


def test_a_file_that_is_not_utf8_is_refused_naming_it(tmp_path, matrix):
    path = tmp_path / "requirements.txt"
    path.write_bytes("torch  # é\n".encode("cp1252"))
    with pytest.raises(InputError) as caught:
        _apply(path, matrix)
    assert (caught.value.message, caught.value.path) == (
        "requirements file is not UTF-8 text (invalid continuation byte at byte 9; it looks like a Windows ANSI "
        "code page (cp1252))",
        str(path),
    )
    assert path.read_bytes() == "torch  # é\n".encode("cp1252")
    assert stat.S_IMODE(path.stat().st_mode)  # untouched, still there
