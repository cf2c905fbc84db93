"""The env and pair policy (trainenv.select) as the pure function of a situation and a purpose it is, and the
gatherer (trainenv.situation) that reads this machine once for it."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

from aipc_env.errors import InputError
from aipc_env.trainenv.envs import EnvChoice, env_python
from aipc_env.trainenv.record import EnvRecord, write_env_record
from aipc_env.trainenv.select import EnvCandidates, Situation, choose_env, decide
from aipc_env.trainenv.situation import env_candidates, situation_for


def _env(prefix: str, source: str = "flag", pair: str | None = None) -> EnvChoice:
    record = EnvRecord(prefix=prefix, python=prefix + "/bin/python", pair=pair, built_at="2026-11-01T00:00:00+00:00")
    return EnvChoice(Path(prefix), Path(prefix) / "bin" / "python", source, record if pair else None)  # type: ignore[arg-type]


def test_build_falls_back_through_toolkit_then_local_wheels_then_newest(matrix):
    bare = Situation(matrix, "win-64")
    assert decide(bare, "build").pair.pair.id == "xpu-2.13"
    choice = decide(replace(bare, toolkits=("2025.0", "2025.3")), "build").pair
    assert choice.pair.id == "xpu-2.12" and "2025.3" in choice.why
    wheels = decide(replace(bare, offered_torch=("2.9.1",)), "build").pair
    assert wheels.pair.newest_torch == "2.9.1" and "local wheel folder" in wheels.why
    # a toolkit outranks the wheel folder; the flag outranks everything
    assert decide(replace(bare, toolkits=("2025.3",), offered_torch=("2.9.1",)), "build").pair.pair.id == "xpu-2.12"
    assert decide(replace(bare, pair_flag="xpu-2.9", toolkits=("2025.3",)), "build").pair.pair.id == "xpu-2.9"


def test_a_run_has_no_fallback_a_non_xpu_env_has_no_pair(matrix):
    situation = Situation(
        matrix, "linux-64", env=_env("/e"), installed={"torch": "2.13.0+cpu"}, toolkits=("2025.3",), offered_torch=("2.9.1",)
    )
    assert decide(situation, "run").pair.pair is None
    assert decide(situation, "build").pair.pair.id == "xpu-2.12"


def test_resolved_packages_outrank_the_record_and_the_record_outranks_fallbacks(matrix):
    pair = matrix.get("xpu-2.9")
    installed = {"torch": pair.newest_torch + "+xpu"}
    situation = Situation(matrix, "linux-64", env=_env("/e", "state", "xpu-2.12"), recorded="xpu-2.12", installed=installed)
    resolved = decide(situation, "run").pair
    assert resolved.pair.id == "xpu-2.9" and "resolved" in resolved.why
    drifted = decide(replace(situation, installed={"numpy": "2.0"}), "run").pair
    assert drifted.pair.id == "xpu-2.12" and "recorded" in drifted.why
    assert decide(replace(situation, installed={}, recorded="xpu-0.0"), "run").pair.pair is None  # unknown record


def test_a_target_machine_ignores_this_ones_toolkits_and_wheels(matrix):
    situation = Situation(
        matrix,
        "linux-64",
        toolkits=("2025.3",),
        offered_torch=("2.9.1",),
        installed={"torch": matrix.get("xpu-2.9").newest_torch + "+xpu"},
    )
    assert decide(situation, "target").pair.pair == matrix.newest("linux-64")
    assert decide(replace(situation, pair_flag="xpu-2.9"), "target").pair.pair.id == "xpu-2.9"


def test_a_qflux_run_gets_an_env_to_build_for_the_build_policys_pair(matrix):
    situation = Situation(
        matrix,
        "linux-64",
        env=_env("/e", "state", "xpu-2.13"),
        recorded="xpu-2.13",
        offered_torch=("2.9.1",),
        qflux_clone=Path("clone"),
    )
    decision = decide(situation, "run")
    assert decision.build == "qflux" and decision.env is None
    assert decision.pair.pair.newest_torch == "2.9.1"  # the env's record does not choose the qflux env's pair
    flagged = decide(replace(situation, env=_env("/f")), "run")
    assert flagged.build is None and flagged.env.prefix == Path("/f")


def test_after_the_qflux_build_the_policy_decides_again_on_the_built_env(matrix):
    """The run service decides again on the built env's situation: no second build, and what it has installed says
    what is activated (a CPU build of the pair's torch: nothing; a recorded XPU build: its pair)."""
    built = Situation(matrix, "linux-64", env=_env("/q", "qflux"), installed={"torch": "2.9.1+cpu"}, qflux_clone=Path("clone"))
    cpu = decide(built, "run")
    assert cpu.build is None and cpu.env.prefix == Path("/q") and cpu.pair.pair is None
    xpu = decide(replace(built, env=_env("/q", "qflux", "xpu-2.9"), recorded="xpu-2.9"), "run")
    assert xpu.build is None and xpu.pair.pair.id == "xpu-2.9"


def test_a_torchless_interpreter_runs_in_the_tools_own_env(matrix):
    current = EnvChoice(Path(sys.prefix), Path(sys.executable), "current")
    situation = Situation(matrix, "linux-64", env=current, torch_importable=False)
    assert decide(situation, "run").build == "tool"
    assert decide(replace(situation, torch_importable=True), "run").build is None
    assert decide(situation, "build").build is None  # only a run builds it


def test_env_candidates_in_order_and_refusals():
    flag, built, used = _env("/flag"), _env("/built", "state", "xpu-2.13"), _env("/used", "used")
    current = _env("/current", "current")
    assert choose_env(EnvCandidates(flag=flag, built=built, used=used, current=current)) is flag
    assert choose_env(EnvCandidates(built=built, used=used, current=current)) is built
    assert choose_env(EnvCandidates(used=used, current=current)) is used
    assert choose_env(EnvCandidates(current=current)) is current
    with pytest.raises(InputError, match="no Python interpreter in this training env") as exc:
        choose_env(EnvCandidates(flag_missing=Path("/gone"), built=built, current=current))
    assert exc.value.key == "--env"
    gone = EnvRecord(prefix="/gone", python="/gone/bin/python", pair="xpu-2.13", built_at="2026-11-01T00:00:00+00:00")
    with pytest.raises(InputError, match="is gone") as exc:
        choose_env(EnvCandidates(built_missing=gone, used=used, current=current))
    assert "--pair xpu-2.13" in exc.value.fix


def test_the_gatherer_checks_each_candidate_for_an_interpreter(tmp_path):
    assert env_candidates(tmp_path / "none").flag_missing == tmp_path / "none"
    write_env_record(EnvRecord(prefix=str(tmp_path / "gone"), python="x", pair=None, built_at="2026-11-01T00:00:00+00:00"))
    assert env_candidates().built_missing is not None
    prefix = Path(sys.prefix)
    write_env_record(EnvRecord(prefix=str(prefix), python=sys.executable, pair="xpu-2.13", built_at="2026-11-01T00:00:00+00:00"))
    candidates = env_candidates(prefix)
    assert candidates.flag.record.pair == "xpu-2.13" and candidates.built.source == "state"
    assert env_python(prefix).is_file()


def test_env_python_knows_both_layouts(tmp_path):
    assert env_python(tmp_path, windows=True) == tmp_path / "Scripts" / "python.exe"
    assert env_python(tmp_path, windows=False) == tmp_path / "bin" / "python"
    (tmp_path / "python.exe").write_bytes(b"")  # a conda env on Windows keeps it at the root
    assert env_python(tmp_path, windows=False) == tmp_path / "python.exe"


def test_each_purpose_reads_what_it_needs(matrix, monkeypatch, tmp_path):
    """A target reads nothing of this machine; a build or a run reads the env's packages (step 2 of the pair
    policy) unless --pair decides, and the local wheel folder; only a run keeps the qflux clone."""
    wheels = tmp_path / "w"
    wheels.mkdir()
    (wheels / "torch-2.9.1+xpu-cp311-cp311-linux_x86_64.whl").write_bytes(b"")
    monkeypatch.setenv("AIPC_ENV_TORCH_WHEELS", str(wheels))
    env = EnvChoice(Path(sys.prefix), Path(sys.executable), "current")
    target = situation_for("target", matrix, "linux-64", env=env, toolkits=["2025.2"], qflux_clone=tmp_path)
    assert (target.offered_torch, target.installed, target.toolkits, target.env, target.qflux_clone) == ((), None, (), None, None)
    for purpose in ("build", "run"):
        here = situation_for(purpose, matrix, "linux-64", toolkits=[], qflux_clone=tmp_path)
        assert here.offered_torch == ("2.9.1",) and here.installed is None
        assert here.qflux_clone == (tmp_path if purpose == "run" else None)
        assert situation_for(purpose, matrix, "linux-64", env=env, toolkits=[]).installed["pydantic"]
        assert situation_for(purpose, matrix, "linux-64", env=env, pair_flag="xpu-2.9", toolkits=[]).installed is None


@pytest.mark.parametrize("name", ["../outside", "a/b", "a\\b", "..", "", "c:evil", "x" * 256, "new\nline"])
def test_an_env_name_from_a_file_stays_in_the_envs_folder(name, tmp_path):
    """A bundle manifest's pair names the env folder (`aipc-env env --bundle`): a name that is not a plain file name
    is a named refusal, never a prefix outside <data dir>/envs."""
    from aipc_env.errors import InputError
    from aipc_env.paths import data_dir
    from aipc_env.trainenv.envs import default_env_prefix

    assert default_env_prefix("xpu-2.13").parent == data_dir() / "envs"
    assert default_env_prefix("x" * 255).parent == data_dir() / "envs"  # at the bound
    with pytest.raises(InputError, match="env name") as refused:
        default_env_prefix(name, source=tmp_path / "bundle-manifest.json")
    assert refused.value.key == "pair" and refused.value.path == str(tmp_path / "bundle-manifest.json")


def test_env_builds_where_the_flag_says_else_in_place_else_in_the_data_folder(tmp_path):
    from aipc_env.paths import data_dir
    from aipc_env.trainenv.envs import prefix_to_build

    built = _env(str(tmp_path / "built"), "state", "xpu-2.12")
    assert prefix_to_build(tmp_path / "mine", built, "xpu-2.12") == (tmp_path / "mine").absolute()
    assert prefix_to_build(None, built, "xpu-2.12") == tmp_path / "built"  # rebuilt in place
    assert prefix_to_build(None, built, "xpu-2.13") == data_dir() / "envs" / "xpu-2.13"  # another pair: its own
    assert prefix_to_build(None, None, "xpu-2.13") == data_dir() / "envs" / "xpu-2.13"
