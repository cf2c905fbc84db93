"""Bundle verification in process, on a small bundle written here (plain files and a manifest), changed one thing
at a time: each tamper kind alone, with the whole message as a literal; the signature with a trusted key, a wrong
key, a changed manifest; the warnings without a key. The end-to-end bundle (real wheels, real minisign) is in
tests/test_fleet_bundle.py."""

from __future__ import annotations

import ast
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from aipc_env.core.formats import write_model
from aipc_env.errors import InputError
from aipc_env.fleet import bundle_files
from aipc_env.fleet.bundle import MANIFEST, SIGNATURE, BundleManifest
from aipc_env.fleet.bundle_check import BundleTampered, verify_bundle
from aipc_env.fleet.sign import SignatureInvalid, generate_keypair, sign_file

FILES = {
    "pylock.linux-64.toml": b"lock",
    "requirements.txt": b"reqs",
    "wheels/aipc_env-1-py3-none-any.whl": b"w",
    "wheels/torch-2.13.0.whl": b"t",
    "bootstrap.sh": b"#!/bin/sh\n",
}


def _bundle(root: Path, *, files: dict[str, bytes] | None = None, listed: dict[str, str] | None = None, **fields) -> Path:
    files = FILES if files is None else files
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    sums = {rel: hashlib.sha256(data).hexdigest() for rel, data in files.items()}
    manifest = {
        "pair": "xpu-2.11",
        "platform": "linux-64",
        "python": "3.11",
        "lockfile": "pylock.linux-64.toml",
        "requirements": "requirements.txt",
        "aipc_env_wheel": "aipc_env-1-py3-none-any.whl",
        "created_at": "2026-12-01T00:00:00+00:00",
        "files": sums if listed is None else listed,
        **fields,
    }
    write_model(root / MANIFEST, BundleManifest.model_validate(manifest))
    return root


def _refused(bundle: Path, message: str, trust=None) -> None:
    with pytest.raises(BundleTampered) as err:
        verify_bundle(bundle, trust, warn=lambda _m: None)
    assert err.value.message == message
    assert err.value.fix == "get an intact copy of the bundle; nothing was installed"


def test_an_intact_unsigned_bundle_verifies_with_a_warning(tmp_path):
    warnings: list[str] = []
    manifest = verify_bundle(_bundle(tmp_path), warn=warnings.append)
    assert manifest.pair == "xpu-2.11" and sorted(manifest.files) == sorted(FILES)
    assert warnings == [
        "warning: the bundle is not signed, and no trust key is set: anyone who can write the bundle "
        "could have changed it (files and manifest alike)"
    ]


def test_a_signed_bundle_verifies_with_its_key_and_is_warned_about_without_one(tmp_path):
    secret, public = generate_keypair()
    bundle = _bundle(tmp_path)
    sign_file(bundle / MANIFEST, secret, "aipc-env bundle")
    warnings: list[str] = []
    assert verify_bundle(bundle, public, warn=warnings.append).pair == "xpu-2.11" and warnings == []
    verify_bundle(bundle, None, warn=warnings.append)
    assert warnings == [
        "warning: the bundle is signed, but no trust key is set (--trust or AIPC_ENV_BUNDLE_TRUST): its signature was not checked"
    ]


def test_a_wrong_key_a_changed_manifest_or_no_signature_are_refused_with_a_key(tmp_path):
    secret, public = generate_keypair()
    _, other = generate_keypair()
    bundle = _bundle(tmp_path)
    with pytest.raises(SignatureInvalid, match="no signature"):  # a trust key and no signature file
        verify_bundle(bundle, public, warn=lambda _m: None)
    sign_file(bundle / MANIFEST, secret, "aipc-env bundle")
    with pytest.raises(SignatureInvalid):
        verify_bundle(bundle, other, warn=lambda _m: None)
    (bundle / MANIFEST).write_text((bundle / MANIFEST).read_text().replace("xpu-2.11", "xpu-2.12"))
    with pytest.raises(SignatureInvalid):
        verify_bundle(bundle, public, warn=lambda _m: None)
    assert (bundle / SIGNATURE).is_file()


def test_not_a_bundle(tmp_path):
    with pytest.raises(InputError, match=f"not an aipc-env bundle \\(no {MANIFEST}\\)"):
        verify_bundle(tmp_path, warn=lambda _m: None)


def test_each_tamper_kind_alone(tmp_path):
    b = _bundle(tmp_path / "changed")
    (b / "wheels" / "torch-2.13.0.whl").write_bytes(b"T")
    _refused(b, "the bundle does not match its manifest: wheels/torch-2.13.0.whl: sha256 differs from the manifest")
    b = _bundle(tmp_path / "missing")
    (b / "bootstrap.sh").unlink()
    _refused(b, "the bundle does not match its manifest: bootstrap.sh: missing")
    b = _bundle(tmp_path / "extra")
    (b / "wheels" / "evil.whl").write_bytes(b"e")
    _refused(b, "the bundle does not match its manifest: wheels/evil.whl: not in the manifest")
    b = _bundle(tmp_path / "unnamed-lock", lockfile="other.toml")
    _refused(b, "the bundle does not match its manifest: other.toml: named by the manifest but not one of its files")
    b = _bundle(tmp_path / "unnamed-reqs", requirements="r.txt")
    _refused(b, "the bundle does not match its manifest: r.txt: named by the manifest but not one of its files")
    b = _bundle(tmp_path / "unnamed-wheel", aipc_env_wheel="x.whl")
    _refused(b, "the bundle does not match its manifest: wheels/x.whl: named by the manifest but not one of its files")


@pytest.mark.parametrize("rel", ["../outside", "/etc/passwd", "a\\b", "c:x", "a//b", "./a", "a/./b", "a/../b", "", "wheels/"])
def test_paths_outside_the_bundle_are_refused(tmp_path, rel):
    sums = {r: hashlib.sha256(d).hexdigest() for r, d in FILES.items()}
    b = _bundle(tmp_path, listed={**sums, rel: "0" * 64})
    _refused(b, f"the bundle does not match its manifest: {rel}: not a path inside the bundle")


def test_safe_nested_paths_are_accepted(tmp_path):
    files = {**FILES, "conda/linux-64/pkg-1.conda": b"c", "a..b/c.d": b"x"}
    assert verify_bundle(_bundle(tmp_path, files=files), warn=lambda _m: None).files.keys() == files.keys()


def test_links_are_refused_before_anything_is_read(tmp_path):
    b = _bundle(tmp_path / "b")
    os.symlink(tmp_path, b / "wheels" / "up")
    _refused(b, "the bundle holds links or special files (wheels/up: link): a bundle is regular files and folders only")
    c = _bundle(tmp_path / "c")
    os.symlink(c / "bootstrap.sh", c / "alias.sh")
    _refused(c, "the bundle holds links or special files (alias.sh: link): a bundle is regular files and folders only")
    d = _bundle(tmp_path / "d")
    os.mkfifo(d / "wheels" / "x.whl")  # a reader would block on it
    _refused(d, "the bundle holds links or special files (wheels/x.whl: FIFO): a bundle is regular files and folders only")
    e = _bundle(tmp_path / "e")
    import socket

    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(e / "s"))
        _refused(e, "the bundle holds links or special files (s: special file): a bundle is regular files and folders only")


def test_five_problems_are_shown_then_a_count(tmp_path):
    b = _bundle(tmp_path)
    for i in range(7):
        (b / f"extra-{i}").write_bytes(b"x")
    _refused(
        b,
        "the bundle does not match its manifest: extra-0: not in the manifest; extra-1: not in the manifest; "
        "extra-2: not in the manifest; extra-3: not in the manifest; extra-4: not in the manifest (+2 more)",
    )
    c = _bundle(tmp_path / "five")
    for i in range(5):
        (c / f"extra-{i}").write_bytes(b"x")
    _refused(
        c,
        "the bundle does not match its manifest: extra-0: not in the manifest; extra-1: not in the manifest; "
        "extra-2: not in the manifest; extra-3: not in the manifest; extra-4: not in the manifest",
    )


def test_six_links_name_five_and_every_refusal_names_the_bundle(tmp_path):
    b = _bundle(tmp_path / "links")
    for i in range(6):
        os.symlink(b / "bootstrap.sh", b / f"l{i}")
    _refused(
        b,
        "the bundle holds links or special files (l0: link, l1: link, l2: link, l3: link, l4: link): a "
        "bundle is regular files and folders only",
    )
    with pytest.raises(BundleTampered) as err:
        verify_bundle(b, warn=lambda _m: None)
    assert err.value.path == str(b)
    with pytest.raises(InputError) as err:
        verify_bundle(tmp_path / "empty-dir", warn=lambda _m: None)
    assert (err.value.path, err.value.fix) == (str(tmp_path / "empty-dir"), "pass the folder made by `aipc-env fleet bundle`")
    c = _bundle(tmp_path / "six")
    for i in range(6):
        (c / f"extra-{i}").write_bytes(b"x")
    with pytest.raises(BundleTampered) as err:
        verify_bundle(c, warn=lambda _m: None)
    assert err.value.message.endswith("extra-4: not in the manifest (+1 more)") and err.value.path == str(c)


def test_an_unsafe_path_does_not_stop_the_other_checks(tmp_path):
    sums = {r: hashlib.sha256(d).hexdigest() for r, d in FILES.items()}
    b = _bundle(tmp_path, listed={"../up": "0" * 64, **sums})
    (b / "bootstrap.sh").write_bytes(b"changed")
    _refused(
        b,
        "the bundle does not match its manifest: ../up: not a path inside the bundle; bootstrap.sh: sha256 "
        "differs from the manifest",
    )


def test_a_signature_beside_the_manifest_is_the_one_checked(tmp_path):
    secret, public = generate_keypair()
    b = _bundle(tmp_path)
    sign_file(b / MANIFEST, secret, "aipc-env bundle")
    (b / "elsewhere.minisig").write_bytes((b / SIGNATURE).read_bytes())
    (b / SIGNATURE).unlink()
    with pytest.raises(SignatureInvalid, match="no signature"):
        verify_bundle(b, public, warn=lambda _m: None)


def _standalone(tmp_path: Path, bundle: Path, *flags: str) -> subprocess.CompletedProcess:
    """The check as the bootstrap scripts run it: the shipped file, by a Python that has no aipc_env."""
    verifier = tmp_path / "shipped" / bundle_files.VERIFIER
    verifier.parent.mkdir(exist_ok=True)
    shutil.copyfile(bundle_files.__file__, verifier)
    return subprocess.run(
        [sys.executable, *flags, str(verifier), str(bundle)], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )


def test_the_bootstrap_check_is_the_same_check_run_standalone(tmp_path):
    bundle = _bundle(tmp_path / "b & ü")
    ok = _standalone(tmp_path, bundle, "-I")
    assert (ok.returncode, ok.stderr) == (0, "")
    (bundle / "bootstrap.sh").write_bytes(b"changed")
    (bundle / "extra.txt").write_bytes(b"x")
    bad = _standalone(tmp_path, bundle, "-I")
    assert bad.returncode == 1
    assert bad.stderr == (
        "aipc-env bundle: the bundle does not match its manifest (damaged or tampered): bootstrap.sh: "
        "sha256 differs from the manifest; extra.txt: not in the manifest; nothing was installed\n"
    )
    os.symlink(bundle / "requirements.txt", bundle / "alias")
    assert "alias: link" in _standalone(tmp_path, bundle, "-I").stderr


def test_the_standalone_check_imports_nothing_from_the_bundle_folder(tmp_path):
    """A Python without -P (3.10, or -I missing) puts the script's folder first on sys.path: a json.py placed beside
    the shipped check must not run before the check has found it."""
    bundle = _bundle(tmp_path / "b")
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    (shipped / "json.py").write_text(f"open({str(tmp_path / 'ran')!r}, 'w').close()\n")
    result = _standalone(tmp_path, bundle, "-E", "-s")
    assert not (tmp_path / "ran").exists() and result.returncode == 0


def test_the_standalone_check_uses_the_standard_library_only():
    tree = ast.parse(Path(bundle_files.__file__).read_text(encoding="utf-8"))
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert imported <= set(sys.stdlib_module_names), imported - set(sys.stdlib_module_names)


@pytest.mark.parametrize("size, refused", [(bundle_files.MAX_MANIFEST_BYTES, False), (bundle_files.MAX_MANIFEST_BYTES + 1, True)])
def test_the_standalone_manifest_size_bound(tmp_path, size, refused):
    bundle = _bundle(tmp_path / "b")
    text = (bundle / MANIFEST).read_bytes().rstrip()
    (bundle / MANIFEST).write_bytes(text + b" " * (size - len(text)))
    result = _standalone(tmp_path, bundle, "-I")
    assert (result.returncode == 1) is refused
    assert ("is over 16777216 bytes" in result.stderr) is refused


def test_a_manifest_that_is_not_one_object_is_refused_by_name(tmp_path):
    bundle = _bundle(tmp_path / "b")
    for text in (b"[]", b'"files"', b"null", b'[{"files": {}}]'):
        (bundle / MANIFEST).write_bytes(text)
        result = _standalone(tmp_path, bundle, "-I")
        assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
        assert result.stderr == (
            "aipc-env bundle: the bundle does not match its manifest (damaged or tampered): "
            "bundle-manifest.json: the manifest is not one JSON object; nothing was installed\n"
        )


def test_a_file_listed_twice_is_refused_even_when_the_last_hash_is_right(tmp_path):
    """Python's json keeps the last of two keys: a manifest listing a file first with a wrong hash, then the right
    one, would pass a reader that trusted it (and another reader would take the first)."""
    bundle = _bundle(tmp_path / "b")
    text = (bundle / MANIFEST).read_text(encoding="utf-8")
    right = hashlib.sha256(FILES["bootstrap.sh"]).hexdigest()
    doubled = text.replace(f'"bootstrap.sh": "{right}"', f'"bootstrap.sh": "{"0" * 64}", "bootstrap.sh": "{right}"')
    assert doubled != text
    (bundle / MANIFEST).write_text(doubled, encoding="utf-8")
    result = _standalone(tmp_path, bundle, "-I")
    assert result.returncode == 1
    assert "bundle-manifest.json: the key 'bootstrap.sh' appears twice in one object" in result.stderr
    with pytest.raises(InputError, match=r"the key 'bootstrap\.sh' appears twice in one object"):
        verify_bundle(bundle, None, warn=lambda _m: None)
