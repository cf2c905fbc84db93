"""The one home of conda's values as aipc-env reads them from a conda layer: versions, build strings, dependency specs
and package URLs, each bounded before anything parses it, and conda's own MatchSpec (vendored by conda-lock: the
`lock` extra) called through one wrapper that turns everything it raises into CondaSpecError (a ValueError), so a
caller handles a refusal as a problem of the file, not a traceback. Whether MatchSpec is here; what lock check notes
when it is not.

URLs are normalised (percent-decoded, dot-segments resolved, RFC 3986 5.2.4) before the channel rule compares them,
and only a URL already in that normal form is accepted: what the rule checked is what the installer is handed."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import unquote, urlsplit

from aipc_env.core.specs import bounded_text

__all__ = [
    "CLOSURE_UNCHECKED",
    "CONDA_FORGE",
    "MAX_CONDA_SPEC_CHARS",
    "MAX_CONDA_URL_CHARS",
    "MAX_CONDA_VERSION_CHARS",
    "CondaSpecError",
    "can_check_closure",
    "check_build",
    "check_conda_name",
    "check_conda_spec",
    "check_conda_version",
    "check_package_url",
    "matches",
    "normalise_url",
    "split_filename",
]

CONDA_FORGE = "https://conda.anaconda.org/conda-forge/"
MAX_CONDA_VERSION_CHARS = 128
"""The longest conda version or build string read (python's `3.12.8` is 6; a build such as `h9e4cc4f_1_cpython` 18)."""
MAX_CONDA_SPEC_CHARS = 512
"""The longest dependency spec read (`>=3.12,<3.13.0a0` is 17; a pinned build list a few dozen)."""
MAX_CONDA_URL_CHARS = 1024
_NAME = re.compile(r"[a-z0-9_](?:[a-z0-9_.-]{0,198}[a-z0-9_])?")
_VERSION = re.compile(r"[A-Za-z0-9_.+!]+")
_BUILD = re.compile(r"[A-Za-z0-9_.+]+")
_SPEC = re.compile(r"[A-Za-z0-9_.+!*<>=,|~ ()\[\]'\"-]*")
_EXTENSIONS = (".conda", ".tar.bz2")
_SUBDIRS = ("win-64", "linux-64", "noarch")


class CondaSpecError(ValueError):
    """A conda value aipc-env refuses (too long, a number too large, a character conda does not allow) or one conda's
    MatchSpec refuses."""


def _allowed(value: str, limit: int, what: str, pattern: re.Pattern[str], complaint: str) -> str:
    """value bounded (aipc_env.core.specs.bounded_text) and made only of pattern's characters, else CondaSpecError:
    `what` holds a character `complaint`."""
    text = bounded_text(value, limit, what, CondaSpecError)
    if not pattern.fullmatch(text):
        raise CondaSpecError(f"{what} {text[:80]!r} holds a character {complaint}")
    return text


def check_conda_name(value: str) -> str:
    """A conda package name: lowercase letters, digits, `_`, `.`, `-`, at most 200 characters."""
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise CondaSpecError(f"{str(value)[:80]!r} is not a conda package name (lowercase letters, digits, '_', '.', '-')")
    return value


def check_conda_version(value: str) -> str:
    """A conda version as a record holds it (`3.12.8`, `1!2.0`, `2024a`): bounded before conda reads it."""
    return _allowed(value, MAX_CONDA_VERSION_CHARS, "conda version", _VERSION, "conda versions do not (letters, digits, _.+!)")


def check_build(value: str) -> str:
    """A conda build string (`h9e4cc4f_1_cpython`), bounded."""
    return _allowed(value, MAX_CONDA_VERSION_CHARS, "conda build", _BUILD, "builds do not (letters, digits, _.+)")


def check_conda_spec(value: str) -> str:
    """The version part of a dependency (`>=3.12,<3.13.0a0`, `* *_cp312`): bounded and from conda's characters."""
    return _allowed(value, MAX_CONDA_SPEC_CHARS, "conda dependency spec", _SPEC, "conda specs do not")


def _remove_dot_segments(path: str) -> str:
    """RFC 3986 5.2.4: `a/./b` is `a/b`, `a/b/../c` is `a/c`; never above the root."""
    out: list[str] = []
    segments = path.split("/")
    for i, seg in enumerate(segments):
        last = i == len(segments) - 1
        if seg == "..":
            if len(out) > 1:
                out.pop()
            if last:
                out.append("")
        elif seg == ".":
            if last:
                out.append("")
        else:
            out.append(seg)
    return "/".join(out)


def normalise_url(url: str) -> str:
    """A URL as a server reads it: scheme and host lowercase, the path percent-decoded with its dot-segments resolved;
    no query, fragment, user or port (a package URL has none). CondaSpecError where it cannot be one."""
    text = _bounded_url(url)
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise CondaSpecError(f"{text[:120]!r} is not a URL: {exc}") from None
    if parts.query or parts.fragment or parts.username or parts.password or port is not None:
        raise CondaSpecError(f"{text[:120]!r}: a package URL has no query, fragment, user or port")
    path = unquote(parts.path)
    if "\\" in path or "%" in path or any(ord(c) < 32 or ord(c) == 127 for c in path):
        raise CondaSpecError(f"{text[:120]!r}: a backslash, a doubly encoded or a control character in the path")
    return f"{parts.scheme.lower()}://{(parts.hostname or '').lower()}{_remove_dot_segments(path)}"


def _bounded_url(url: object) -> str:
    if not isinstance(url, str):
        raise CondaSpecError(f"{str(url)[:60]!r} is not a URL")
    if len(url) > MAX_CONDA_URL_CHARS:
        raise CondaSpecError(f"URL {url[:60]!r}... is longer than {MAX_CONDA_URL_CHARS} characters")
    return url


def split_filename(url: str) -> tuple[str, str, str]:
    """(name, version, build) of a conda package file `name-version-build.conda` (or .tar.bz2); CondaSpecError
    where the file name lacks one of them."""
    filename = url.rsplit("/", 1)[-1]
    ext = next((e for e in _EXTENSIONS if filename.endswith(e)), None)
    if ext is None:
        raise CondaSpecError(f"{filename[:120]!r} is not a conda package file (.conda or .tar.bz2)")
    parts = filename[: -len(ext)].rsplit("-", 2)
    if len(parts) != 3 or not all(parts):
        raise CondaSpecError(f"{filename[:120]!r} is not name-version-build{ext}: its version or build is missing")
    name, version, build = parts
    return check_conda_name(name), check_conda_version(version), check_build(build)


def check_package_url(url: str, channel: str = CONDA_FORGE) -> str:
    """A package URL of the channel, in its normal form: `<channel><subdir>/<name>-<version>-<build>.<ext>`. A URL
    whose dot-segments or escapes lead elsewhere is refused, as is one that only differs from its normal form."""
    normal = normalise_url(url)
    if normal != url:
        raise CondaSpecError(f"{url[:160]!r} is not in its normal form ({normal[:160]!r}): dot-segments or escapes")
    if not normal.startswith(channel):
        raise CondaSpecError(f"{url[:160]!r} is not a package URL of {channel}")
    rest = normal[len(channel) :].split("/")
    if len(rest) != 2 or rest[0] not in _SUBDIRS:
        raise CondaSpecError(f"{url[:160]!r} is not <channel><{'|'.join(_SUBDIRS)}>/<file>")
    split_filename(normal)
    return url


def matches(dependency: str, spec: str, record: dict[str, Any]) -> bool:
    """Whether a record {name, version, build, build_number} satisfies `dependency spec`, by conda's own MatchSpec.
    Everything MatchSpec or its version parser raises is CondaSpecError naming the spec (the values are bounded
    first: conda turns a 5,000-digit version into int() and Python's digit limit raises a bare ValueError)."""
    try:
        check_conda_name(dependency)
        check_conda_spec(spec)
        check_conda_version(str(record.get("version", "")))
    except CondaSpecError as exc:
        raise CondaSpecError(f"{dependency[:80]}: {exc}") from None
    try:
        from conda_lock._vendor.conda.models.match_spec import MatchSpec
    except ImportError:
        raise CondaSpecError("conda's MatchSpec (conda-lock, the `lock` extra) is not installed here") from None
    try:
        return bool(
            MatchSpec(f"{dependency} {spec}".strip()).match(record)  # type: ignore[no-untyped-call, unused-ignore]  # conda-lock's vendored conda has no annotations
        )
    except Exception as exc:  # noqa: BLE001 - conda raises CondaError subclasses, ValueError, TypeError, KeyError
        raise CondaSpecError(f"conda's MatchSpec refuses {dependency} {spec}: {str(exc)[:200]}") from None


def can_check_closure() -> bool:
    """Whether conda's MatchSpec (vendored by conda-lock, the `lock` extra) can be imported here."""
    try:
        from conda_lock._vendor.conda.models.match_spec import MatchSpec  # noqa: F401
    except ImportError:
        return False
    return True


CLOSURE_UNCHECKED = (
    "the conda layer's closure was not checked: conda-lock (conda's MatchSpec) is not installed "
    "here; pip install 'aipc-env[lock]' checks it"
)
