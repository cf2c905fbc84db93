"""A corpus of hostile values per class, each handled where it is read: duplicate keys at every JSON and YAML reader,
one bounded version and requirement parser (digits, length, packaging's own ValueError), a lock's recorded
requires-dist and requires-python, YAML refused before or while it is built, identifiers full-matched in their
models, encoding detection (a byte-order mark, UTF-8, then cp1252, said), control characters in text for people,
and paths that are not UTF-8. In process where the rule lives, through the CLI where a command once crashed."""

from __future__ import annotations

import json
import shutil
import time
import tomllib
from pathlib import Path

import pytest
import tomli_w
from packaging.markers import InvalidMarker
from packaging.requirements import InvalidRequirement
from packaging.specifiers import InvalidSpecifier
from packaging.version import InvalidVersion

from aipc_env.core import fileio, specs
from aipc_env.errors import ExitCode, InputError
from tests.conftest import ROOT, run_cli

FIXTURES = Path(__file__).parent / "fixtures"


def _named(result, *needles: str, code: int = ExitCode.USAGE) -> None:
    assert result.returncode == code, (result.returncode, result.stdout[-1000:], result.stderr[-2000:])
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr, result.stderr[-2000:]
    for needle in needles:
        assert needle in result.stderr, (needle, result.stderr[-2000:])


# --- duplicate keys ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, key",
    [
        ('{"a": 1, "a": 1}', "a"),  # even the same value twice
        ('{"x": {"files": {"f": "0", "f": "1"}}}', "f"),
        ('[{"k": 1}, {"k": 1, "k": 2}]', "k"),
    ],
)
def test_a_key_twice_in_one_object_is_refused_at_every_json_reader(text, key):
    with pytest.raises(InputError, match=f"the key '{key}' appears twice in one object") as err:
        fileio.parse_json(text, "f.json", "test file")
    assert err.value.path == "f.json"
    with pytest.raises(fileio.DuplicateKeyError):
        fileio.loads_json(text)
    assert fileio.loads_json('{"a": 1, "b": {"a": 2}}') == {"a": 1, "b": {"a": 2}}  # one per object is fine


@pytest.mark.parametrize(
    "text, key, where",
    [
        ("a: 1\nb: 2\na: 1\n", "a", "lines 1 and 3"),  # even the same value twice
        ("train:\n  lr: 1\n  steps: 2\n  lr: 3\n", "lr", "lines 2 and 4"),
        ("a: 1\nb: {c: 1, c: 2}\n", "c", "line 2"),  # a flow mapping on one line
        ("- {k: 1}\n- k: 1\n  k: 2\n", "k", "lines 2 and 3"),
        ("true: 1\nyes: 2\n", "True", "lines 1 and 2"),  # two spellings of one key (YAML 1.1 booleans)
    ],
)
def test_a_key_twice_in_one_mapping_is_refused_at_every_yaml_reader(text, key, where):
    with pytest.raises(InputError, match=f"the key '{key}' appears twice in one mapping \\({where}\\)") as err:
        fileio.parse_yaml(text, "f.yaml", "test file")
    assert err.value.path == "f.yaml" and "test file is ambiguous" in str(err.value)


@pytest.mark.parametrize(
    "text, data",
    [
        ("a: 1\nb: {a: 2}\n", {"a": 1, "b": {"a": 2}}),  # one per mapping is fine
        ("- {k: 1}\n- {k: 2}\n", [{"k": 1}, {"k": 2}]),
        ("1: a\n'1': b\n", {1: "a", "1": "b"}),  # an integer and a string are two keys
        ("base: &b {x: 1, y: 1}\nc:\n  <<: *b\n  x: 2\n", {"base": {"x": 1, "y": 1}, "c": {"x": 2, "y": 1}}),  # a merge
    ],
)
def test_keys_written_once_per_mapping_are_read(text, data):
    assert fileio.parse_yaml(text, "f.yaml") == data


def test_a_config_with_two_train_sections_through_the_cli(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("train:\n  max_train_steps: 10\nmodel: {}\ntrain:\n  max_train_steps: 20\n", encoding="utf-8")
    _named(run_cli("train", str(config), "--dry-run"), "config.yaml", "'train' appears twice", "lines 1 and 4")


def test_a_facts_file_naming_a_key_twice_through_the_cli(tmp_path):
    facts = tmp_path / "facts.json"
    text = (FIXTURES / "machines" / "win11_core_ultra_32gb.json").read_text(encoding="utf-8")
    facts.write_text(text.replace('"schema_version":', '"schema_version": 1, "schema_version":', 1), encoding="utf-8")
    _named(run_cli("doctor", "--facts", str(facts)), "facts.json", "appears twice")


# --- one bounded parser of versions and requirements ----------------------------------------------------------------


@pytest.mark.parametrize(
    "value, ok",
    [
        ("1." + "0" * 24, True),
        ("1." + "0" * 25, False),  # the digit run: at and above the bound
        ("1" + ".0" * 63, True),
        ("1" + ".0" * 64, False),  # 127 and 129 characters (128 is the bound)
        ("1" * 5000, False),
        ("1.0." + "9" * 4301, False),
    ],
)
def test_the_version_bounds(value, ok):
    if ok:
        assert str(specs.parse_version(value)).startswith("1")
        assert specs.check_version(value) == value
    else:
        with pytest.raises(InvalidVersion):
            specs.parse_version(value)
        with pytest.raises(ValueError, match="is not a version"):
            specs.check_version(value)


def test_a_version_of_exactly_the_length_bound_is_read():
    value = "1" + ".0" * 63 + "1"
    assert len(value) == 128 and specs.parse_version(value)


@pytest.mark.parametrize(
    "line, error",
    [
        ("numpy==" + "1" * 5000, InvalidRequirement),
        ("numpy>=1." + "0" * 30, InvalidRequirement),
        ("--index-url https://evil.example/simple", InvalidRequirement),
        ("-e .", InvalidRequirement),
        ("numpy; os_name = 'nt'", InvalidRequirement),  # one '=' is no marker operator
        ("numpy; bogus_variable == '1'", InvalidRequirement),
        ("x" * 3000, InvalidRequirement),
    ],
)
def test_requirements_that_are_not_pep_508_or_are_too_large(line, error):
    with pytest.raises(error):
        specs.parse_requirement(line)
    with pytest.raises(ValueError, match="is not a PEP 508 requirement"):
        specs.check_requirement(line)


@pytest.mark.parametrize("size, ok", [(2047, True), (2048, True), (2049, False)])
def test_the_requirement_length_bound(size, ok):
    head = "numpy; extra == '"
    line = head + "x" * (size - len(head) - 1) + "'"
    assert len(line) == size
    if ok:
        assert specs.parse_requirement(line).name == "numpy"
    else:
        with pytest.raises(InvalidRequirement, match="longer than 2048 characters"):
            specs.parse_requirement(line)


def test_specifiers_and_markers_are_bounded_too():
    assert specs.parse_specifier(">=3.10,<3.14").contains("3.12")
    with pytest.raises(InvalidSpecifier):
        specs.parse_specifier(">=3." + "1" * 5000)
    with pytest.raises(InvalidSpecifier):
        specs.parse_specifier(["not", "a", "string"])  # type: ignore[arg-type]
    with pytest.raises(InvalidMarker):
        specs.parse_marker("python_version >= '3." + "1" * 5000 + "'")
    assert specs.parse_marker("python_version >= '3.10'").evaluate({"python_version": "3.11"})


def test_a_5000_digit_version_through_resolve_and_doctor_facts(tmp_path):
    listing = tmp_path / "pip list.txt"
    listing.write_text(f"torch=={'1' * 5000}\nnumpy==1.26.0\n", encoding="utf-8")
    result = run_cli("resolve", "--pip-list", str(listing))
    assert result.returncode == ExitCode.PROBLEMS and "Traceback" not in result.stderr, result.stderr[-2000:]
    facts = json.loads((FIXTURES / "machines" / "win11_core_ultra_32gb.json").read_text(encoding="utf-8"))
    facts["training_env"]["distributions"]["torch"] = "1" * 5000
    path = tmp_path / "facts.json"
    path.write_text(json.dumps(facts), encoding="utf-8")
    doctor = run_cli("doctor", "--facts", str(path))
    assert doctor.returncode in (ExitCode.OK, ExitCode.PROBLEMS) and "internal error" not in doctor.stderr, doctor.stderr[-2000:]


LOCKS = ROOT / "lockfiles"


@pytest.mark.parametrize(
    "edit, needle",
    [
        (lambda t: t.update({"requires-dist": ["colorama; platform_system = 'Windows'"]}), "requires-dist"),
        (lambda t: t.update({"requires-dist": ["--index-url https://evil.example/simple"]}), "requires-dist"),
        (lambda t: t.update({"requires-dist": "colorama"}), "requires-dist"),  # a string, not a list
        (lambda t: t.update({"requires-dist": ["colorama==" + "1" * 5000]}), "requires-dist"),
        (lambda t: t.update({"requires-python": ">=3.7,<<4"}), "requires-python"),
        (lambda t: t.update({"requires-python": 3.7}), "requires-python"),
    ],
)
def test_a_locks_recorded_metadata_is_checked_when_the_lock_is_read(tmp_path, edit, needle):
    root = tmp_path / "lockfiles"
    shutil.copytree(LOCKS / "xpu-2.12", root / "xpu-2.12")
    path = root / "xpu-2.12" / "pylock.linux-64.toml"
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    tqdm = next(p for p in data["packages"] if p["name"] == "tqdm")
    edit(tqdm["tool"]["aipc-env"])
    path.write_text(tomli_w.dumps(data), encoding="utf-8")
    _named(run_cli("lock", "check", "--lock-root", str(root), timeout=120), str(path), needle)


def test_a_5000_digit_package_version_in_a_lock_is_a_named_error(tmp_path):
    root = tmp_path / "lockfiles"
    shutil.copytree(LOCKS / "xpu-2.12", root / "xpu-2.12")
    path = root / "xpu-2.12" / "pylock.linux-64.toml"
    text = path.read_text(encoding="utf-8").replace(
        'name = "tqdm"\nversion = "4.70.1"', f'name = "tqdm"\nversion = "{"4" * 5000}"', 1
    )
    path.write_text(text, encoding="utf-8")
    _named(run_cli("lock", "check", "--lock-root", str(root), timeout=120), str(path), "is not a version")


# --- YAML refused before or while it is built -----------------------------------------------------------------------


def test_a_5_mb_yaml_file_is_refused_before_parsing(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text("- 1\n" * (5 * 2**20 // 4), encoding="utf-8")
    start = time.monotonic()
    with pytest.raises(InputError, match="larger than 4 MiB") as err:
        fileio.read_yaml(path, "test file")
    assert time.monotonic() - start < 2 and err.value.path == str(path)


@pytest.mark.parametrize("size, refused", [(fileio.MAX_YAML_BYTES, False), (fileio.MAX_YAML_BYTES + 1, True)])
def test_the_yaml_byte_bound(size, refused):
    text = "a: " + "x" * (size - 3)
    assert len(text) == size
    if refused:
        with pytest.raises(InputError, match="larger than 4 MiB"):
            fileio.parse_yaml(text, "f", "t")
    else:
        assert len(fileio.parse_yaml(text, "f", "t")["a"]) == size - 3


def test_values_written_out_stop_the_composer_at_the_bound():
    """Just under 4 MiB of one-character list items: the composer stops at 200,000 values, long before the 1.3 million
    the file holds are built."""
    text = "[" + "1," * 1_300_000 + "1]"
    assert len(text) < fileio.MAX_YAML_BYTES
    start = time.monotonic()
    with pytest.raises(InputError, match="holds more than 200000 values"):
        fileio.parse_yaml(text, "f", "t")
    assert time.monotonic() - start < 15
    assert len(fileio.parse_yaml("[" + "1," * 199_998 + "1]", "f", "t")) == 199_999  # 200,000 values with the list


def test_a_winget_file_of_5_mb_through_the_cli(tmp_path):
    path = tmp_path / "big.dsc.yaml"
    path.write_text("properties:\n  resources:\n" + "    - {resource: a/b, id: x}\n" * 200_000, encoding="utf-8")
    assert path.stat().st_size > 5_000_000
    start = time.monotonic()
    _named(run_cli("fleet", "winget", "--check", str(path), timeout=60), "big.dsc.yaml", "larger than 4 MiB")
    assert time.monotonic() - start < 30


# --- identifiers, full matches ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    ["xpu-2.12\n", "xpu 2.12", "xpu-2.12\nresources: []", "{{ x }}", "", "-x", "x-", "a" * 101, "x\x1b", "x/y", "x'y", "ü"],
)
def test_identifiers_are_plain_names_matched_whole(value):
    with pytest.raises(ValueError, match="is not a plain name"):
        specs.check_identifier(value)


@pytest.mark.parametrize("value", ["xpu-2.12", "a", "a" * 100, "ubuntu-24.04", "gpu_driver.x"])
def test_plain_identifiers_pass(value):
    assert specs.check_identifier(value) == value


def test_a_pair_id_holding_a_newline_is_refused_by_the_matrix(tmp_path):
    matrix = tmp_path / "matrix.yaml"
    text = (ROOT / "environments" / "matrix.yaml").read_text(encoding="utf-8")
    matrix.write_text(
        text.replace("  - id: xpu-2.7\n", '  - id: "xpu-2.7\\nresources: [{resource: Script}]"\n', 1), encoding="utf-8"
    )
    _named(run_cli("fleet", "winget", "--matrix", str(matrix), "--pair", "xpu-2.12"), "matrix.yaml", "is not a plain name")


def test_a_check_id_from_a_report_is_a_plain_name():
    from pydantic import ValidationError

    from aipc_env.doctor.checks.base import Finding

    assert Finding(id="gpu-driver", category="gpu", title="t", status="ok", seen="s").id == "gpu-driver"
    with pytest.raises(ValidationError, match="is not a plain name"):
        Finding(id="gpu-driver\n<script>", category="gpu", title="t", status="ok", seen="s")


@pytest.mark.parametrize("name", ["owner/name\n", "owner/name\nextra", "name\n"])
def test_a_repository_name_with_a_trailing_newline_is_refused(name):
    from aipc_env.distill.licence import check_repo_name

    with pytest.raises(InputError):
        check_repo_name(name)
    assert check_repo_name(name.split("\n")[0]) == name.split("\n")[0]


# --- encodings: a byte-order mark, UTF-8, then cp1252, said ---------------------------------------------------


@pytest.mark.parametrize(
    "raw, encoding",
    [
        ("torch==2.11.0+xpu\r\nnumpy==1.26.0 # cafés\r\n".encode("cp1252"), "cp1252"),
        ("numpy 1.26.0 é\r\n".encode("cp1252"), "cp1252"),
        ("numpy==1.26.0 # café\n".encode(), "utf-8"),
        (b"\xef\xbb\xbf" + "numpy==1.26.0 # café\n".encode(), "utf-8 with a byte-order mark"),
        ("numpy==1.26.0\r\n".encode("utf-16"), "utf-16-le"),  # what PowerShell 5.1's `>` writes
        (b"\xfe\xff" + "numpy==1.26.0\r\n".encode("utf-16-be"), "utf-16-be"),
    ],
)
def test_a_package_list_is_read_bom_then_utf8_then_cp1252(tmp_path, raw, encoding):
    from aipc_env.matrix.piplist import read_list_text, read_pip_list

    if encoding == "cp1252":
        assert len(raw) % 2 == 0  # an even length decodes as UTF-16 (without a mark) too: it must not be taken so
        raw.decode("utf-16-le")
    path = tmp_path / "list.txt"
    path.write_bytes(raw)
    text, used = read_list_text(path)
    assert used == encoding and "numpy" in text
    assert read_pip_list(path)["numpy"] == "1.26.0"


def test_the_encoding_used_is_said(tmp_path):
    path = tmp_path / "list.txt"
    path.write_bytes("torch==2.11.0+xpu\r\nnumpy==1.26.0 # cafés\r\n".encode("cp1252"))
    result = run_cli("resolve", "--pip-list", str(path), "--platform", "win-64")
    assert f"aipc-env: read {path} as cp1252" in result.stderr and "Traceback" not in result.stderr


def test_utf16_with_a_bom_that_does_not_decode_is_a_named_error(tmp_path):
    with pytest.raises(InputError, match="byte-order mark but is not utf-16-le text"):
        fileio.decode_guessing(b"\xff\xfe\x00\xd8", "f", "the list")  # a lone high surrogate


# --- control characters in text for people ----------------------------------------------------------------------


def test_control_characters_are_shown_escaped():
    from aipc_env.core.terminal import visible

    assert visible("a\x1b[2Jb\x07c\x9bd\u202ee\nf\tg") == "a\\x1b[2Jb\\x07c\\x9bd\\u202ee\nf\tg"
    assert visible("plain ü (x86) & %a%") == "plain ü (x86) & %a%"


def test_a_pasted_version_never_drives_the_terminal(tmp_path):
    path = tmp_path / "list.txt"
    path.write_text("torch==2.11.0+xpu\x1b]0;pwned\x07\x1b[2J\nnumpy==1.26.0\n", encoding="utf-8")
    result = run_cli("resolve", "--pip-list", str(path), "--platform", "win-64")
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout and "\x1b" not in result.stderr
    assert "\\x1b" in result.stdout, result.stdout


def test_an_error_naming_a_hostile_value_never_drives_the_terminal(tmp_path):
    result = run_cli("resolve", "--pip-list", str(tmp_path / "missing\x1b[2J.txt"))
    assert result.returncode == ExitCode.USAGE and "\x1b" not in result.stderr and "\\x1b[2J" in result.stderr


# --- paths that are not UTF-8 -------------------------------------------------------------------------------------


def test_a_config_under_a_folder_that_is_not_utf8_is_a_named_error(tmp_path):
    import os
    import subprocess
    import sys

    folder = os.fsencode(tmp_path) + b"/bad\xff"
    os.mkdir(folder)
    config = folder + b"/config.yaml"
    with open(config, "w", encoding="utf-8") as fh:
        fh.write("schema_version: 1\n")
    result = subprocess.run(
        [sys.executable, "-m", "aipc_env", "train", "--dry-run", config], capture_output=True, timeout=120, cwd=ROOT
    )
    stderr = result.stderr.decode("utf-8", "replace")
    assert result.returncode == ExitCode.USAGE, stderr[-2000:]
    assert "holds a file name that is not UTF-8 text" in stderr and "bad\\xff" in stderr and "Traceback" not in stderr


def test_a_text_write_of_a_value_that_is_not_utf8_is_refused_and_writes_nothing(tmp_path):
    target = tmp_path / "launch.json"
    with pytest.raises(InputError, match="not UTF-8 text") as err:
        fileio.atomic_write_text(target, json.dumps({"path": "/x/bad\udcff"}, ensure_ascii=False))
    assert "bad\\xff" in err.value.message and not target.exists() and list(tmp_path.iterdir()) == []
