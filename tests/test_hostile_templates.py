"""Every template, filled with hostile values in every slot: a slot meant for a plain word refuses anything else,
and a slot filled through its language's one escaping rule (core.templating) parses with that language's real
parser to the same structure, the value intact: YAML with PyYAML, group_vars with Ansible's own loader and a real
ansible-playbook run (a Jinja lookup in a data file is never evaluated), `ansible-playbook --syntax-check` of the
play, PowerShell with the tree-sitter PowerShell grammar where it is installed and always with a tokenizer of
PowerShell's verbatim-string rule. The `.bat` and `.sh` launchers hold no values (tests/test_launch_plan.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from aipc_env.core.templating import (
    MARK,
    PLAIN,
    ansible_data,
    ansible_literal,
    powershell_literal,
    render_marked,
    yaml_comment,
    yaml_scalar,
)
from tests.conftest import ROOT, require_tool
from tests.support.ansible_yaml import ansible_load, ansible_load_many

SRC = ROOT / "src" / "aipc_env"
TEMPLATE_DIRS = [SRC / "fleet" / "templates", SRC / "container" / "templates", ROOT / "launchers"]
MARKED = sorted(p for d in TEMPLATE_DIRS for p in d.iterdir() if p.is_file() and MARK.search(p.read_text("utf-8")))

HOSTILE = [
    "x\ny: injected",  # a new YAML key
    "x\n- resource: PSDscResources/Script",  # a new list item
    "{{ lookup('pipe', 'touch /tmp/aipc-hostile') }}",  # live Jinja
    "{% for x in range(10**9) %}{% endfor %}",
    "it's",
    "‘curly’ ’quotes‚‛",
    '"double"',
    "$(Remove-Item C:\\)",
    "`backtick`",
    "${env:PATH}",
    "$HOME",
    "a # comment",
    "key: value",
    "- item",
    "&anchor",
    "*alias",
    "!!python/object:os.system",
    "!unsafe x",
    "%25 %PATH% !x! ^& (x86)",
    "x\r\ny",
    "x\x85y",
    "x\u2028y",
    "x\u2029y",
    "tab\there",
    "\x1b[2J\x07",
    "null",
    "yes",
    "1e3",
    "0x10",
    "~",
    "",
    " leading and trailing ",
    "ü ñ 中文 🙂",
    "x" * 5000,
]
IDS = [f"h{i}" for i in range(len(HOSTILE))]


def _marks(path: Path) -> list[str]:
    from aipc_env.core.templating import EXIT_MARKS

    return sorted({m.lower() for m in MARK.findall(path.read_text("utf-8"))} - set(EXIT_MARKS))


def test_every_marked_template_is_covered():
    names = {p.name for p in MARKED}
    assert {
        "site.yml",
        "group_vars-all.yml",
        "group_vars-aipc_linux.yml",
        "bootstrap.sh",
        "bootstrap.ps1",
        "dsc-driver-test.ps1",
        "dsc-oneapi-test.ps1",
        "dsc-oneapi-set.ps1",
        "Containerfile",
    } <= names


@pytest.mark.parametrize("template", MARKED, ids=[p.name for p in MARKED])
def test_a_plain_slot_refuses_every_hostile_value(template):
    """Each slot in turn holds each hostile value (the others a plain word): refused, unless escaped by a rule."""
    text = template.read_text("utf-8")
    marks = _marks(template)
    for slot in marks:
        for value in [v for v in HOSTILE if not PLAIN.fullmatch(v)]:  # "null", "yes", "1e3" are plain words
            values = dict.fromkeys(marks, "plain-1.0")
            values[slot] = value
            with pytest.raises(ValueError, match="is not a plain name"):
                render_marked(text, template.name, values)
    assert render_marked(text, template.name, dict.fromkeys(marks, "plain-1.0"))  # and plain words pass


# --- YAML -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", HOSTILE, ids=IDS)
def test_a_yaml_scalar_reads_back_as_the_same_one_value(value):
    doc = f"a: {yaml_scalar(value)}\nb: 2\n"
    assert yaml.safe_load(doc) == {"a": value, "b": 2}
    assert "\n" not in yaml_scalar(value)  # one line: a comment or a key after it stays where it was


@pytest.mark.parametrize("value", HOSTILE, ids=IDS)
def test_a_yaml_comment_stays_one_comment(value):
    doc = f"# generated for {yaml_comment(value)}\na: 1\n"
    assert yaml.safe_load(doc) == {"a": 1}


@pytest.mark.parametrize("value", HOSTILE[:12], ids=IDS[:12])
def test_the_winget_file_keeps_its_structure_whatever_the_header_names(value):
    """A pair id is a plain name in the matrix model; even a row that skipped the model cannot add YAML: the header
    writes every value through the comment rule."""
    from aipc_env.fleet.winget import render_yaml, winget_configuration
    from aipc_env.matrix import load_matrix

    pair = load_matrix().get("xpu-2.12")
    hostile = pair.model_copy(update={"id": value or "x"})
    config = winget_configuration(pair)
    text = render_yaml(config, hostile)
    assert yaml.safe_load(text) == config


# --- Ansible ----------------------------------------------------------------------------------------------------


def _ansible_load(text: str):
    return ansible_load(str(text))


@pytest.fixture(scope="module")
def literals_as_ansible_reads_them() -> list:
    return ansible_load_many([f"a: {ansible_literal(value)}\nb: 2\n" for value in HOSTILE])


@pytest.mark.parametrize(("index", "value"), list(enumerate(HOSTILE)), ids=IDS)
def test_an_ansible_literal_reads_back_unchanged_with_ansibles_loader(index, value, literals_as_ansible_reads_them):
    assert literals_as_ansible_reads_them[index] == {"a": value, "b": 2}


def _hostile_table():
    from aipc_env.matrix.gpu_runtime import Distribution, GpuRuntimeTable

    marker = "{{ lookup('pipe', 'touch MARKER') }}"
    return GpuRuntimeTable.model_construct(
        schema_version=1,
        checked="2026-12-01",
        packages=["libze1", marker, "x\ny: 1"],
        distributions={
            "debian-12": Distribution.model_construct(
                name=f"Debian {marker}", source="unsupported", python="3.11", why="why\nz: injected {% raw %}", repository=None
            )
        },
    )


def _rendered_playbook(monkeypatch, tmp_path: Path) -> dict[str, str]:
    from aipc_env.fleet import ansible
    from aipc_env.fleet.ansible import GpuSource
    from aipc_env.matrix import load_matrix

    marker = str(tmp_path / "evaluated")
    table = _hostile_table()
    table = table.model_copy(
        update={
            "packages": [p.replace("MARKER", marker) for p in table.packages],
            "distributions": {
                k: d.model_copy(update={"name": d.name.replace("MARKER", marker)}) for k, d in table.distributions.items()
            },
        }
    )
    monkeypatch.setattr("aipc_env.matrix.gpu_runtime.load_gpu_runtime", lambda *a, **k: table)
    source = GpuSource(
        line=f"deb {{{{ lookup('pipe', 'touch {marker}') }}}} noble\n- x", key_file=tmp_path, key_name="k'ey\n{{ 7 * 7 }}.asc"
    )
    return ansible.render_playbook(load_matrix().get("xpu-2.12"), source)


def test_group_vars_from_hostile_data_keep_their_structure_and_their_literal_values(monkeypatch, tmp_path):
    files = _rendered_playbook(monkeypatch, tmp_path)
    linux = _ansible_load(files["group_vars/aipc_linux.yml"])
    assert set(linux) == {
        "aipc_root",
        "aipc_install_gpu_runtime",
        "aipc_gpu_runtime_source",
        "aipc_gpu_runtime_key",
        "aipc_gpu_packages",
        "aipc_gpu_runtime_by_distribution",
    }
    assert linux["aipc_gpu_runtime_key"] == "k'ey\n{{ 7 * 7 }}.asc"
    assert linux["aipc_gpu_packages"][2] == "x\ny: 1"
    assert linux["aipc_gpu_runtime_by_distribution"]["debian-12"]["why"] == "why z: injected {% raw %}"  # one line
    assert _ansible_load(files["group_vars/all.yml"])["aipc_pair"] == "xpu-2.12"


def test_ansible_never_evaluates_a_value_from_a_data_file(monkeypatch, tmp_path):
    """A real ansible-playbook run on this machine reads the rendered group_vars: the values print as written and
    the lookup they hold never runs."""
    files = _rendered_playbook(monkeypatch, tmp_path)
    play = tmp_path / "play"
    (play / "group_vars").mkdir(parents=True)
    (play / "group_vars" / "aipc_linux.yml").write_text(files["group_vars/aipc_linux.yml"], encoding="utf-8")
    (play / "inventory.yml").write_text(
        f"aipc_linux:\n  hosts:\n    here:\n      ansible_connection: local\n"
        f"      ansible_python_interpreter: {sys.executable}\n",
        encoding="utf-8",
    )
    (play / "probe.yml").write_text(
        "- hosts: aipc_linux\n  gather_facts: false\n  tasks:\n"
        '    - ansible.builtin.debug:\n        msg: "{{ aipc_gpu_packages[1] }} | '
        "{{ aipc_gpu_runtime_by_distribution['debian-12'].name }} | {{ aipc_gpu_runtime_source }} | "
        '{{ aipc_gpu_runtime_key }}"\n',
        encoding="utf-8",
    )
    env = {
        **os.environ,
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp"),
        "ANSIBLE_HOME": str(tmp_path / "home"),
    }
    run = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "inventory.yml", "probe.yml"],
        cwd=play,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert not (tmp_path / "evaluated").exists()
    assert f"{{{{ lookup('pipe', 'touch {tmp_path / 'evaluated'}') }}}}" in run.stdout
    assert "{{ 7 * 7 }}" in run.stdout and "49" not in run.stdout.split("msg")[-1]
    syntax = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "inventory.yml", "probe.yml", "--syntax-check"],
        cwd=play,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert syntax.returncode == 0, syntax.stderr[-2000:]


@pytest.mark.parametrize("value", HOSTILE, ids=IDS)
def test_ansible_data_keeps_every_string_literal(value):
    data = {"aipc_list": [value, "plain"], "aipc_table": {"k": {"name": value, "n": 3}}}
    assert _ansible_load(ansible_data(data)) == data


# --- PowerShell -------------------------------------------------------------------------------------------------

_QUOTES = "'\u2018\u2019\u201a\u201b"


def _ps_verbatim(text: str, start: int) -> tuple[str, int]:
    """PowerShell's rule for a verbatim string starting at text[start] (a single-quote character): two quote
    characters in a row are one, a single one ends it. Returns (value, index after the closing quote)."""
    assert text[start] in _QUOTES
    value, i = [], start + 1
    while i < len(text):
        if text[i] in _QUOTES:
            if i + 1 < len(text) and text[i + 1] in _QUOTES:
                value.append(text[i])
                i += 2
                continue
            return "".join(value), i + 1
        value.append(text[i])
        i += 1
    raise AssertionError("the string never ends")


@pytest.mark.parametrize("value", HOSTILE, ids=IDS)
def test_a_powershell_literal_is_one_verbatim_string_holding_the_value(value):
    literal = powershell_literal(value)
    decoded, end = _ps_verbatim(literal, 0)
    assert end == len(literal) and decoded == value


def _tree_sitter_powershell():
    try:
        import tree_sitter
        import tree_sitter_powershell
    except ImportError:
        require_tool("the tree-sitter PowerShell grammar (the dev extra's tree-sitter-powershell)")
    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_powershell.language()))


def _string_literals(node) -> list:
    found = [node] if node.type in ("string_literal", "verbatim_string_characters") else []
    for child in node.children:
        found += _string_literals(child)
    return found


@pytest.mark.parametrize(
    "name, slot", [("dsc-driver-test.ps1", "floor"), ("dsc-oneapi-test.ps1", "release"), ("dsc-oneapi-set.ps1", "release")]
)
@pytest.mark.parametrize("value", [v for v in HOSTILE if "\u2018" not in v and "\u201a" not in v][:20])
def test_the_dsc_scripts_parse_with_a_powershell_grammar_whatever_they_hold(name, slot, value):
    from aipc_env.fleet import template_text

    parser = _tree_sitter_powershell()
    plain = render_marked(template_text(name), name, {slot: powershell_literal("2025.3")}).encode()
    hostile = render_marked(template_text(name), name, {slot: powershell_literal(value)})
    tree = parser.parse(hostile.encode())
    assert not tree.root_node.has_error, hostile
    literal = powershell_literal(value)
    assert literal in hostile
    nodes = [n.text.decode() for n in _string_literals(tree.root_node) if n.type == "string_literal"]
    assert literal in nodes  # the value is one string token, not code
    assert len(nodes) == len([n for n in _string_literals(parser.parse(plain).root_node) if n.type == "string_literal"])


def test_the_dsc_scripts_in_the_winget_file_are_the_literals():
    from aipc_env.fleet.winget import winget_configuration
    from aipc_env.matrix import load_matrix

    config = winget_configuration(load_matrix().get("xpu-2.12"))
    oneapi = next(a for a in config["properties"]["assertions"] if a["id"] == "oneapi-installed")
    assert oneapi["settings"]["SetScript"] == (
        "throw ('install Intel oneAPI ' + '2025.3' + ' through the fleet channel: winget-pkgs does not list it')"
    )
