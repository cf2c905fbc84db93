"""The one stamped uv env builder (trainenv.uvenv): a stamp holds the digest of every input and is written last, so a
matching stamp is reused, any other state is built again, and a failed install leaves no stamp. Real uv, a local
wheel, no index."""

from __future__ import annotations

from pathlib import Path

import pytest

from aipc_env.errors import AipcError, ExitCode
from aipc_env.trainenv.envs import env_python
from aipc_env.trainenv.uvenv import StampedVenv, build_stamped_venv, digest_of, stamp_matches
from tests.support.wheels import make_wheel


def _spec(prefix: Path, wheels: Path, requirement: str, digest: str) -> StampedVenv:
    return StampedVenv(
        label="test env",
        prefix=prefix,
        stamp=".stamp",
        digest=digest,
        requirements_name="requirements.txt",
        requirements=requirement + "\n",
        install_args=("--no-index", "--find-links", str(wheels)),
        describe="one stand-in wheel",
        cost="a few kB",
    )


def test_stamp_matches_only_a_whole_build_of_these_inputs(tmp_path: Path) -> None:
    prefix = tmp_path / "env"
    python = env_python(prefix)
    python.parent.mkdir(parents=True)
    assert not stamp_matches(prefix, ".stamp", "abc")  # no stamp: the build never ended
    (prefix / ".stamp").write_text("abc\n", encoding="utf-8")
    assert not stamp_matches(prefix, ".stamp", "abc")  # no interpreter
    python.write_text("", encoding="utf-8")
    assert stamp_matches(prefix, ".stamp", "abc")
    assert not stamp_matches(prefix, ".stamp", "abd")  # other inputs
    assert not stamp_matches(prefix, ".stamp", "ab")
    (prefix / ".stamp").write_bytes(b"\xff\xfe")
    assert not stamp_matches(prefix, ".stamp", "abc")  # unreadable: no stamp


def test_digest_covers_every_input_and_this_python() -> None:
    import sys

    assert digest_of(["a", "b"]) != digest_of(["a", "c"])
    assert digest_of(["a", "b"]) != digest_of(["ab"])
    assert len(digest_of([sys.version])) == 64


def test_builds_once_then_reuses_and_a_failed_install_leaves_no_stamp(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    make_wheel(wheels, "aipc-standin", "1.0")
    prefix = tmp_path / "env with space"
    lines: list[str] = []
    python = build_stamped_venv(_spec(prefix, wheels, "aipc-standin==1.0", "d1"), lines.append)
    assert python.is_file() and (prefix / ".stamp").read_text(encoding="utf-8") == "d1"
    assert lines and lines[-1].startswith("test env: ready")
    assert list(prefix.glob("lib/python*/site-packages/aipc_standin-1.0.dist-info"))

    lines.clear()
    build_stamped_venv(_spec(prefix, wheels, "aipc-standin==1.0", "d1"), lines.append)
    assert lines == []  # reused: nothing installed

    with pytest.raises(AipcError) as err:
        build_stamped_venv(_spec(prefix, wheels, "aipc-standin==9.9", "d2"), lines.append)
    assert err.value.exit_code == ExitCode.PROBLEMS and "test env could not be built" in err.value.message
    assert not (prefix / ".stamp").exists()  # the next run builds again
