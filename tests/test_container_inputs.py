"""User values that reach a Containerfile (issue 20): the base is an OCI reference or refused, the GPU runtime's apt
source is one signed line whose key fingerprint is pinned (checked by the real gpg), trusted=yes never appears,
labels are quoted, and --out never replaces a folder that is not an earlier render."""

from __future__ import annotations

import json

import pytest

from aipc_env.container.inputs import parse_apt_source, validate_image_reference
from aipc_env.errors import ExitCode, InputError
from tests.conftest import ROOT, run_cli

LOCK = ["--lock", str(ROOT / "lockfiles" / "xpu-2.12" / "pylock.linux-64.toml")]


@pytest.mark.parametrize(
    "good",
    [
        "localhost/aipc-base:bookworm",
        "ubuntu:24.04",
        "docker.io/library/ubuntu:24.04",
        "registry.example.com:5000/team/aipc-env:v1.2_3",
        "ghcr.io/org/img@sha256:" + "a" * 64,
    ],
)
def test_image_references_are_accepted(good):
    assert validate_image_reference(good) == good


@pytest.mark.parametrize(
    "bad",
    [
        "evil\nRUN touch /pwned",
        "ubuntu:24.04 AS x",
        'ubuntu"',
        "$(id)",
        "host/Upper-Path",
        "",
        "a" * 300,
        "ubuntu:24.04\r",
        "img:tag:more",
    ],
)
def test_anything_else_is_refused(bad):
    with pytest.raises(InputError, match="not an OCI image reference"):
        validate_image_reference(bad)


@pytest.mark.parametrize(
    "line,message",
    [
        ("deb [trusted=yes] https://repo.example/ubuntu noble main", "trusted=yes"),
        ("deb [allow-insecure=yes] https://repo.example/ubuntu noble main", "not allowed"),
        ("deb http://repo.example/ubuntu noble main", "not an https URL"),
        ("deb https://repo.example/ubuntu noble main\nRUN touch /x", "one line"),
        ("deb-src https://repo.example/ubuntu noble main", "not an apt source line"),
        ("deb https://repo.example/ubuntu no$ble main", "characters apt does not use"),
    ],
)
def test_unsafe_apt_sources_are_refused(line, message):
    with pytest.raises(InputError, match=message.replace("$", r"\$")):
        parse_apt_source(line)


def test_a_good_apt_source_is_rewritten_to_the_pinned_keyring():
    source = parse_apt_source("deb [arch=amd64 signed-by=/anything.gpg] https://repositories.intel.com/gpu/ubuntu noble unified")
    assert source.line() == (
        "deb [signed-by=/usr/share/keyrings/aipc-gpu-keyring.gpg arch=amd64] "
        "https://repositories.intel.com/gpu/ubuntu noble unified\n"
    )


def test_a_pinned_key_goes_in_as_the_sources_only_key(signing_key, tmp_path):
    key, fingerprint = signing_key
    spaced = " ".join(fingerprint[i : i + 4] for i in range(0, 40, 4)).lower()
    result = run_cli(
        "container",
        "render",
        *LOCK,
        "--out",
        str(tmp_path / "ctx"),
        "--gpu-runtime-source",
        "deb [arch=amd64] https://repositories.intel.com/gpu/ubuntu noble unified",
        "--gpu-runtime-key",
        str(key),
        "--gpu-runtime-key-fingerprint",
        spaced,
        "--base",
        "docker.io/library/ubuntu:24.04",
    )
    assert result.returncode == ExitCode.OK, result.stderr
    ctx = tmp_path / "ctx"
    containerfile = (ctx / "Containerfile").read_text()
    assert "trusted=yes" not in containerfile and "COPY aipc-gpu.list /etc/apt/sources.list.d/" in containerfile
    assert fingerprint in containerfile
    assert (ctx / "aipc-gpu.list").read_text() == (
        "deb [signed-by=/usr/share/keyrings/aipc-gpu-keyring.asc "
        "arch=amd64] https://repositories.intel.com/gpu/ubuntu noble "
        "unified\n"
    )
    assert (ctx / "aipc-gpu-keyring.asc").read_bytes() == key.read_bytes()
    assert "!aipc-gpu-keyring.asc" in (ctx / ".containerignore").read_text()


def test_a_key_with_another_fingerprint_is_refused(signing_key, tmp_path):
    key, fingerprint = signing_key
    other = ("0" if fingerprint[0] != "0" else "1") + fingerprint[1:]
    result = run_cli(
        "container",
        "render",
        *LOCK,
        "--out",
        str(tmp_path / "ctx"),
        "--gpu-runtime-source",
        "deb https://repositories.intel.com/gpu/ubuntu noble unified",
        "--gpu-runtime-key",
        str(key),
        "--gpu-runtime-key-fingerprint",
        other,
    )
    assert result.returncode == ExitCode.USAGE and f"not the pinned {other}" in result.stderr
    assert not (tmp_path / "ctx").exists()
    missing = run_cli(
        "container",
        "render",
        *LOCK,
        "--out",
        str(tmp_path / "ctx"),
        "--gpu-runtime-source",
        "deb https://repositories.intel.com/gpu/ubuntu noble unified",
        "--gpu-runtime-key",
        str(key),
    )
    assert missing.returncode == ExitCode.USAGE and "pinned fingerprint" in missing.stderr


def test_out_never_replaces_a_users_folder_but_may_rerender(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "Containerfile").write_text("FROM mine\n")
    refused = run_cli("container", "render", *LOCK, "--out", str(mine))
    assert refused.returncode == ExitCode.USAGE and (mine / "Containerfile").read_text() == "FROM mine\n"
    ctx = tmp_path / "ctx"
    assert run_cli("container", "render", *LOCK, "--out", str(ctx), "--gpu-runtime", "none").returncode == ExitCode.OK
    again = run_cli("container", "render", *LOCK, "--out", str(ctx), "--gpu-runtime", "none")
    assert again.returncode == ExitCode.OK


def test_labels_are_quoted(tmp_path):
    from aipc_env.container.render import ContextSpec, containerfile

    spec = ContextSpec(
        pair="xpu-2.13",
        base="ubuntu:24.04",
        gpu_runtime="none",
        python="3.11",
        lock_sha256="0" * 64,
        aipc_env_wheel="a.whl",
        wheels=[],
    )
    assert 'io.aipc-env.pair="xpu-2.13"' in containerfile(spec)
    # a value that is not a plain name never reaches the Containerfile, quoted or not
    for field, value in (
        ("pair", 'x" && touch /pwned "'),
        ("aipc_env_wheel", "a.whl\nRUN touch /pwned"),
        ("base", "ubuntu:24.04\nRUN touch /pwned"),
        ("torch_layer", ["torch\nRUN touch /pwned"]),
    ):
        with pytest.raises((ValueError, InputError)):
            containerfile(spec.model_copy(update={field: value}))


def test_the_default_gpu_runtime_needs_a_source_on_a_distribution_without_one(tmp_path):
    """Debian 13 (the default base) has no Level Zero GPU driver: intel-apt without Intel's repository is refused
    by name, naming the client channel's line, before anything is written; a base the table does not know is
    refused too."""
    result = run_cli("container", "render", *LOCK, "--out", str(tmp_path / "ctx"))
    assert result.returncode == ExitCode.USAGE and "Debian 13 (trixie) cannot provide" in result.stderr
    assert "libze-intel-gpu1" in result.stderr and "--gpu-runtime-source" in result.stderr
    assert "https://repositories.intel.com/gpu/ubuntu noble client" in result.stderr
    assert not (tmp_path / "ctx").exists()
    other = run_cli(
        "container", "render", *LOCK, "--out", str(tmp_path / "ctx"), "--base", "docker.io/library/fedora:41", "--python", "3.12"
    )
    assert other.returncode == ExitCode.USAGE and "not known to aipc-env" in other.stderr
    unknown_python = run_cli(
        "container",
        "render",
        *LOCK,
        "--out",
        str(tmp_path / "ctx"),
        "--base",
        "docker.io/library/fedora:41",
        "--gpu-runtime",
        "none",
    )
    assert (
        unknown_python.returncode == ExitCode.USAGE
        and "the Python of docker.io/library/fedora:41 is not known" in unknown_python.stderr
    )


def test_debian_12_cannot_run_the_gpu_runtime_even_with_intels_repository(tmp_path, signing_key):
    key, fingerprint = signing_key
    given = [
        "--gpu-runtime-source",
        "deb [arch=amd64] https://repositories.intel.com/gpu/ubuntu noble client",
        "--gpu-runtime-key",
        str(key),
        "--gpu-runtime-key-fingerprint",
        fingerprint,
    ]
    old = run_cli("container", "render", *LOCK, "--out", str(tmp_path / "ctx"), "--base", "localhost/aipc-base:bookworm", *given)
    assert old.returncode == ExitCode.USAGE and "Debian 12 (bookworm) cannot run the Intel GPU runtime" in old.stderr
    assert "glibc >= 2.38" in old.stderr and "Debian 13 or Ubuntu 24.04" in old.stderr
    assert not (tmp_path / "ctx").exists()
    new = run_cli("container", "render", *LOCK, "--out", str(tmp_path / "ctx"), *given, "--json")
    assert new.returncode == ExitCode.OK, new.stderr
    assert json.loads(new.stdout)["python"] == "3.13"  # the base's python3, from the distribution table
    cpu = run_cli(
        "container",
        "render",
        *LOCK,
        "--out",
        str(tmp_path / "ctx2"),
        "--base",
        "localhost/aipc-base:bookworm",
        "--gpu-runtime",
        "none",
        "--json",
    )
    assert cpu.returncode == ExitCode.OK and json.loads(cpu.stdout)["python"] == "3.11"


def test_base_images_name_their_distribution():
    from aipc_env.matrix.gpu_runtime import distribution_of_image

    assert distribution_of_image("localhost/aipc-base:bookworm") == "debian-12"
    assert distribution_of_image("docker.io/library/debian:12.7-slim") == "debian-12"
    assert distribution_of_image("debian:trixie-slim") == "debian-13"
    assert distribution_of_image("ubuntu:24.04") == "ubuntu-24.04"
    assert distribution_of_image("ghcr.io/x/ubuntu:noble@sha256:" + "0" * 64) == "ubuntu-24.04"
    assert distribution_of_image("fedora:41") is None and distribution_of_image("ubuntu:latest") is None


def test_a_key_file_holding_the_pinned_key_and_another_is_refused(tmp_path, signing_key):
    """Only the first key used to be read: the pinned key plus a second one passed, and the keyring written as the
    source's only signed-by key trusted both."""
    import subprocess

    key, fingerprint = signing_key
    home = tmp_path / "gnupg"
    home.mkdir(mode=0o700)
    env = {"GNUPGHOME": str(home), "PATH": "/usr/bin:/bin"}
    subprocess.run(
        ["gpg", "--batch", "--passphrase", "", "--quick-gen-key", "Other <other@example.org>", "ed25519", "sign", "never"],
        check=True,
        capture_output=True,
        env=env,
        timeout=120,
    )
    other = subprocess.run(["gpg", "--batch", "--armor", "--export"], check=True, capture_output=True, env=env).stdout
    both = tmp_path / "both.asc"
    both.write_bytes(key.read_bytes() + other)
    line = "deb [arch=amd64] https://repositories.intel.com/gpu/ubuntu noble client"
    for key_file, code in ((key, ExitCode.OK), (both, ExitCode.USAGE)):
        out = tmp_path / f"ctx-{key_file.stem}"
        result = run_cli(
            "container",
            "render",
            *LOCK,
            "--out",
            str(out),
            "--gpu-runtime-source",
            line,
            "--gpu-runtime-key",
            str(key_file),
            "--gpu-runtime-key-fingerprint",
            fingerprint,
        )
        assert result.returncode == code, result.stderr
        assert out.exists() is (code == ExitCode.OK)
    assert "the key file holds 2 keys" in result.stderr
    shown = subprocess.run(
        ["gpg", "--batch", "--show-keys", "--with-colons", str(tmp_path / "ctx-repo" / "aipc-gpu-keyring.asc")],
        capture_output=True,
        text=True,
        env=env,
    ).stdout
    assert [ln.split(":")[4][-16:] for ln in shown.splitlines() if ln.startswith("pub:")] == [fingerprint[-16:]]


@pytest.mark.parametrize(
    "data,labels",
    [
        ({"OCIv1": {"config": {"Labels": {"aipc.lock": "abc", "n": 1}}}}, {"aipc.lock": "abc", "n": "1"}),
        ({"OCIv1": {"config": {"Labels": None}}}, {}),
        ({"OCIv1": {"config": ["x"]}}, {}),
        ({"OCIv1": "x"}, {}),
        ([1, 2], {}),
        (None, {}),
    ],
)
def test_an_images_labels_are_read_from_any_shape_of_inspect_output(data, labels):
    from aipc_env.container.engine import labels_of

    assert labels_of(data) == labels
