"""Foreign parsers wrapped once, and checks that compare the meaning: markers evaluated through one wrapper with every
PEP 751 variable (a marker that parses but cannot be evaluated is refused where it is read), conda's MatchSpec and
versions bounded and wrapped, conda URLs normalised before the channel rule, a lock's `environments` held to the
target before anything is rendered, and version checks that survive a version that does not parse. Each bound is
tested at, below and above it; each command through the CLI as a user meets it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from packaging.markers import InvalidMarker

from aipc_env.core import specs
from aipc_env.core.platforms import marker_environment
from aipc_env.errors import ExitCode, InputError
from aipc_env.lock import condaspec
from aipc_env.lock.conda_layer import CondaLock, closure_problems, read_conda_lock
from aipc_env.lock.lockfile import read_pylock, require_target
from tests.conftest import ROOT, run_cli

PAIR = "xpu-2.12"
CF = condaspec.CONDA_FORGE


def _named(result, *needles: str, codes: tuple[int, ...] = (ExitCode.USAGE,)) -> None:
    assert result.returncode in codes, (result.returncode, result.stdout[-1000:], result.stderr[-2000:])
    assert "Traceback" not in result.stderr + result.stdout and "internal error" not in result.stderr, result.stderr[-2000:]
    for needle in needles:
        assert needle in result.stderr + result.stdout, (needle, result.stderr[-2000:])


def _locks(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "lockfiles" / PAIR, tmp_path / "locks" / PAIR)
    return tmp_path / "locks"


def _set_first_marker(lock: Path, marker: str) -> None:
    text = lock.read_text(encoding="utf-8")
    start = text.index('marker = "')
    lock.write_text(text[:start] + f'marker = "{marker}"' + text[text.index("\n", start) :], encoding="utf-8")


# --- markers: one evaluation, every PEP 751 variable -----------------------------------------------------------------


@pytest.mark.parametrize(
    "marker, extras, groups, want",
    [
        ("'cpu' in extras", (), (), False),
        ("'cpu' in extras", ("cpu",), (), True),
        ("'dev' in dependency_groups", (), ("dev",), True),
        ("'dev' not in dependency_groups and sys_platform == 'linux'", (), (), True),
        ("extra == 'train'", (), (), False),
    ],
)
def test_pep_751_marker_variables_are_evaluated(marker, extras, groups, want):
    env = marker_environment("linux-64")
    assert specs.evaluate_marker(marker, env, extras=extras, groups=groups) is want


@pytest.mark.parametrize("marker", ["python_version ~= '1'", "platform_release < 'x' and python_version ~= '3'"])
def test_a_marker_that_parses_but_cannot_be_evaluated_is_invalid_marker(marker):
    specs.parse_marker(marker)  # packaging parses it...
    with pytest.raises(InvalidMarker, match="cannot be evaluated"):  # ...and cannot evaluate it
        specs.evaluate_marker(marker, marker_environment("win-64"))
    with pytest.raises(ValueError, match="cannot be evaluated"):
        specs.check_marker(marker)
    with pytest.raises(ValueError, match="cannot be evaluated"):
        specs.check_requirement(f"numpy; {marker}")


@pytest.mark.parametrize(
    "marker, ok",
    [
        ("python_version ~= '3.1'", True),  # two segments: ~= is defined
        ("python_version ~= '1'", False),
        ("'cpu' in extras", True),
        ("'dev' in dependency_groups", True),
    ],
)
def test_a_lock_marker_through_lock_check_env_dry_run_and_container_render(tmp_path, marker, ok):
    root = _locks(tmp_path)
    _set_first_marker(root / PAIR / "pylock.linux-64.toml", marker)
    _set_first_marker(root / PAIR / "pylock.win-64.toml", marker)
    if ok:
        assert read_pylock(root / PAIR / "pylock.linux-64.toml").packages
    for argv in (
        ["lock", "check", "--pair", PAIR],
        ["env", "--dry-run", "--pair", PAIR],
        ["container", "render", "--pair", PAIR, "--gpu-runtime", "none", "--out", str(tmp_path / "ctx")],
    ):
        result = run_cli(*argv, "--lock-root", str(root), "--json", cwd=tmp_path)
        if ok:
            assert result.returncode in (0, 1, 2) and "Traceback" not in result.stderr, result.stderr[-2000:]
            assert "cannot be evaluated" not in result.stdout + result.stderr
        else:
            _named(result, "cannot be evaluated", "marker")
        json.loads(result.stdout)  # a document either way
    assert not (tmp_path / "ctx").exists() or ok


# --- a lock's environments held to the target ------------------------------------------------------------------------


def test_a_lock_for_windows_renders_no_linux_image(tmp_path):
    root = _locks(tmp_path)
    win = root / PAIR / "pylock.win-64.toml"
    shutil.copyfile(win, root / PAIR / "pylock.linux-64.toml")
    with pytest.raises(InputError, match="not linux-64") as err:
        read_pylock(root / PAIR / "pylock.linux-64.toml", "linux-64")
    assert err.value.key == "environments"
    ctx = str(tmp_path / "ctx")
    result = run_cli("container", "render", "--pair", PAIR, "--gpu-runtime", "none", "--lock-root", str(root), "--out", ctx)
    _named(result, "environments", "not linux-64")
    assert not (tmp_path / "ctx").exists()  # refused before anything was written


def test_require_target_at_the_rule():
    lock = read_pylock(ROOT / "lockfiles" / PAIR / "pylock.linux-64.toml")
    require_target(lock, Path("x"), "linux-64")  # its own platform: fine
    with pytest.raises(InputError):
        require_target(lock, Path("x"), "win-64")
    require_target(lock.model_copy(update={"environments": None}), Path("x"), "win-64")  # no environments: every one
    both = lock.model_copy(update={"environments": ["sys_platform == 'win32'", "sys_platform == 'linux'"]})
    require_target(both, Path("x"), "win-64")


# --- conda values bounded, MatchSpec wrapped -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "version, ok",
    [
        ("1." + "0" * 24, True),
        ("1." + "0" * 25, False),  # the digit run: at and above the bound
        ("1" + ".0" * 63 + "1", True),  # 128 characters
        ("1" + ".0" * 64, False),  # 129
        ("9" * 5000, False),
        ("3.12 5", False),
        ("1!2.0+local_1", True),
    ],
)
def test_conda_version_bounds(version, ok):
    if ok:
        assert condaspec.check_conda_version(version) == version
    else:
        with pytest.raises(condaspec.CondaSpecError):
            condaspec.check_conda_version(version)


@pytest.mark.parametrize(
    "spec, ok",
    [
        (">=3.8", True),
        (">=3.8,<", False),  # MatchSpec: invalid operator
        ("==1.0=", False),
        ("[", False),
        (">=" + "9" * 24, True),
        (">=" + "9" * 25, False),
        (">=" + "9" * 5000, False),
    ],
)
def test_matchspec_refusals_are_named(spec, ok):
    record = {"name": "python", "version": "3.12.5", "build": "h_1", "build_number": 0}
    if ok:
        assert isinstance(condaspec.matches("python", spec, record), bool)
    else:
        with pytest.raises(condaspec.CondaSpecError, match="python"):
            condaspec.matches("python", spec, record)


def _doc() -> dict:
    return yaml.safe_load((ROOT / "lockfiles" / PAIR / "conda-lock.yml").read_text())


def _with(change) -> dict:
    doc = _doc()
    pkg = next(p for p in doc["package"] if p["platform"] == "linux-64" and p["name"] == "pip")
    change(pkg, doc)
    return doc


def test_a_dependency_spec_matchspec_refuses_is_a_problem_not_a_crash():
    doc = _with(lambda pkg, doc: None)
    python = next(p for p in doc["package"] if p["platform"] == "linux-64" and p["name"] == "python")
    dep = next(d for d in python["dependencies"] if not d.startswith("__"))
    python["dependencies"][dep] = ">=3.8,<"
    problems = closure_problems(CondaLock.model_validate(doc))
    assert any("MatchSpec refuses" in p and dep in p for p in problems), problems


PIP_URL = "linux-64/pip-24.2-pyh8b19718_1.conda"


@pytest.mark.parametrize(
    "url, ok",
    [
        (CF + "noarch/pip-24.2-pyh8b19718_1.conda", True),
        (CF + "noarch/pip-24.2.conda", False),  # no version and build
        (CF + "noarch/pip.conda", False),
        (CF + "noarch/pip--.conda", False),
        (CF + "noarch/../../evil/noarch/pip-24.2-pyh8b19718_1.conda", False),  # leaves the channel
        (CF + "noarch/%2e%2e/%2e%2e/evil/noarch/pip-24.2-pyh8b19718_1.conda", False),
        (CF + "noarch/./pip-24.2-pyh8b19718_1.conda", False),  # stays, but is not the normal form
        (CF + "win-64/pip-24.2-pyh8b19718_1.conda", False),  # another platform's subdir
        (CF + "noarch/setuptools-24.2-pyh8b19718_1.conda", False),  # another package
        (CF + "noarch/pip-24.3-pyh8b19718_1.conda", False),  # another version
        (CF + "noarch/pip-24.2-pyh8b19718_1.conda?x=1", False),
        ("https://conda.anaconda.org:8443/conda-forge/noarch/pip-24.2-pyh8b19718_1.conda", False),
        (CF + "noarch/" + "p" * 1100 + "-24.2-b.conda", False),
    ],
)
def test_conda_urls_compare_their_meaning(tmp_path, url, ok):
    doc = _with(lambda pkg, doc: pkg.update(url=url))
    path = tmp_path / "conda-lock.yml"
    path.write_text(yaml.safe_dump(doc))
    if ok:
        assert read_conda_lock(path)
    else:
        with pytest.raises(InputError) as err:
            read_conda_lock(path)
        assert str(path) in err.value.render() and "url" in err.value.render()


@pytest.mark.parametrize("file", ["pip--.conda", "pip-24.2-.conda", "pip--b.conda", "-24.2-b.conda", "pip-24.2.conda"])
def test_a_file_name_without_its_version_or_build(file):
    with pytest.raises(condaspec.CondaSpecError, match=r"not name-version-build|not a conda package name"):
        condaspec.split_filename(CF + "noarch/" + file)
    assert condaspec.split_filename(CF + "noarch/pip-24.2-b.conda") == ("pip", "24.2", "b")


@pytest.mark.parametrize(
    "url, normal",
    [
        ("https://A.org/x/./y/../z.conda", "https://a.org/x/z.conda"),
        ("https://a.org/x/%2E%2E/z.conda", "https://a.org/z.conda"),
        ("https://a.org/../../z.conda", "https://a.org/z.conda"),
        ("https://a.org/x/..", "https://a.org/"),
    ],
)
def test_normalise_url(url, normal):
    assert condaspec.normalise_url(url) == normal


@pytest.mark.parametrize(
    "change, named",
    [
        (lambda pkg, doc: pkg.update(version="9" * 5000), "longer than 128"),
        (lambda pkg, doc: pkg.update(version="1." + "9" * 25), "digits"),
        (lambda pkg, doc: pkg.update(version="1" + ".0" * 64), "longer than 128"),
        (lambda pkg, doc: pkg.update(build="x y"), "build"),
        (lambda pkg, doc: pkg["dependencies"].update(python=">=" + "9" * 5000), "longer than 512"),
        (lambda pkg, doc: pkg["dependencies"].update(python=">=" + "9" * 25), "digits"),
        (lambda pkg, doc: pkg["dependencies"].update({"py thon": ">=3"}), "package name"),
    ],
)
def test_a_hostile_conda_record_is_a_named_error_through_lock_check(tmp_path, change, named):
    root = _locks(tmp_path)
    (root / PAIR / "conda-lock.yml").write_text(yaml.safe_dump(_with(change)))
    with pytest.raises(InputError, match=named):
        read_conda_lock(root / PAIR / "conda-lock.yml")
    _named(run_cli("lock", "check", "--pair", PAIR, "--lock-root", str(root)), "conda-lock.yml", named)


def test_an_env_build_never_hands_a_url_that_leaves_the_channel_to_the_installer(tmp_path):
    root = _locks(tmp_path)
    evil = CF + "noarch/../../../evil/noarch/pip-24.2-pyh8b19718_1.conda"
    (root / PAIR / "conda-lock.yml").write_text(yaml.safe_dump(_with(lambda pkg, doc: pkg.update(url=evil))))
    from aipc_env.lock.conda_layer import layer_for

    with pytest.raises(InputError, match="normal form"):
        layer_for(root / PAIR, "linux-64", "3.12")  # what the env build asks before it runs any installer


# --- versions that do not parse where a check compares them ----------------------------------------------------------


def test_a_known_issue_on_a_torch_version_that_does_not_parse():
    from aipc_env.matrix import load_matrix

    matrix = load_matrix()
    pair = next(p for p in matrix.pairs if p.known_issues)
    issue = pair.known_issues[0].model_copy(update={"fixed_in": "2.50"})  # fixed: the comparison is made
    assert issue.affects("9" * 5000) and issue.affects("not a version") and issue.affects("2.0")
    assert issue.affects("2.49.9+xpu") and not issue.affects("2.50") and not issue.affects("99.0")
    from aipc_env.matrix.known_issues import issue_warnings

    open_issue = pair.known_issues[0]
    warnings = issue_warnings(pair, open_issue.platforms[0], set(open_issue.gpu_families), "x" * 5000)
    assert warnings and open_issue.id in warnings[0]


@pytest.mark.parametrize("version, ok", [("0.50.2", True), ("9" * 24, True), ("9" * 25, False), ("1." + "9" * 5000, False)])
def test_a_hostile_bitsandbytes_version_in_saved_facts(tmp_path, version, ok):
    facts = json.loads((ROOT / "tests" / "fixtures" / "machines" / "win11_core_ultra_32gb.json").read_text())
    env = facts.get("training_env") or {}
    env.setdefault("prefix", "C:/env")
    env.setdefault("distributions", {})["bitsandbytes"] = version
    env["error"] = None
    facts["training_env"] = env
    path = tmp_path / "facts.json"
    path.write_text(json.dumps(facts))
    result = run_cli("doctor", "--facts", str(path), "--json", "--check", "bitsandbytes")
    assert result.returncode in (0, 1), result.stderr[-2000:]
    report = json.loads(result.stdout)
    finding = next(f for f in report["findings"] if f["id"] == "bitsandbytes")
    assert finding["status"] != "crash", finding
    assert ("is not a version" in finding["seen"]) is (not ok), finding


# --- arguments that are not UTF-8, terminal codes in arguments --------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        [b"doctor", b"--facts", b"a\xff.json"],
        [b"lock", b"check", b"--pair", b"x\xff"],
        [b"dataset", b"validate", b"/nowhere/\xfe\xff"],
        [b"train", b"c\xff.yaml", b"--dry-run"],
        [b"bo\xffgus"],
    ],
)
def test_an_argument_that_is_not_utf8_gets_its_json_error_document(argv):
    import subprocess
    import sys

    result = subprocess.run([sys.executable.encode(), b"-m", b"aipc_env", *argv, b"--json"], capture_output=True, cwd=ROOT)
    assert result.returncode == ExitCode.USAGE, result.stderr[-1500:]
    doc = json.loads(result.stdout)
    assert doc["error"] and doc["code"] == 2
    shown = " ".join(str(v) for v in doc.values())
    assert "\\xff" in shown or "\\xfe" in shown or "\\udcff" in shown, doc  # the bytes, shown escaped
    assert b"Traceback" not in result.stderr


def test_an_arguments_terminal_codes_are_escaped_on_stderr():
    result = run_cli("doctor", "\x1b[2J\x1b]0;owned\x07extra")  # argparse's "unrecognized arguments" quotes it raw
    assert result.returncode == ExitCode.USAGE
    assert "\x1b" not in result.stderr and "\x07" not in result.stderr
    assert "\\x1b[2J" in result.stderr  # shown, escaped


def test_conda_locks_traceback_goes_to_the_log_not_the_screen(tmp_path, monkeypatch, capsys):
    """The real conda-lock, rendering a file it cannot read, prints a Python traceback: the env build keeps it in
    its log and says what failed, naming the log, on the screen."""
    import os
    import sys

    from aipc_env.core.procs import CommandFailed
    from aipc_env.lock.tools import CondaTool
    from aipc_env.matrix import load_matrix
    from aipc_env.trainenv.build import EnvRequest, _interpreter_layer

    monkeypatch.setenv("PATH", str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
    broken = tmp_path / "conda-lock.yml"
    broken.write_text("version: 1\nmetadata: {}\npackage: []\n")
    log = tmp_path / "env.log"
    req = EnvRequest(
        pair=load_matrix().get(PAIR),
        prefix=tmp_path / "env",
        platform="linux-64",
        lock_root=tmp_path,
        log=log,
        conda_tool=CondaTool("micromamba", "/bin/false"),
    )
    with pytest.raises(CommandFailed) as err:
        _interpreter_layer(req, broken, "3.12")
    assert "conda-lock could not render" in (err.value.fix or "") and err.value.path == str(log)
    assert "Traceback" not in capsys.readouterr().err
    assert "Traceback" in log.read_text()
