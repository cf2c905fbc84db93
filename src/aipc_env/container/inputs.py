"""What a user may put into a Containerfile, validated before anything is written: an OCI image reference for the
base, and one apt source line for the GPU runtime whose `signed-by` key has a pinned fingerprint. Nothing else from
the user reaches the Containerfile as code: labels are JSON-quoted, the apt line and key are files COPYed in."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from aipc_env.errors import InputError

DEFAULT_BASE = "localhost/aipc-base:trixie"
"""The base image: Debian 13, bootstrapped from the distro mirror by `container build --base-from-mirror`."""

__all__ = [
    "APT_KEY",
    "APT_LIST",
    "DEFAULT_BASE",
    "AptSource",
    "check_pinned",
    "key_fingerprint",
    "parse_apt_source",
    "validate_image_reference",
]

APT_LIST = "aipc-gpu.list"
APT_KEY = "aipc-gpu-keyring.gpg"
KEYRING_IN_IMAGE = f"/usr/share/keyrings/{APT_KEY}"
MAX_REFERENCE = 255

# The OCI distribution spec's grammar: [host[:port]/]path[:tag][@algorithm:hex]
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_HOST = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]+)?)"
_REFERENCE = re.compile(
    rf"^(?:{_HOST}/)?{_COMPONENT}(?:/{_COMPONENT})*(?::[\w][\w.-]{{0,127}})?"
    r"(?:@[a-z0-9]+(?:[+._-][a-z0-9]+)*:[0-9a-fA-F]{32,})?$"
)
_FINGERPRINT = re.compile(r"^[0-9A-F]{40}$")
_SUITE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]*$")


def validate_image_reference(value: str, key: str = "--base") -> str:
    """An OCI image reference (registry/name:tag@digest); anything else (spaces, newlines, quotes) is refused."""
    if not value or len(value) > MAX_REFERENCE or not _REFERENCE.fullmatch(value):
        raise InputError(
            f"{value!r} is not an OCI image reference",
            key=key,
            fix="give registry/name[:tag][@sha256:...], e.g. docker.io/library/ubuntu:24.04",
        )
    return value


@dataclass(frozen=True)
class AptSource:
    uri: str
    suite: str
    components: tuple[str, ...]
    arch: str | None

    def line(self) -> str:
        """The one-line form written into the image, signed by the copied keyring and nothing else."""
        options = f"signed-by={KEYRING_IN_IMAGE}" + (f" arch={self.arch}" if self.arch else "")
        return f"deb [{options}] {self.uri} {self.suite} {' '.join(self.components)}\n"


def parse_apt_source(value: str, key: str = "--gpu-runtime-source") -> AptSource:
    """One `deb [options] https://URI suite components...` line. Only `arch=` and `signed-by=` options are allowed
    (signed-by is replaced by the copied key); `trusted=yes` and every other way to skip signatures is refused."""
    if "\n" in value or "\r" in value or "\x00" in value:
        raise InputError("an apt source is one line", key=key)
    match = re.fullmatch(r"\s*deb\s+(?:\[([^\]]*)\]\s+)?(\S+)\s+(\S+)((?:\s+\S+)*)\s*", value)
    if not match:
        raise InputError(
            f"{value!r} is not an apt source line",
            key=key,
            fix="give `deb [signed-by=...] https://repositories.intel.com/gpu/ubuntu noble client`",
        )
    options, uri, suite, components = match.group(1) or "", match.group(2), match.group(3), match.group(4).split()
    arch = None
    for option in options.split():
        name, _, val = option.partition("=")
        if name == "arch" and re.fullmatch(r"[a-z0-9]+(,[a-z0-9]+)*", val):
            arch = val
        elif name == "signed-by":
            continue  # the pinned key given with --gpu-runtime-key replaces it
        else:
            raise InputError(
                f"apt option {option!r} is not allowed (only arch= and signed-by=; never trusted=yes)",
                key=key,
                fix="drop it: the source is verified with the key you pin",
            )
    if not re.fullmatch(r"https://[A-Za-z0-9.-]+(?::[0-9]+)?(?:/[A-Za-z0-9._~%/-]*)?", uri):
        raise InputError(f"{uri!r} is not an https URL", key=key, fix="use the https URL of the repository")
    if not _SUITE.fullmatch(suite) or not all(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", c) for c in components):
        raise InputError("the suite or a component holds characters apt does not use", key=key)
    return AptSource(uri, suite, tuple(components), arch)


def key_fingerprint(path: Path) -> str:
    """The OpenPGP fingerprint of a (single) public key file, as gpg reads it (no keyring is touched)."""
    import shutil
    import tempfile

    from aipc_env.core.procs import ProbeFailed, run_capture

    if not path.is_file():
        raise InputError("key file not found", path=path, key="--gpu-runtime-key")
    gpg = shutil.which("gpg")
    if gpg is None:
        raise InputError(
            "gpg is needed to read the key's fingerprint", key="--gpu-runtime-key", fix="install gnupg (apt install gnupg)"
        )
    with tempfile.TemporaryDirectory() as home:
        try:
            out = run_capture(
                [gpg, "--homedir", home, "--batch", "--show-keys", "--with-colons", "--with-fingerprint", str(path)], timeout=60
            )
        except ProbeFailed as exc:
            raise InputError(f"not an OpenPGP public key: {exc}", path=path, key="--gpu-runtime-key") from None
    lines = out.stdout.splitlines()
    primaries = [
        lines[i + 1].split(":")[9]
        for i, line in enumerate(lines)
        if line.startswith("pub:") and i + 1 < len(lines) and lines[i + 1].startswith("fpr:")
    ]
    if len(primaries) > 1:  # the file becomes the source's only signed-by keyring: every key in it would be trusted
        raise InputError(
            f"the key file holds {len(primaries)} keys ({', '.join(primaries[:3])}); apt would trust "
            "each of them for this source",
            path=path,
            key="--gpu-runtime-key",
            fix="export only the repository's key into a file of its own (gpg --export FINGERPRINT)",
        )
    if not primaries or not _FINGERPRINT.fullmatch(primaries[0]):
        raise InputError("no key fingerprint in this file", path=path, key="--gpu-runtime-key")
    return primaries[0]


def check_pinned(path: Path, pinned: str | None) -> str:
    """The key's fingerprint, refused unless it equals the pinned one (spaces and case ignored)."""
    if not pinned:
        raise InputError(
            "the GPU runtime's key needs a pinned fingerprint",
            key="--gpu-runtime-key-fingerprint",
            fix="pass the 40-hex-digit fingerprint the repository publishes (it is checked against "
            "the key file; the key is then the only one apt trusts for that source)",
        )
    wanted = re.sub(r"\s+", "", pinned).upper()
    if not _FINGERPRINT.fullmatch(wanted):
        raise InputError(f"{pinned!r} is not a 40-hex-digit OpenPGP fingerprint", key="--gpu-runtime-key-fingerprint")
    got = key_fingerprint(path)
    if got != wanted:
        raise InputError(
            f"the key's fingerprint is {got}, not the pinned {wanted}",
            path=path,
            key="--gpu-runtime-key",
            fix="get the repository's real key; nothing was written",
        )
    return got
