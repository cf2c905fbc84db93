"""Known issues per pair (environments/matrix.yaml, known_issues): the GPU families they are keyed on, the
matrix's validation of them, which machines they hit (GPU family, platform, fixed-in release), and the warnings
of the doctor, `env --dry-run` and `recommend` on whole-machine facts. In-process and torch-free."""

from __future__ import annotations

import json

import pytest
import yaml

from aipc_env.cli import main
from aipc_env.core.gpus import family_of
from aipc_env.doctor import run_checks
from aipc_env.errors import InputError
from aipc_env.facts.model import GpuInfo, SyclDevice, load_facts
from aipc_env.lock.specs import row_hash
from aipc_env.matrix import load_matrix
from aipc_env.matrix.model import KnownIssue
from tests.conftest import MACHINES, ROOT

ISSUE = "pytorch/pytorch#197520"
A770_WIN = MACHINES / "win11_arc_a770.json"
MATRIX = load_matrix()


@pytest.mark.parametrize(
    ("name", "device", "family"),
    [
        ("Intel(R) Arc(TM) A770 Graphics", "56a0", "arc-a"),
        ("Intel(R) Arc(TM) A730M Graphics", None, "arc-a"),  # the GPU of the issue's report
        ("Intel(R) Arc(TM) Pro A60 Graphics", None, "arc-a"),
        ("Intel(R) Arc(TM) B580 Graphics", "e20b", "arc-b"),
        ("Intel(R) Arc(TM) Pro B60 Graphics", None, "arc-b"),
        ("Intel(R) Arc(TM) Graphics", "7d55", "igpu"),  # Core Ultra (Meteor Lake): "Arc" without a model number
        ("Intel(R) Arc(TM) 140V GPU (16GB)", "64a0", "igpu"),
        ("Intel(R) Iris(R) Xe Graphics", None, "igpu"),
        ("Intel(R) UHD Graphics 770", None, "igpu"),
        # Linux sysfs names carry no model: the PCI id decides (include/drm/intel/pciids.h)
        ("Intel GPU 56a0", "56a0", "arc-a"),
        ("Intel GPU 56A5", "56A5", "arc-a"),
        ("Intel GPU e20c", "e20c", "arc-b"),
        ("Intel GPU 7d45", "7d45", "igpu"),
        ("Intel GPU 56c0", "56c0", None),  # Flex 170 (ATS-M): not an Arc A-series
        ("Intel GPU abcd", "abcd", None),
        ("Intel GPU", "", None),
    ],
)
def test_gpu_family(name, device, family):
    assert family_of(name, device) == family


def test_facts_families_come_from_the_os_listing_and_sycl():
    assert load_facts(A770_WIN).gpu_families == {"arc-a"}
    assert load_facts(MACHINES / "linux_arc_a770.json").gpu_families == {"arc-a", "igpu"}
    assert load_facts(MACHINES / "win11_core_ultra_32gb.json").gpu_families == {"igpu"}


# --- the shipped record -------------------------------------------------------------------------------------------


def _issue() -> KnownIssue:
    return next(i for i in MATRIX.get("xpu-2.14").known_issues if i.id == ISSUE)


def test_the_shipped_record_of_197520():
    issue = _issue()
    assert issue.id == ISSUE and issue.source == "https://github.com/pytorch/pytorch/issues/197520"
    assert issue.gpu_families == ["arc-a"] and issue.platforms == ["win-64"]
    assert issue.severity == "critical" and issue.fixed_in is None
    assert "2.11.0+xpu" in issue.seen and "A730M" in issue.seen and issue.unconfirmed
    assert "A770M" in issue.unconfirmed and "B580" in issue.unconfirmed  # the later comment that did not reproduce it
    # the only pair recorded: 2.11 was clean in the report, 2.12/2.13 untested (left out)
    assert [p.id for p in MATRIX.pairs if any(i.id == ISSUE for i in p.known_issues)] == ["xpu-2.14"]


@pytest.mark.parametrize(
    ("platform", "families", "torch", "hit"),
    [
        ("win-64", {"arc-a"}, "2.14.1", True),
        ("win-64", {"arc-a"}, "2.14.0", True),
        ("win-64", {"arc-a", "igpu"}, "2.14.1", True),
        ("linux-64", {"arc-a"}, "2.14.1", False),
        ("win-64", {"arc-b"}, "2.14.1", False),
        ("win-64", {"igpu"}, "2.14.1", False),
        ("win-64", set(), "2.14.1", False),
    ],
)
def test_which_machines_the_record_hits(platform, families, torch, hit):
    pair = MATRIX.get("xpu-2.14")
    assert (ISSUE in [i.id for i in pair.issues_hitting(platform, families, torch)]) is hit


@pytest.mark.parametrize(
    ("torch", "hit"),
    [("2.14.0", True), ("2.14.0+xpu", True), ("2.14.1", False), ("2.14.1+xpu", False), ("2.15.0", False), ("2.13.0", True)],
)
def test_fixed_in_is_the_first_release_without_it(torch, hit):
    fixed = _issue().model_copy(update={"fixed_in": "2.14.1"})
    assert fixed.hits("win-64", {"arc-a"}, torch) is hit


def test_newest_torch_of_the_pair_is_what_a_build_meets():
    pair = MATRIX.get("xpu-2.14")
    fixed = pair.model_copy(update={"known_issues": [_issue().model_copy(update={"fixed_in": "2.14.1"})]})
    assert fixed.issues_hitting("win-64", {"arc-a"}) == []  # a build installs 2.14.1
    assert len(fixed.issues_hitting("win-64", {"arc-a"}, "2.14.0")) == 1


def test_known_issues_do_not_make_a_lock_stale():
    pair = MATRIX.get("xpu-2.12")
    with_issue = pair.model_copy(update={"known_issues": [_issue()]})
    assert row_hash(with_issue) == row_hash(pair)
    assert row_hash(pair.model_copy(update={"oneapi": "2025.2"})) != row_hash(pair)


# --- validation: a malformed record is a named input error ------------------------------------------------------


def _matrix_with(tmp_path, **changes):
    raw = yaml.safe_load((ROOT / "environments" / "matrix.yaml").read_text(encoding="utf-8"))
    row = next(p for p in raw["pairs"] if p["id"] == "xpu-2.14")
    issue = row["known_issues"][0]
    for key, value in changes.items():
        if value is None:
            issue.pop(key)
        else:
            issue[key] = value
    path = tmp_path / "matrix.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"id": "197520"}, "owner/repository#number"),
        ({"id": "pytorch/pytorch#0"}, "owner/repository#number"),
        ({"source": "http://github.com/pytorch/pytorch/issues/197520"}, "https"),
        ({"source": "https://github.com/pytorch/pytorch/issues/19752"}, "not the URL of pytorch/pytorch#197520"),
        ({"source": "https://github.com/intel/torch-xpu-ops/issues/197520"}, "not the URL"),
        ({"gpu_families": []}, "name at least one"),
        ({"gpu_families": ["arc-c"]}, "gpu_families"),
        ({"platforms": ["osx-arm64"]}, "platforms"),
        ({"platforms": []}, "name at least one"),
        ({"severity": "bad"}, "severity"),
        ({"fixed_in": "soon"}, "fixed_in"),
        ({"seen": None}, "seen"),
        ({"what": None}, "what"),
        ({"typo": "x"}, "typo"),
    ],
)
def test_a_malformed_record_is_refused_by_name(tmp_path, changes, named):
    with pytest.raises(InputError) as err:
        load_matrix(_matrix_with(tmp_path, **changes))
    assert named in str(err.value.render()) and "matrix.yaml" in err.value.render()


def test_the_same_issue_twice_in_a_pair_is_refused(tmp_path):
    raw = yaml.safe_load((ROOT / "environments" / "matrix.yaml").read_text(encoding="utf-8"))
    row = next(p for p in raw["pairs"] if p["id"] == "xpu-2.14")
    row["known_issues"] *= 2
    path = tmp_path / "matrix.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    with pytest.raises(InputError, match="appears twice"):
        load_matrix(path)


def test_a_well_formed_fixed_record_loads(tmp_path):
    matrix = load_matrix(_matrix_with(tmp_path, fixed_in="2.14.1", unconfirmed=None, workaround=None))
    assert matrix.get("xpu-2.14").known_issues[0].fixed_in == "2.14.1"


# --- the doctor -----------------------------------------------------------------------------------------------


def _known(facts):
    (finding,) = run_checks(facts, MATRIX, ["known-issues"]).findings
    return finding


def test_doctor_names_197520_on_a_windows_a770_with_xpu_2_14():
    finding = _known(load_facts(A770_WIN))
    assert finding.status == "warn"
    assert ISSUE in finding.seen and "xpu-2.14 (torch 2.14.1)" in finding.seen and "Windows" in finding.seen
    assert finding.why.startswith("critical: ")
    assert any("https://github.com/pytorch/pytorch/issues/197520" in d for d in finding.details)
    assert "move to xpu-2.10" in finding.fix


def test_doctor_is_quiet_on_the_other_side_of_each_boundary():
    facts = load_facts(A770_WIN)
    b580 = facts.model_copy(
        update={
            "gpus": [GpuInfo(name="Intel(R) Arc(TM) B580 Graphics", vendor_id="8086", device_id="e20b", status="OK")],
            "sycl_devices": [SyclDevice(backend="level_zero", kind="gpu", index=0, name="Intel(R) Arc(TM) B580 Graphics")],
        }
    )
    assert ISSUE not in _known(b580).seen and "xpu-2.14" in _known(b580).seen
    igpu = load_facts(MACHINES / "win11_core_ultra_32gb.json")
    igpu.training_env = facts.training_env
    assert ISSUE not in _known(igpu).seen and "xpu-2.14" in _known(igpu).seen
    linux = load_facts(MACHINES / "linux_arc_a770.json")
    linux.training_env = linux.training_env.model_copy(
        update={"pair": "xpu-2.14", "distributions": {**facts.training_env.distributions}}
    )
    assert ISSUE not in _known(linux).seen and "xpu-2.14" in _known(linux).seen
    older = load_facts(MACHINES / "win11_core_ultra_32gb.json")  # an xpu-2.11 env ...
    older.gpus, older.sycl_devices = facts.gpus, facts.sycl_devices  # ... on the A770
    assert ISSUE not in _known(older).seen and "xpu-2.11" in _known(older).seen


def test_doctor_skips_without_a_known_gpu_family():
    facts = load_facts(A770_WIN)
    facts.gpus, facts.sycl_devices = [], []
    assert _known(facts).status == "skip"


# --- env --dry-run and recommend --------------------------------------------------------------------------------


def test_env_dry_run_names_197520_on_the_a770_facts(capsys):
    code = main(["env", "--pair", "xpu-2.14", "--dry-run", "--facts", str(A770_WIN)])
    err = capsys.readouterr().err
    assert f"warning: known issue {ISSUE} (critical, open) in xpu-2.14" in err
    assert code == 2 and "no win-64 lock for xpu-2.14" in err  # and then: no lock of 2.14 ships


def test_env_dry_run_of_a_locked_pair_carries_its_issues_in_the_plan(capsys, tmp_path):
    code = main(["env", "--pair", "xpu-2.12", "--dry-run", "--json", "--facts", str(A770_WIN)])
    out = capsys.readouterr()
    plan = json.loads(out.out)
    assert code == 0 and plan["platform"] == "win-64" and ISSUE not in out.err
    assert [k.split(" ")[2] for k in plan["known_issues"]] == ["pytorch/pytorch#157714"]  # the A770 meets that one


@pytest.mark.parametrize("machine", ["linux_arc_a770", "win11_core_ultra_32gb"])
def test_env_dry_run_is_quiet_where_the_issue_does_not_apply(capsys, machine):
    main(["env", "--pair", "xpu-2.14", "--dry-run", "--facts", str(MACHINES / f"{machine}.json")])
    assert ISSUE not in capsys.readouterr().err


def test_env_facts_only_plans(capsys):
    assert main(["env", "--pair", "xpu-2.14", "--facts", str(A770_WIN)]) == 2
    assert "--facts" in capsys.readouterr().err


def test_recommend_names_197520_on_the_a770_facts(capsys):
    assert main(["recommend", "--facts", str(A770_WIN), "--json"]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert any(n.startswith(f"known issue {ISSUE}") for n in notes)
    main(["recommend", "--facts", str(MACHINES / "win11_core_ultra_32gb.json"), "--json"])
    assert not any(ISSUE in n for n in json.loads(capsys.readouterr().out)["notes"])


# --- matrix refresh keeps them current --------------------------------------------------------------------------


def _index_torch(version: str):
    from aipc_env.lock.coremeta import CoreMetadata
    from aipc_env.lock.refresh import IndexWheel

    meta = CoreMetadata(
        name="torch",
        version=f"{version}+xpu",
        requires_python=">=3.10",
        requires_dist=("intel-sycl-rt==2026.1.0", "triton-xpu==3.8.0"),
    )
    file = f"torch-{version}+xpu-cp312-cp312-win_amd64.whl"
    return IndexWheel(
        project="torch",
        file=file,
        url=f"https://download.pytorch.org/whl/xpu/{file}",
        sha256="ab" * 32,
        metadata=meta,
        page="https://download.pytorch.org/whl/xpu/torch/",
    )


@pytest.mark.parametrize(("torch", "noted"), [("2.14.2", True), ("2.16.0", False)])
def test_refresh_asks_whether_a_new_release_fixes_an_open_issue(torch, noted):
    from aipc_env.core.formats import load_versioned
    from aipc_env.lock.refresh import plan_refresh
    from aipc_env.lock.wheels import WheelManifest

    manifest = load_versioned(WheelManifest, ROOT / "environments" / "xpu-wheels.yaml")
    plan = plan_refresh(MATRIX, manifest, [_index_torch(torch)], [], "2026-12-04")
    notes = [n for n in plan.notes if ISSUE in n]
    assert bool(notes) is noted  # 2.16 follows xpu-2.15, which records none
    if noted:
        assert notes == [
            f"xpu-2.14: known issue {ISSUE} is open (no fixed_in): check whether torch 2.14.2 fixes it "
            "(https://github.com/pytorch/pytorch/issues/197520); record fixed_in, or carry the record "
            "to torch 2.14.2's row"
        ]
    fixed = MATRIX.model_copy(
        update={
            "pairs": [
                p.model_copy(update={"known_issues": [i.model_copy(update={"fixed_in": "2.14.1"}) for i in p.known_issues]})
                for p in MATRIX.pairs
            ]
        }
    )
    assert not [n for n in plan_refresh(fixed, manifest, [_index_torch(torch)], [], "x").notes if ISSUE in n]


def test_lock_check_refuses_a_malformed_known_issue(tmp_path, capsys):
    bad = _matrix_with(tmp_path, source="https://github.com/pytorch/pytorch/issues/1")
    assert main(["lock", "check", "--pair", "xpu-2.12", "--matrix", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "not the URL of pytorch/pytorch#197520" in err and str(bad) in err
    (tmp_path / "ok").mkdir()
    assert main(["lock", "check", "--pair", "xpu-2.12", "--matrix", str(_matrix_with(tmp_path / "ok"))]) == 0


# --- the bugs of the XPU stack that bite this workflow (the public issues, 2026-12-04) -------------------------------

LUNAR_LAKE = ROOT / "tests" / "fixtures" / "facts" / "lunar_lake_win11_xpu_2_14.json"
"""A saved Lunar Lake (Arc 140V, device 0x64a0) Windows 11 machine with an xpu-2.14 env (torch 2.14.1+xpu)."""


def test_at_least_eight_known_bugs_are_recorded_each_with_its_source():
    issues = {i.id: i for p in MATRIX.pairs for i in p.known_issues}
    assert len(issues) >= 8
    assert {
        "intel/torch-xpu-ops#5201",
        "intel/torch-xpu-ops#5060",
        "intel/torch-xpu-ops#5045",
        "intel/torch-xpu-ops#4925",
        "intel/torch-xpu-ops#5155",
        "pytorch/pytorch#157714",
        "pytorch/pytorch#190972",
        "pytorch/pytorch#189811",
        "unslothai/unsloth#10021",
        "sgl-project/SpecForge#769",
    } <= set(issues)
    for issue in issues.values():
        assert issue.source.startswith("https://github.com/") and issue.seen and issue.gpu_families and issue.platforms
    assert "DIFFUSERS_ATTN_BACKEND=_native_math" in (issues["intel/torch-xpu-ops#5201"].workaround or "")
    # one record per issue, the same in every pair it is listed under (YAML anchors)
    for p in MATRIX.pairs:
        for i in p.known_issues:
            assert i == issues[i.id]


def test_the_doctor_names_the_bugs_of_a_lunar_lake_windows_11_xpu_2_14_machine():
    facts = load_facts(LUNAR_LAKE)
    assert facts.gpu_families == {"igpu"} and facts.is_windows
    finding = _known(facts)
    assert finding.status == "warn"
    named = finding.seen.split(" hit ")[0].split(", ")
    assert named == ["pytorch/pytorch#190972", "intel/torch-xpu-ops#5060", "intel/torch-xpu-ops#5045"]
    assert "xpu-2.14 (torch 2.14.1) with integrated Intel GPU on Windows" in finding.seen
    assert finding.why.startswith("critical: ")  # #5060/#5045: accuracy failures, silent
    assert [d.split(" ")[2] for d in finding.details] == named
    # the Arc B / Arc A / Linux bugs of the same pair are not named on this machine
    for other in ("intel/torch-xpu-ops#4925", "pytorch/pytorch#197520", "pytorch/pytorch#157714", "sgl-project/SpecForge#769"):
        assert other not in finding.seen


def test_env_dry_run_names_them_before_a_build(capsys):
    main(["env", "--pair", "xpu-2.14", "--dry-run", "--facts", str(LUNAR_LAKE)])
    err = capsys.readouterr().err
    for issue in ("intel/torch-xpu-ops#5060", "intel/torch-xpu-ops#5045", "pytorch/pytorch#190972"):
        assert f"warning: known issue {issue}" in err
    assert "intel/torch-xpu-ops#4925" not in err
