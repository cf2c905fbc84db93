"""Property-based fuzz tests of every reader of a file or an argument (the map from readers to these tests is in
tests/test_fuzz_registry.py). The property: a result or a named error (AipcError, exit 1 or 2; a ValueError with a
sentence where the rule's contract says so), never a traceback, never a write outside the output folder, and under
--json one JSON document. Examples are hostile values (huge numbers, surrogates, control characters, Jinja, `..`)
placed into documents shaped like the real ones (the committed JSON Schemas, the shipped locks, the fixtures)."""

from __future__ import annotations

import copy
import io
import json
import re
import tomllib
from typing import Any

import pytest
import tomli_w
import yaml
from hypothesis import assume, example, given
from hypothesis import strategies as st
from packaging.markers import InvalidMarker
from packaging.requirements import InvalidRequirement
from packaging.specifiers import InvalidSpecifier
from packaging.version import InvalidVersion

from aipc_env.core import fileio, specs
from aipc_env.core.platforms import PLATFORMS, marker_environment
from aipc_env.errors import AipcError, ExitCode
from aipc_env.lock import condaspec
from tests.conftest import ROOT
from tests.fuzz import ANY_JSON, FUZZ, SCALARS, TEXT, from_schema, result_or_named_error

SCHEMAS = ROOT / "docs" / "schemas"


def _versioned_models() -> dict[str, Any]:
    from aipc_env.core.formats import VersionedModel
    from tests.support.scripts import load_script

    models = load_script("gen_schemas").models

    return {name: m for name, m in models().items() if isinstance(m, type) and issubclass(m, VersionedModel)}


VERSIONED = _versioned_models()
YAML_FORMATS = {"train-config", "distill-config", "matrix", "gpu-runtime-table", "winget-pins", "xpu-wheel-manifest"}


# --- every versioned file format, from its committed schema ----------------------------------------------------------


@pytest.mark.parametrize("name", sorted(VERSIONED))
def test_fuzz_versioned_files_from_their_schemas(name, tmp_path):
    """Records, journals, manifests, reports, facts, configs and the data files: every VersionedModel read from a
    document shaped by its committed schema, through load_versioned (what every reader of these files calls)."""
    from aipc_env.core.formats import load_versioned

    model = VERSIONED[name]
    schema = json.loads((SCHEMAS / f"{name}.schema.json").read_text(encoding="utf-8"))
    path = tmp_path / (f"{name}.yaml" if name in YAML_FORMATS else f"{name}.json")

    @FUZZ
    @given(doc=from_schema(schema))
    def check(doc: Any) -> None:
        try:
            text = yaml.safe_dump(doc) if path.suffix == ".yaml" else json.dumps(doc, allow_nan=True)
            path.write_text(text, encoding="utf-8", errors="surrogatepass")
        except (ValueError, UnicodeEncodeError, yaml.YAMLError):
            assume(False)  # a document no file can hold
        result_or_named_error(load_versioned, model, path)

    check()


@FUZZ
@given(data=st.binary(max_size=300), kind=st.sampled_from(["json", "yaml", "toml"]))
def test_fuzz_text_readers_on_bytes(tmp_path_factory, data, kind):
    """core/fileio's readers (every JSON, YAML and TOML file of the tool goes through one): any bytes."""
    path = tmp_path_factory.mktemp("f") / f"f.{kind}"
    path.write_bytes(data)
    if kind == "toml":
        result_or_named_error(lambda: fileio.parse_toml(fileio.read_text(path), path))
    else:
        result_or_named_error(fileio.read_json if kind == "json" else fileio.read_yaml, path)


@FUZZ
@given(text=st.one_of(TEXT, st.text(alphabet="{}[]:,\"'-&*!| \n0123456789.eE+<>=~a", max_size=200)))
def test_fuzz_text_parsers(text):
    for parse in (fileio.parse_json, fileio.parse_yaml, fileio.parse_toml):
        result_or_named_error(parse, text, "f", "test file")


YAML_PRINTABLE = st.characters(categories=("L", "N", "P", "S", "Zs"))
"""Characters a YAML double-quoted key holds as written (no control characters): json.dumps(ensure_ascii=False) then
escapes only the quote and the backslash, as YAML does."""


@FUZZ
@given(pairs=st.lists(st.tuples(st.text(YAML_PRINTABLE, max_size=6), st.integers(-9, 9)), max_size=6), flow=st.booleans())
def test_fuzz_yaml_keys_written_once_or_twice(pairs, flow):
    """A mapping of any (possibly repeated) keys, block or flow style: what a dict of the pairs holds when every key
    is written once, else the named error for the first key written again, never the last value kept silently."""
    items = [f"{json.dumps(key, ensure_ascii=False)}: {value}" for key, value in pairs]  # a JSON string is YAML's too
    text = "{" + ", ".join(items) + "}\n" if flow else "".join(f"{item}\n" for item in items) or "{}\n"
    keys = [key for key, _ in pairs]
    again = next((key for i, key in enumerate(keys) if key in keys[:i]), None)
    if again is None:
        assert fileio.parse_yaml(text, "f.yaml") == dict(pairs)
    else:
        with pytest.raises(AipcError, match=f"the key {re.escape(repr(again[:80]))} appears twice"):
            fileio.parse_yaml(text, "f.yaml")


# --- packaging and conda, each through its one wrapper ---------------------------------------------------------------


@FUZZ
@given(text=st.one_of(TEXT, st.text(alphabet="0123456789.*+!abcrv=<>~,; '\"_()extrasin", max_size=60)))
def test_fuzz_version_requirement_specifier_marker(text):
    """The bounded parsers: a value or packaging's own Invalid* (a ValueError with a sentence that every caller's
    handler of an invalid value handles), nothing else: not UndefinedComparison, not a bare ValueError from int()."""
    invalid = (InvalidVersion, InvalidSpecifier, InvalidRequirement, InvalidMarker)
    for parse in (specs.parse_version, specs.parse_specifier, specs.parse_requirement, specs.parse_marker):
        try:
            parse(text)
        except invalid as exc:
            assert str(exc)
    try:
        for platform in PLATFORMS:
            specs.evaluate_marker(text, marker_environment(platform), extras={"cpu"}, groups={"dev"})
    except invalid as exc:
        assert str(exc)


@FUZZ
@given(
    name=st.one_of(TEXT, st.sampled_from(["python", "pip", "libzlib"])),
    spec=st.one_of(TEXT, st.text(alphabet="0123456789.*<>=,|! _abh", max_size=30)),
    version=st.one_of(TEXT, st.text(alphabet="0123456789.a_+!", max_size=30)),
    url=st.one_of(
        TEXT,
        st.builds(
            lambda sub, file: condaspec.CONDA_FORGE + sub + "/" + file,
            st.sampled_from(["noarch", "linux-64", "win-64", "..", "%2e%2e", ".", "x/.."]),
            st.text(alphabet="abc-._0123456789%/", max_size=30).map(lambda s: s + ".conda"),
        ),
    ),
)
def test_fuzz_conda_values(name, spec, version, url):
    for call in (
        lambda: condaspec.check_conda_name(name),
        lambda: condaspec.check_conda_spec(spec),
        lambda: condaspec.check_conda_version(version),
        lambda: condaspec.check_package_url(url),
        lambda: condaspec.normalise_url(url),
        lambda: condaspec.matches(name, spec, {"name": name, "version": version, "build": "h_0", "build_number": 0}),
    ):
        try:
            call()
        except condaspec.CondaSpecError as exc:
            assert str(exc)
    try:
        normal = condaspec.check_package_url(url)
    except condaspec.CondaSpecError:
        return
    assert condaspec.normalise_url(normal) == normal and normal.startswith(condaspec.CONDA_FORGE)
    assert "/../" not in normal and "/./" not in normal


# --- locks: the shipped ones, with a value replaced anywhere ---------------------------------------------------------


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            found += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            found += _paths(v, (*prefix, i))
    return found


def _replace(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    doc = copy.copy(doc)
    doc[path[0]] = _replace(doc[path[0]], path[1:], value)
    return doc


def _mutations(doc: Any, values: st.SearchStrategy[Any], count: int = 3) -> st.SearchStrategy[Any]:
    paths = _paths(doc)[1:]  # every value inside the document (a whole document replaced: test_fuzz_text_parsers)

    def apply(edits: list[tuple[int, Any]]) -> Any:
        out = doc
        for index, value in edits:
            path = paths[index % len(paths)]
            try:
                out = _replace(out, path, value)
            except (KeyError, IndexError, TypeError):
                pass
        return out

    return st.lists(st.tuples(st.integers(min_value=0), values), min_size=1, max_size=count).map(apply)


PYLOCK = tomllib.loads((ROOT / "lockfiles" / "xpu-2.12" / "pylock.linux-64.toml").read_text(encoding="utf-8"))
CONDA = yaml.safe_load((ROOT / "lockfiles" / "xpu-2.12" / "conda-lock.yml").read_text(encoding="utf-8"))
LOCK_VALUES = st.one_of(
    SCALARS, st.sampled_from(["python_version ~= '1'", "'cpu' in extras", "sys_platform == 'win32'", "1.0", "x" * 300])
)


@FUZZ
@given(doc=_mutations(PYLOCK, LOCK_VALUES), platform=st.sampled_from(PLATFORMS))
def test_fuzz_pylock(tmp_path_factory, doc, platform):
    """A PEP 751 lock with values replaced anywhere: read (with the target check), then planned, diffed and checked
    against the matrix row, as lock check, env --dry-run, container render and the env build do."""
    from aipc_env.lock.artifacts import install_plan
    from aipc_env.lock.lockfile import check_pylock, read_pylock
    from aipc_env.matrix import load_matrix
    from aipc_env.trainenv.drift import locked_packages

    try:
        text = tomli_w.dumps(_tomlable(doc))
    except (TypeError, ValueError, AttributeError):
        assume(False)
    path = tmp_path_factory.mktemp("lock") / "pylock.linux-64.toml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    lock = result_or_named_error(read_pylock, path, platform)
    if isinstance(lock, AipcError):
        return
    result_or_named_error(install_plan, lock, "3.12", path, platform)
    result_or_named_error(locked_packages, lock, platform, "3.12")
    result_or_named_error(check_pylock, lock, path, load_matrix().get("xpu-2.12"), platform)


def _tomlable(doc: Any) -> Any:
    if doc is None:
        raise TypeError("TOML has no null")
    if isinstance(doc, dict):
        return {str(k): _tomlable(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_tomlable(v) for v in doc]
    return doc


@FUZZ
@given(
    doc=_mutations(CONDA, st.one_of(SCALARS, st.sampled_from([">=3.8,<", "9" * 5000, condaspec.CONDA_FORGE + "noarch/x.conda"])))
)
def test_fuzz_conda_layer(tmp_path_factory, doc):
    from aipc_env.lock.conda_layer import closure_problems, read_conda_lock

    path = tmp_path_factory.mktemp("conda") / "conda-lock.yml"
    try:
        path.write_text(yaml.safe_dump(doc), encoding="utf-8", errors="surrogatepass")
    except (yaml.YAMLError, UnicodeEncodeError):
        assume(False)
    lock = result_or_named_error(read_conda_lock, path)
    if not isinstance(lock, AipcError):
        assert isinstance(result_or_named_error(closure_problems, lock), list)


# --- images, datasets, held-out sets -----------------------------------------------------------------------------------


def _png(w: int, h: int, mode: str = "RGB") -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new(mode, (w, h)).save(buf, format="PNG")
    return buf.getvalue()


PNG = _png(16, 16)


@FUZZ
@given(
    data=st.one_of(
        st.binary(max_size=200),
        st.builds(
            lambda cut, flip, byte: bytes(PNG[:cut]) if flip is None else PNG[:flip] + bytes([byte]) + PNG[flip + 1 :],
            st.integers(min_value=0, max_value=len(PNG)),
            st.one_of(st.none(), st.integers(min_value=0, max_value=len(PNG) - 1)),
            st.integers(min_value=0, max_value=255),
        ),
    )
)
def test_fuzz_image_headers(data):
    from aipc_env.dataset.images import MAX_PIXELS, ImageProblem, check_image

    try:
        header = check_image(data)
    except ImageProblem as exc:
        assert str(exc)
        return
    assert 0 < header.width * header.height <= MAX_PIXELS


NAMES = st.sampled_from(["a.png", "b.png", "a.txt", "b.txt", "a_control_1.png", "a_mask.png", "train.csv", "x.jpg"])
CONTENT = st.one_of(
    st.binary(max_size=64), st.just(PNG), st.just(_png(16, 16, "I;16")), TEXT.map(lambda t: t.encode("utf-8", "surrogatepass"))
)


@FUZZ
@given(
    files=st.dictionaries(st.tuples(st.sampled_from(["training_images", "control_images", "."]), NAMES), CONTENT, max_size=8),
    csv=st.one_of(st.none(), st.text(alphabet='path_target,control prompt.png\n"ab', max_size=80)),
)
def test_fuzz_datasets(tmp_path_factory, files, csv):
    """A dataset folder (or CSV) of hostile files: validated (every image opened) to a verdict or a named error,
    and nothing written anywhere."""
    from aipc_env.dataset.validate import validate_dataset

    root = tmp_path_factory.mktemp("ds")
    for (folder, name), data in files.items():
        (root / folder).mkdir(exist_ok=True)
        (root / folder / name).write_bytes(data)
    target = root
    if csv is not None:
        (root / "set.csv").write_text(csv, encoding="utf-8")
        target = root / "set.csv"
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    result_or_named_error(validate_dataset, target, (16, 16))
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before


# --- facts and the doctor, pip lists ---------------------------------------------------------------------------------

FACTS = json.loads((ROOT / "tests" / "fixtures" / "machines" / "win11_core_ultra_32gb.json").read_text(encoding="utf-8"))


@FUZZ
@given(doc=_mutations(FACTS, st.one_of(SCALARS, st.sampled_from(["9" * 5000, "1." + "9" * 25, "2.99.0+xpu"]))))
def test_fuzz_facts_through_every_doctor_check(tmp_path_factory, doc):
    """Saved facts with values replaced anywhere: read, then every doctor check runs on them without a crash (a
    check that raises is a CRASH finding: the doctor's traceback)."""
    from aipc_env.doctor import run_checks
    from aipc_env.doctor.checks.base import Status
    from aipc_env.facts.model import load_facts
    from aipc_env.matrix import load_matrix

    path = tmp_path_factory.mktemp("facts") / "facts.json"
    try:
        path.write_text(json.dumps(doc), encoding="utf-8")
    except (UnicodeEncodeError, ValueError):
        assume(False)
    facts = result_or_named_error(load_facts, path)
    if isinstance(facts, AipcError):
        return
    report = run_checks(facts, load_matrix())
    crashed = [(f.id, f.details[-3:]) for f in report.findings if f.status == Status.CRASH]
    assert not crashed, crashed


@FUZZ
@given(
    text=st.one_of(
        TEXT,
        st.lists(
            st.tuples(st.sampled_from(["torch", "bitsandbytes", "numpy", "x" * 300, "", "torch"]), TEXT).map(
                lambda t: f"{t[0]}=={t[1]}"
            ),
            max_size=5,
        ).map("\n".join),
        st.lists(st.fixed_dictionaries({"name": TEXT, "version": SCALARS}), max_size=3).map(json.dumps),
    )
)
def test_fuzz_pip_lists(tmp_path_factory, text):
    from aipc_env.matrix.piplist import read_pip_list

    path = tmp_path_factory.mktemp("pip") / "pip.txt"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    result_or_named_error(read_pip_list, path)


# --- the output writer's own state, read back ------------------------------------------------------------------------


@FUZZ
@given(record=ANY_JSON, journal=st.one_of(st.none(), ANY_JSON))
def test_fuzz_output_record_and_journal(tmp_path_factory, record, journal):
    """The record and journal an output folder holds are read back from a folder someone else may write: whatever
    they say, the write is done or refused by name, and nothing outside the folder changes."""
    from aipc_env.core.outputs import JOURNAL_SUFFIX, RECORD, OutputFolder

    base = tmp_path_factory.mktemp("out")
    out, outside = base / "out", base / "outside.txt"
    out.mkdir()
    outside.write_text("untouched")
    (out / RECORD).write_text(json.dumps(record), encoding="utf-8", errors="surrogatepass")
    if journal is not None:
        (out / f"{RECORD}{JOURNAL_SUFFIX}").write_text(json.dumps(journal), encoding="utf-8", errors="surrogatepass")
    result_or_named_error(OutputFolder(out).write, {"a.txt": b"x", "sub/b.txt": b"y"})
    assert outside.read_text() == "untouched"
    assert sorted(p.name for p in base.iterdir()) == ["out", "outside.txt"]


# --- argv: every command's arguments, under --json -----------------------------------------------------------------------

ARGV = st.one_of(
    st.tuples(st.just(["doctor", "--facts"]), TEXT),
    st.tuples(st.just(["lock", "check", "--pair"]), TEXT),
    st.tuples(st.just(["env", "--dry-run", "--pair"]), TEXT),
    st.tuples(st.just(["dataset", "validate"]), TEXT),
    st.tuples(st.just(["train", "--dry-run"]), TEXT),
    st.tuples(st.just(["matrix", "--pair"]), TEXT),
    st.tuples(st.just(["recommend", "--facts"]), TEXT),
    st.tuples(st.just([]), TEXT),
)


@FUZZ
@given(argv=ARGV)
@example(argv=(["doctor", "--facts"], "a\udcff.json"))  # bytes that are not UTF-8, as Python carries them in argv
@example(argv=(["lock", "check", "--pair"], "x\udcff\x1b[31m"))
@example(argv=([], "\x1b[2Jbogus"))
@example(argv=(["doctor", "--facts"], "\ud800"))  # found by nox -s fuzz: Windows argv may hold a lone surrogate
def test_fuzz_argv_under_json(tmp_path_factory, monkeypatch, capsys, argv):
    """Hostile arguments (surrogate-escaped bytes that are not UTF-8, terminal codes, huge numbers, NUL) to every
    command's path or id: exit 0, 1 or 2 with exactly one JSON document on stdout, and no raw terminal code on
    stderr."""
    from aipc_env.cli import main

    head, value = argv
    assume("\x00" not in value)  # the OS refuses a NUL in argv before any program runs
    work = tmp_path_factory.mktemp("argv")
    monkeypatch.chdir(work)
    monkeypatch.setenv("AIPC_ENV_CACHE_DIR", str(work / "cache"))
    monkeypatch.setenv("AIPC_ENV_STATE_DIR", str(work / "state"))
    try:
        code = main([*head, value, "--json"])
    except SystemExit as stop:
        code = stop.code
    out, err = capsys.readouterr()
    assert code in (ExitCode.OK, ExitCode.PROBLEMS, ExitCode.USAGE), (code, err[-1500:])
    json.loads(out)  # one document
    assert "\x1b" not in err, err[-500:]


# --- a WinGet configuration, a clone's requirements file -----------------------------------------------------------------

WINGET = yaml.safe_load(
    (ROOT / "tests" / "fixtures" / "winget" / "real" / "terminal.configuration.winget").read_text(encoding="utf-8")
)


@FUZZ
@given(doc=_mutations(WINGET, st.one_of(SCALARS, st.sampled_from(["{{x}}", "$(Remove-Item C:\\)", "9" * 5000]))))
def test_fuzz_winget_configuration(tmp_path_factory, doc):
    """An admin's WinGet configuration with values replaced anywhere: a list of issues (each naming its place) or a
    named error."""
    from aipc_env.fleet.winget_check import check_file

    path = tmp_path_factory.mktemp("winget") / "config.dsc.yaml"
    try:
        path.write_text(yaml.safe_dump(doc), encoding="utf-8", errors="surrogatepass")
    except (yaml.YAMLError, UnicodeEncodeError):
        assume(False)
    issues = result_or_named_error(check_file, path)
    assert isinstance(issues, (list, AipcError))


REQUIREMENT_LINES = st.one_of(
    TEXT,
    st.sampled_from(
        [
            "torch==2.8.0",
            "torch>=2.0 ; sys_platform == 'win32'",
            "bitsandbytes>=0.45",
            "-r other.txt",
            "--index-url https://x",
            "numpy; python_version ~= '1'",
            "git+https://github.com/x/y.git",
            "-e .",
            "diffusers @ https://x/y.whl",
        ]
    ),
)


@FUZZ
@given(lines=st.lists(REQUIREMENT_LINES, max_size=6), bom=st.booleans())
def test_fuzz_requirements_file(tmp_path_factory, lines, bom):
    """A clone's requirements.txt of hostile lines: edited (dry run) to a result or refused by name."""
    from aipc_env.matrix import load_matrix
    from aipc_env.trainenv.requirements import apply_edits

    path = tmp_path_factory.mktemp("req") / "requirements.txt"
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + "\n".join(lines).encode("utf-8", "surrogatepass"))
    before = path.read_bytes()
    result_or_named_error(
        apply_edits,
        path,
        pair=load_matrix().get("xpu-2.12"),
        xpu_index="https://x/xpu",
        pip_layer=None,
        locked=None,
        dry_run=True,
    )
    assert path.read_bytes() == before  # a dry run writes nothing


@FUZZ
@given(
    record=st.one_of(ANY_JSON, st.fixed_dictionaries({"name": st.just("conda"), "version": TEXT})),
    metadata=st.one_of(TEXT, TEXT.map(lambda v: f"Metadata-Version: 2.1\nName: conda\nVersion: {v}\n\nbody")),
)
def test_fuzz_tool_versions_of_a_prefix(tmp_path_factory, record, metadata):
    """A prefix's conda-meta record and a distribution's METADATA, as facts gathering reads them on a machine (a
    conda tool's version): a version, or nothing, never an exception."""
    from aipc_env.facts.toolversion import conda_meta_version, dist_info_version

    prefix = tmp_path_factory.mktemp("prefix")
    (prefix / "conda-meta").mkdir()
    (prefix / "conda-meta" / "conda-24.1.0-py312_0.json").write_text(json.dumps(record), encoding="utf-8", errors="surrogatepass")
    info = prefix / "lib" / "python3.12" / "site-packages" / "conda-24.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(metadata, encoding="utf-8", errors="surrogatepass")
    for found in (conda_meta_version(prefix, "conda"), dist_info_version(prefix, "conda")):
        assert found is None or isinstance(found.version, str)


# --- the memory model's coefficients and a stamped env's stamp ----------------------------------------------------------


@FUZZ
@given(data=st.binary(max_size=300))
def test_fuzz_memory_coefficients_file(tmp_path_factory, data):
    """The shipped memory-model coefficients, read back as any bytes: coefficients or a named error."""
    from aipc_env.train.memory_model import load_coefficients

    path = tmp_path_factory.mktemp("m") / "memory-coefficients.json"
    path.write_bytes(data)
    result_or_named_error(load_coefficients, path)


@FUZZ
@given(data=st.binary(max_size=100))
def test_fuzz_env_stamp(tmp_path_factory, data):
    """A stamped env's stamp (trainenv.uvenv), any bytes: it matches only the digest itself, and never raises."""
    from aipc_env.trainenv.envs import env_python
    from aipc_env.trainenv.uvenv import stamp_matches

    prefix = tmp_path_factory.mktemp("env")
    python = env_python(prefix)
    python.parent.mkdir(parents=True, exist_ok=True)
    python.write_bytes(b"")
    (prefix / ".stamp").write_bytes(data)
    try:
        expected = data.decode("utf-8").strip() == "d" * 64
    except UnicodeDecodeError:
        expected = False
    assert stamp_matches(prefix, ".stamp", "d" * 64) is expected


@FUZZ
@given(
    data=st.one_of(
        st.binary(max_size=200),
        st.builds(
            lambda fields: json.dumps(fields).encode(),
            st.fixed_dictionaries(
                {"message": st.one_of(TEXT, st.integers())},
                optional={
                    "path": st.one_of(st.none(), TEXT),
                    "key": st.one_of(st.none(), TEXT),
                    "fix": st.one_of(st.none(), TEXT),
                    "exit_code": st.one_of(st.integers(-(2**70), 2**70), TEXT),
                    "extra": SCALARS,
                },
            ),
        ),
    )
)
def test_fuzz_worker_refusal(tmp_path_factory, data):
    """A worker's error file (launch/worker_call.read_refusal), any bytes or fields: the worker's error, with a failing
    exit code of the table, or a named error about the file."""
    from aipc_env.launch.worker_call import read_refusal

    path = tmp_path_factory.mktemp("worker") / "result.error.json"
    path.write_bytes(data)
    out = result_or_named_error(read_refusal, path)
    assert isinstance(out, AipcError)
    assert out.exit_code in {int(c) for c in ExitCode} - {ExitCode.OK}


@given(data=st.binary(max_size=6000))
def test_fuzz_installer_log_tail(tmp_path_factory, data):
    """An installer's log as a heartbeat quotes it (core.heartbeat.last_line), any bytes: its last non-blank line,
    printable and bounded, or None; never raises."""
    from aipc_env.core.heartbeat import last_line

    log = tmp_path_factory.mktemp("log") / "build.log"
    log.write_bytes(data)
    said = last_line(log, limit=40)()
    tail = data[-4096:].decode("utf-8", "replace").replace("\r", "\n")
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    if not lines:
        assert said is None
    else:
        assert said is not None and said.startswith("build.log: ") and said.isprintable()
        assert len(said) <= len("build.log: ") + 40


# --- a conda prefix's records and a config the tiny-model run derives from ----------------------------------------


@FUZZ
@given(
    data=st.one_of(
        st.binary(max_size=300),
        st.builds(
            lambda name, files: json.dumps(
                {"name": name, "version": "1.0", "build": "0", "build_number": 0, "subdir": "noarch", "files": files}
            ).encode(),
            st.text(max_size=12),
            st.lists(st.text(max_size=60), max_size=4),
        ),
    )
)
def test_fuzz_conda_meta_records(tmp_path_factory, data):
    """trainenv.layers reads a prefix's conda-meta/*.json with py-rattler: its conda records or a named error."""
    from aipc_env.trainenv.layers import conda_owned

    prefix = tmp_path_factory.mktemp("conda")
    (prefix / "conda-meta").mkdir()
    (prefix / "conda-meta" / "pkg-1.0-0.json").write_bytes(data)
    result_or_named_error(conda_owned, prefix)


@FUZZ
@given(data=st.one_of(st.binary(max_size=300), ANY_JSON.map(lambda v: json.dumps(v).encode())))
def test_fuzz_build_cache_record(tmp_path_factory, data):
    """A cached build's record (aipc_env.train.buildcache) is the tool's own file read as untrusted: any bytes make
    the folder not current (a rebuild), never an error, and the read writes nothing."""
    from aipc_env.train.buildcache import is_current

    folder = tmp_path_factory.mktemp("cached")
    (folder / "weights.bin").write_bytes(b"w")
    (folder / "record.json").write_bytes(data)
    assert is_current(folder, record="record.json", recipe={"v": 1}) is False
    assert sorted(p.name for p in folder.iterdir()) == ["record.json", "weights.bin"]


@FUZZ
@given(
    data=st.one_of(
        st.binary(max_size=300),
        st.text(alphabet="{}[]:,\"'-&*!| \n0123456789abmodelpathoutput_dir", max_size=200).map(str.encode),
    )
)
def test_fuzz_tiny_run_config(tmp_path_factory, data):
    """train --model tiny derives its config from the user's: a derived config beside it, or a named error."""
    from aipc_env.train.tinyrun import tiny_config

    folder = tmp_path_factory.mktemp("cfg")
    path = folder / "config.yaml"
    path.write_bytes(data)
    result_or_named_error(tiny_config, path)
    assert {p.name for p in folder.iterdir()} <= {"config.yaml", "config.tiny.yaml"}  # nothing else written


# --- a download's body as the network hands it over (core/net.py) --------------------------------------------------


class _Wire:
    """A socket for http.client.HTTPResponse: the raw bytes of one answer, then the end of the connection."""

    def __init__(self, raw: bytes) -> None:
        self._raw = raw

    def makefile(self, mode: str) -> io.BufferedReader:
        return io.BufferedReader(io.BytesIO(self._raw))


@FUZZ
@given(
    length=st.one_of(st.none(), st.integers(0, 3000).map(str), TEXT.map(lambda t: t.replace("\r", "").replace("\n", ""))),
    body=st.binary(max_size=3000),
)
@example(length="10", body=b"abc")  # cut short
@example(length="2", body=b"abc")  # more than declared
@example(length="+3", body=b"ab")
@example(length="abc", body=b"abc")
@example(length=None, body=b"abc")
def test_fuzz_download_body(tmp_path_factory, length, body):
    """Any Content-Length (none, a number, text) over any body, parsed by http.client itself: the body written whole
    (or up to the length it declared), or CutShort naming how much was owed when it ended early; nothing else."""
    import http.client

    from aipc_env.core import net

    head = b"HTTP/1.1 200 OK\r\n" + (f"Content-Length: {length}\r\n".encode("latin-1", "replace") if length is not None else b"")
    response = http.client.HTTPResponse(_Wire(head + b"\r\n" + body))  # type: ignore[arg-type]
    try:
        response.begin()
    except http.client.HTTPException:
        return  # http.client refuses the head itself: urllib raises that before any body is read
    declared = response.length
    target = tmp_path_factory.mktemp("dl") / "x.whl"
    try:
        size = net.copy_body(response, target)
    except net.CutShort as exc:
        assert declared is not None and declared > len(body) and "short of its Content-Length" in str(exc)
        return
    assert declared is None or declared <= len(body)  # a body that ended early never passes as whole
    expected = body if declared is None else body[:declared]
    assert size == len(expected) and target.read_bytes() == expected


# --- accelerate's own source, read for its enum values (workers/accelerate_choices.py) -------------------------


@FUZZ
@given(
    source=st.one_of(
        TEXT,
        st.builds(
            lambda names, values: "\n".join(
                f"class {n}(str, enum.Enum):\n" + "".join(f"    {k} = {v!r}\n" for k, v in values.items()) for n in names
            ),
            st.lists(st.sampled_from(["DistributedType", "PrecisionType", "DynamoBackend", "Other"]), max_size=4),
            st.dictionaries(
                st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True), st.one_of(TEXT, st.integers()), max_size=4
            ),
        ),
    )
)
def test_fuzz_accelerate_enum_source(source):
    """Any text as accelerate's dataclasses.py: the three enums' string values, or None (then the enums are
    imported instead); never an exception."""
    from aipc_env.workers.accelerate_choices import ENUMS, choices_from_source

    found = choices_from_source(source)
    if found is not None:
        assert set(found) == set(ENUMS)
        assert all(values and all(isinstance(v, str) for v in values) for values in found.values())
        assert all(len(set(values)) == len(values) for values in found.values())
