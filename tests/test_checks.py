"""Every check, run on whole-machine facts fixtures, with the verdicts a person would expect."""

from __future__ import annotations

import json

import pytest

from aipc_env.doctor import run_checks
from aipc_env.doctor.checks import REGISTRY, Status
from aipc_env.doctor.checks.system import ram_tier_gb
from aipc_env.facts import load_facts
from tests.conftest import MACHINES, run_cli


def verdicts(name: str, matrix) -> dict[str, Status]:
    report = run_checks(load_facts(MACHINES / f"{name}.json"), matrix)
    assert {f.id for f in report.findings} == set(REGISTRY)
    for f in report.findings:
        assert f.status != Status.CRASH, f.details
        if f.status in (Status.WARN, Status.FAIL):
            assert f.fix and f.why, f.id
    return {f.id: f.status for f in report.findings}


def problems(v: dict[str, Status]) -> dict[str, Status]:
    return {k: s for k, s in v.items() if s in (Status.WARN, Status.FAIL)}


def test_good_32gb_core_ultra_windows_passes_everything(matrix):
    v = verdicts("win11_core_ultra_32gb", matrix)
    assert problems(v) == {}
    assert v["pair"] == Status.OK and v["msvc"] == Status.OK and v["long-paths"] == Status.OK


def test_16gb_laptop_fails_only_on_ram(matrix):
    assert problems(verdicts("win11_16gb", matrix)) == {"ram": Status.FAIL}


def test_oneapi_2025_0_activated_over_torch_2_10(matrix):
    v = verdicts("win11_oneapi_2025_0_over_torch_2_10", matrix)
    assert v["oneapi-activated"] == Status.FAIL
    assert v["oneapi-installed"] == Status.WARN
    assert v["setvars-quirk"] == Status.WARN
    assert v["pair"] == Status.OK  # the env itself is a clean 2.10


def test_two_triton_packages(matrix):
    report = run_checks(load_facts(MACHINES / "win11_two_tritons.json"), matrix, ["triton"])
    (f,) = report.findings
    assert f.status == Status.FAIL and "triton-xpu 3.7.0" in f.seen and "triton 3.5.0" in f.seen
    assert f.fix.startswith("pip uninstall -y triton;")


def test_no_msvc(matrix):
    # without MSVC Triton compiles nothing on Windows: NF4 quantize and Adam8bit have no XPU kernel either
    assert problems(verdicts("win11_no_msvc", matrix)) == {"msvc": Status.FAIL, "bnb-backends": Status.FAIL}


def test_mixed_runtime_names_odd_packages(matrix):
    report = run_checks(load_facts(MACHINES / "win11_mixed_runtime.json"), matrix, ["runtime-mix"])
    (f,) = report.findings
    assert f.status == Status.FAIL
    assert any(d.startswith("intel-sycl-rt 2025.3.2") and "xpu-2.11" in d for d in f.details)
    assert any(d.startswith("umf 1.0.3") for d in f.details)


def test_linux_arc_box(matrix):
    v = verdicts("linux_arc_a770", matrix)
    assert problems(v) == {"cpu": Status.WARN, "multi-gpu": Status.WARN}
    assert v["long-paths"] == Status.SKIP and v["msvc"] == Status.SKIP
    report = run_checks(load_facts(MACHINES / "linux_arc_a770.json"), matrix, ["multi-gpu"])
    assert "xpu:0" in report.findings[0].fix and "A770" in report.findings[0].details[0]


def test_this_ci_machine_recorded(matrix):
    v = verdicts("ci_machine", matrix)
    assert v["intel-gpu"] == Status.FAIL and v["ram"] == Status.FAIL
    # a CPU torch is right where there is no Intel GPU (the built-in default trains on the CPU) ...
    (f,) = run_checks(load_facts(MACHINES / "ci_machine.json"), matrix, ["torch-xpu"]).findings
    assert f.status == Status.OK and "no Intel GPU" in f.seen


def test_cpu_torch_on_an_intel_gpu_machine_fails(matrix):
    # ... and wrong where there is one
    facts = load_facts(MACHINES / "linux_arc_a770.json")
    facts.training_env.distributions = {**facts.training_env.distributions, "torch": "2.13.0+cpu"}
    (f,) = run_checks(facts, matrix, ["torch-xpu"]).findings
    assert f.status == Status.FAIL and "XPU index" in f.why


@pytest.mark.parametrize(
    "gib,tier", [(15.6, 16), (31.2, 32), (31.8, 32), (23.5, 24), (62.6, 64), (95.4, 96), (29.0, 32), (27.0, 24)]
)
def test_ram_tiers(gib, tier):
    assert ram_tier_gb(int(gib * 2**30)) == tier


def test_bitsandbytes_too_old_for_2_13(matrix):
    facts = load_facts(MACHINES / "linux_arc_a770.json")
    pkgs = dict(facts.training_env.distributions)
    pkgs.update({"torch": "2.13.0+xpu", "bitsandbytes": "0.49.1"})
    facts.training_env.distributions = pkgs
    (f,) = run_checks(facts, matrix, ["bitsandbytes"]).findings
    assert f.status == Status.FAIL and "0.50.2" in f.seen and "xpu-2.13" in f.seen


def test_stale_kernel_cache_after_rebuild(matrix):
    facts = load_facts(MACHINES / "win11_core_ultra_32gb.json")
    facts.training_env.built_at = "2026-11-25T00:00:00+00:00"
    (f,) = run_checks(facts, matrix, ["kernel-cache"]).findings
    assert f.status == Status.WARN and ".triton" in f.fix


def test_model_dir_missing_parts(matrix):
    facts = load_facts(MACHINES / "win11_core_ultra_32gb.json")
    facts.model.missing, facts.model.present = ["vae", "processor"], ["model_index.json"]
    (f,) = run_checks(facts, matrix, ["model-dir"]).findings
    assert f.status == Status.FAIL and "vae, processor" in f.seen


def test_a_crashing_check_is_isolated(matrix, monkeypatch):
    from aipc_env.doctor.checks.base import CheckSpec

    def boom(ctx):
        raise ZeroDivisionError("bad math")

    monkeypatch.setitem(REGISTRY, "cpu", CheckSpec("cpu", "System", "CPU", boom))
    report = run_checks(load_facts(MACHINES / "win11_core_ultra_32gb.json"), matrix)
    by_id = {f.id: f for f in report.findings}
    assert by_id["cpu"].status == Status.CRASH and "ZeroDivisionError" in by_id["cpu"].seen
    assert by_id["ram"].status == Status.OK and report.exit_code == 1


def test_unreadable_registry_value_is_a_finding(matrix):
    facts = load_facts(MACHINES / "win11_core_ultra_32gb.json")
    facts.registry.tdr_delay = None
    facts.registry.errors["TdrDelay"] = "PermissionError: [WinError 5] Access is denied"
    facts.registry.commit_limit_percentage = 57
    by_id = {f.id: f for f in run_checks(facts, matrix, ["tdr", "gpu-memory-ceiling"]).findings}
    assert by_id["tdr"].status == Status.WARN and "Access is denied" in by_id["tdr"].seen
    assert by_id["gpu-memory-ceiling"].status == Status.WARN and "= 57" in by_id["gpu-memory-ceiling"].seen
    assert "/d 75" in by_id["gpu-memory-ceiling"].fix


def test_last_verification_failed_or_injected(matrix):
    from aipc_env.facts.model import VerifyRecord

    facts = load_facts(MACHINES / "win11_core_ultra_32gb.json")
    facts.last_verify = VerifyRecord(
        when="2026-11-20T10:00:00+00:00",
        passed=False,
        device="xpu:0",
        env_prefix=facts.training_env.prefix,
        summary="6/7 steps passed",
    )
    (f,) = run_checks(facts, matrix, ["last-verify"]).findings
    assert f.status == Status.FAIL and "6/7" in f.seen
    facts.last_verify.injected = ["frozen-optimizer"]
    (f,) = run_checks(facts, matrix, ["last-verify"]).findings
    assert f.status == Status.WARN and "injected" in f.seen


def test_machine_fixtures_are_what_the_builder_writes():
    """The fixtures are built from recorded tool outputs by the real parsers; regenerating must change nothing."""
    import json

    from tests.fixtures.build_machines import machines

    for name, facts in machines().items():
        committed = json.loads((MACHINES / f"{name}.json").read_text(encoding="utf-8"))
        assert committed == facts.model_dump(mode="json"), f"{name}: run python tests/fixtures/build_machines.py"


# the registry, recorded once and reviewed: every check's id, category and title, in the order the doctor runs them
REGISTERED = [
    ("os", "System", "Operating system"),
    ("cpu", "System", "CPU"),
    ("ram", "System", "Memory (RAM)"),
    ("disk", "System", "Free disk space"),
    ("long-paths", "Windows settings", "Long path support"),
    ("gpu-memory-ceiling", "Windows settings", "Shared GPU memory ceiling"),
    ("tdr", "Windows settings", "GPU timeout (TDR)"),
    ("probes", "System", "Fact collection"),
    ("container", "Container", "Running in a container"),
    ("dri-access", "Container", "GPU device nodes (/dev/dri)"),
    ("intel-gpu", "GPU", "Intel GPU"),
    ("gpu-driver", "GPU", "GPU driver"),
    ("multi-gpu", "GPU", "Device selection"),
    ("device-probe", "GPU", "Live XPU probe"),
    ("bnb-backend", "GPU", "bitsandbytes backend"),
    ("known-issues", "GPU", "Known issues of the pair"),
    ("conda", "Toolchain", "conda / mamba"),
    ("msvc", "Toolchain", "MSVC C++ build tools"),
    ("oneapi-installed", "Toolchain", "oneAPI toolkit for the env's pair"),
    ("oneapi-activated", "Toolchain", "Activated oneAPI (setvars)"),
    ("level-zero", "Toolchain", "Level Zero headers"),
    ("setvars-quirk", "Toolchain", "NoDefaultCurrentDirectoryInExePath"),
    ("training-env", "Training env", "Training environment"),
    ("torch-xpu", "Training env", "torch build"),
    ("pair", "Training env", "torch+xpu / oneAPI pair"),
    ("env-lock", "Training env", "Packages match the pair's lock"),
    ("runtime-mix", "Training env", "Intel runtime from one release"),
    ("python", "Training env", "Python version"),
    ("interpreter", "Training env", "Interpreter from the conda layer"),
    ("bitsandbytes", "Training env", "bitsandbytes version"),
    ("bnb-backends", "Training env", "bitsandbytes XPU backends"),
    ("triton", "Training env", "Exactly one Triton"),
    ("kernel-cache", "Training env", "Triton / inductor kernel caches"),
    ("last-verify", "Training env", "Last verification"),
    ("model-dir", "Model", "Qwen-Image-Edit model directory"),
]


def test_the_registry_is_every_check_in_declaration_order():
    assert [(s.id, s.category, s.title) for s in REGISTRY.values()] == REGISTERED


def test_check_attaches_its_spec_and_specs_of_keeps_declaration_order():
    """Called here, not at import, so that a change to check() or specs_of() shows in this test."""
    import types

    from aipc_env.doctor.checks.base import check, specs_of

    def second(ctx):
        return None

    def first(ctx):
        return None

    assert check("zz-first", "GPU", "First")(first) is first
    check("zz-second", "System", "Second")(second)
    module = types.SimpleNamespace(second=second, first=first, number=3, builtin=len, plain=lambda ctx: None)
    specs = specs_of(module)
    assert [(s.id, s.category, s.title, s.fn) for s in specs] == [
        ("zz-first", "GPU", "First", first),
        ("zz-second", "System", "Second", second),
    ]
    assert specs[0].order + 1 == specs[1].order
    assert specs_of(types.SimpleNamespace()) == []


@pytest.mark.parametrize(
    ("machine", "line"),
    [
        (
            "ci_machine",
            "No Intel GPU here: this machine runs the built-in default on the CPU (`aipc-env train`, or `nox -s "
            "train`); fine-tuning Qwen-Image-Edit needs an Intel Core Ultra or Arc GPU.",
        ),
        (
            "win11_16gb",
            "Not ready to train: 1 problem(s); first memory (ram): 15.6 GiB (16 GB class) (fix: use a machine "
            "with 32 GB or more)",
        ),
        ("linux_arc_a770", "Ready to train, with 2 warning(s) below."),
        ("win11_core_ultra_32gb", "Ready to train."),
    ],
)
def test_the_bottom_line_comes_first(matrix, machine, line):
    report = run_checks(load_facts(MACHINES / f"{machine}.json"), matrix)
    assert report.bottom_line == line
    text = run_cli("doctor", "--facts", str(MACHINES / f"{machine}.json")).stdout.splitlines()
    as_json = json.loads(run_cli("doctor", "--facts", str(MACHINES / f"{machine}.json"), "--json").stdout)
    assert text[1] == as_json["bottom_line"]  # right under the header, before any category
