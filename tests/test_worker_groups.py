"""The slow tier's units of work (tests/conftest.py `worker_groups`, `--dist loadgroup`): a file is one unit, the
tests its WORKER_GROUPS names are units of their own, and every name there is a test the file still has (a renamed
test would silently rejoin its file's unit). Units start most costly first, by the per-file times last recorded in
benchmarks/results/suite.json (`slowest_first`)."""

from __future__ import annotations

import ast
import json
import types
from pathlib import Path

import pytest

from tests.conftest import SUITE_TIMES, measured_costs, pytest_collection_modifyitems, slowest_first, worker_groups

TESTS = Path(__file__).parent


@pytest.fixture(autouse=True)
def _xdist_group_marker(request):
    """The marker xdist registers, for a run without xdist (-p no:xdist) under --strict-markers."""
    request.config.addinivalue_line("markers", "xdist_group(name): the tests of one xdist group run on one worker")


class _Item:
    def __init__(self, module: types.ModuleType, path: Path, name: str) -> None:
        self.module, self.path, self.name, self.originalname = module, path, f"{name}[x]", name
        self.markers: list[pytest.Mark] = []

    def add_marker(self, marker: pytest.MarkDecorator) -> None:
        self.markers.append(marker.mark)


def _items(groups: dict[str, str] | None) -> list[_Item]:
    module = types.ModuleType("test_long")
    if groups is not None:
        module.WORKER_GROUPS = groups
    return [_Item(module, TESTS / "test_long.py", name) for name in ("test_a", "test_b", "test_c")]


def _groups(items: list[_Item]) -> dict[str, list[str]]:
    return {item.originalname: [m.args[0] for m in item.markers if m.name == "xdist_group"] for item in items}


def test_a_file_is_one_unit_but_the_tests_its_worker_groups_names():
    items = _items({"test_b": "part"})
    worker_groups(items)
    assert _groups(items) == {"test_a": ["test_long.py"], "test_b": ["test_long.py:part"], "test_c": ["test_long.py"]}
    plain = _items(None)
    worker_groups(plain)
    assert _groups(plain) == {name: ["test_long.py"] for name in ("test_a", "test_b", "test_c")}


@pytest.mark.parametrize("loadgroup", [True, False])
def test_groups_are_given_only_under_loadgroup(loadgroup):
    items = _items({"test_b": "part"})
    option = types.SimpleNamespace(loadgroup=loadgroup)
    config = types.SimpleNamespace(option=option, getoption=lambda name, default=None: "loadgroup" if loadgroup else "no")
    pytest_collection_modifyitems(config, items)
    assert all(bool(groups) is loadgroup for groups in _groups(items).values())


def test_every_split_names_a_test_its_file_has():
    found = 0
    for path in sorted(TESTS.glob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        tests = {node.name for node in tree.body if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")}
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "WORKER_GROUPS" for t in node.targets):
                groups = ast.literal_eval(node.value)
                assert set(groups) <= tests, (path.name, set(groups) - tests)
                found += len(groups)
    assert found >= 2  # test_qflux.py's smoke, test_fleet_ansible.py's plays


def test_files_start_most_costly_first_by_the_recorded_times(tmp_path):
    module = types.ModuleType("m")
    items = [
        _Item(module, TESTS / name, "test_x") for name in ("test_a.py", "test_b.py", "test_new.py", "test_c.py", "test_b.py")
    ]
    recorded = tmp_path / "suite.json"
    tiers = {"fast": {"files": {"tests/test_a.py": 2.0}}, "slow": {"files": {"tests/test_b.py": 90.5, "tests/test_c.py": 40}}}
    old = {"slow": {"files": {"tests/test_c.py": 500.0}}, "fast": {"files": {"tests/test_old.py": 9.0}}}
    partial = {"fast": {"files": {"tests/test_a.py": 3.0}}}  # a run that recorded the fast tier only
    runs = {"old": {"tiers": old}, "latest": {"tiers": tiers}, "partial": {"tiers": partial}}
    recorded.write_text(json.dumps({"runs": runs}))
    costs = measured_costs(recorded)
    assert costs == {"test_a.py": 3.0, "test_b.py": 90.5, "test_c.py": 40.0}  # each tier's latest run
    slowest_first(items, costs)
    assert [item.path.name for item in items] == ["test_b.py", "test_b.py", "test_c.py", "test_a.py", "test_new.py"]


@pytest.mark.parametrize("text", ["", "{}", '{"runs": {}}', '{"runs": {"x": {"tiers": {"slow": {"files": {"a": "x"}}}}}}', "[1]"])
def test_unreadable_recorded_times_leave_collection_order(tmp_path, text):
    recorded = tmp_path / "suite.json"
    recorded.write_text(text)
    assert measured_costs(recorded) == {}
    assert measured_costs(tmp_path / "missing.json") == {}


def test_the_recorded_times_name_the_suites_costliest_files():
    costs = measured_costs()
    assert costs, SUITE_TIMES
    assert all((TESTS / name).is_file() for name in sorted(costs, key=costs.get, reverse=True)[:10]), costs


def test_each_test_records_its_cpu_seconds_and_its_childrens():
    """The `cpu_s` JUnit property (tests/conftest.py): a test's own CPU and that of the children it waited for, taken
    from setup to teardown; added once, at teardown."""
    import subprocess
    import sys

    from tests.conftest import pytest_runtest_makereport, pytest_runtest_setup

    item = types.SimpleNamespace(stash=pytest.Stash(), user_properties=[])
    setup = pytest_runtest_setup(item)
    next(setup)
    burn = "import time\nwhile time.process_time() < 0.5: sum(range(10**5))\nprint(time.process_time())"
    child = subprocess.run([sys.executable, "-c", burn], check=True, capture_output=True, text=True)
    for when in ("setup", "call", "teardown"):
        report = pytest_runtest_makereport(item, types.SimpleNamespace(when=when))
        next(report)
    ((name, value),) = item.user_properties
    # the child's own count, less the property's rounding and the kernel's tick
    assert name == "cpu_s" and value >= float(child.stdout) - 0.02 >= 0.48, (item.user_properties, child.stdout)


def test_suite_times_sums_the_recorded_cpu_seconds_per_file(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("suite_times", TESTS.parent / "benchmarks" / "suite_times.py")
    assert spec and spec.loader
    suite_times = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(suite_times)
    junit = tmp_path / "slow.xml"
    case = (
        '<testcase classname="tests.{f}" name="{n}" time="{t}">'
        '<properties><property name="cpu_s" value="{c}"/></properties></testcase>'
    )
    cases = [
        case.format(f="test_a", n="x", t=5, c=1.25),
        case.format(f="test_a", n="y", t=1, c=2.5),
        case.format(f="test_b", n="z", t=9, c=0.5),
    ]
    unmeasured = '<testcase classname="tests.test_c" name="w" time="3"/>'
    junit.write_text(f'<testsuites><testsuite name="pytest">{"".join(cases)}{unmeasured}</testsuite></testsuites>')
    assert suite_times.file_cpu(junit) == {"tests/test_a.py": 3.8, "tests/test_b.py": 0.5}
    assert suite_times.file_times(junit) == {"tests/test_b.py": 9.0, "tests/test_a.py": 6.0, "tests/test_c.py": 3.0}
