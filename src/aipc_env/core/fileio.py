"""Atomic writes and careful reads: no half-written file or folder is ever left behind, and a bad path or
encoding is a named input error, never a traceback."""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from aipc_env.errors import InputError

__all__ = [
    "MAX_DEPTH",
    "MAX_INPUT_BYTES",
    "MAX_YAML_BYTES",
    "MAX_YAML_NODES",
    "DuplicateKeyError",
    "atomic_dir",
    "atomic_write_bytes",
    "atomic_write_text",
    "check_depth",
    "check_text_path",
    "check_writable",
    "decode_guessing",
    "decode_text",
    "default_mode",
    "loads_json",
    "parse_json",
    "parse_yaml",
    "read_json",
    "read_text",
    "read_yaml",
    "recover_atomic_dir",
    "respect_umask",
    "shown",
    "write_json",
]


def check_writable(
    path: str | Path, what: str = "output", *, folder: bool = False, key: str | None = None, config: str | Path | None = None
) -> Path:
    """Refuse, before any work, an output that cannot be written: a folder where a file is meant (or the reverse),
    a parent that is a file, a folder that is read-only or on a read-only file system (probed by creating and
    removing a temp file in the nearest existing folder; nothing is left). Errors name `config` and `key` when the
    path came from a config file, else the path."""
    path = Path(path)
    where = config if config is not None else path
    if path.exists() and path.is_dir() != folder:
        raise InputError(
            f"{what} {str(path)!r} is a {'file' if folder else 'folder'}; expected a "
            f"{'folder' if folder else 'file name to write'}",
            path=where,
            key=key,
            fix="choose another path" if folder else "pass a file path (e.g. add a file name to the folder)",
        )
    probe = path if folder and path.is_dir() else path.parent
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        raise InputError(
            f"cannot write {what} {str(path)!r}: {probe} is a file, not a folder",
            path=where,
            key=key,
            fix="choose a path inside a folder",
        )
    try:
        with tempfile.TemporaryFile(prefix=".aipc-env-write-probe-", dir=probe):
            pass
    except OSError as exc:
        raise InputError(
            f"cannot write {what} {str(path)!r}: {probe} is not writable ({exc.strerror})",
            path=where,
            key=key,
            fix="choose a folder you can write (e.g. under your home folder), or fix its permissions",
        ) from None
    return path


def _check_target(path: Path) -> None:
    check_writable(path, "the file")


def default_mode(*, folder: bool = False) -> int:
    """What a new file (0666) or folder (0777) gets under the current umask."""
    umask = os.umask(0)
    os.umask(umask)
    return (0o777 if folder else 0o666) & ~umask


def respect_umask(path: str | Path) -> None:
    """Give files and folders that a library wrote through a private temp file (0600 / 0700, e.g. safetensors'
    save_file) the modes a plain open() would: the umask default. Recurses into folders."""
    path = Path(path)
    items = [path, *path.rglob("*")] if path.is_dir() else [path]
    for item in items:
        if item.is_symlink():
            continue
        with contextlib.suppress(OSError):
            os.chmod(item, default_mode(folder=item.is_dir()))


def atomic_write_bytes(path: str | Path, data: bytes, *, mode: int | None = None) -> None:
    """Write to a temporary file in the same folder, fsync, then rename over the target. The target keeps its
    permission bits (or gets `mode`, else the umask default) — never the temp file's 0600."""
    path = Path(path)
    if path.is_symlink():  # edit the file the link points at; the link stays a link
        path = Path(os.path.realpath(path))
    _check_target(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise InputError(f"cannot write: {exc.strerror}", path=path, fix="check the folder exists and is writable") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        try:
            old = path.stat()
        except FileNotFoundError:
            old = None
        if mode is None:
            mode = stat.S_IMODE(old.st_mode) if old is not None else default_mode()
        os.chmod(tmp, mode)
        if old is not None and hasattr(os, "chown"):
            with contextlib.suppress(OSError):  # keep the owner where we may (root editing a user's file)
                os.chown(tmp, old.st_uid, old.st_gid)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def check_text_path(path: str | Path, what: str = "path", *, key: str | None = None) -> Path:
    """Refuse, by name, a path whose file name is not UTF-8 (Python keeps such bytes as lone surrogates): aipc-env
    writes paths into UTF-8 files (a launch plan, launch.env) that other programs read."""
    text = str(path)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InputError(
            f"{what} {shown(text)!r} holds a file name that is not UTF-8 text",
            path=shown(text),
            key=key,
            fix="rename the file or folder to a UTF-8 name, or choose another path",
        ) from None
    return Path(path)


def atomic_write_text(path: str | Path, text: str, *, newline: str = "\n", mode: int | None = None) -> None:
    try:
        data = text.replace("\n", newline).encode("utf-8")
    except UnicodeEncodeError as exc:  # a value holding a file name that is not UTF-8 (lone surrogates)
        around = shown(text[max(0, exc.start - 60) : exc.end + 20])
        raise InputError(
            f"cannot write it: a value would hold a file name that is not UTF-8 text (...{around}...)",
            path=shown(path),
            fix="rename that file or folder to a UTF-8 name, or choose another path",
        ) from None
    atomic_write_bytes(path, data, mode=mode)


def write_json(path: str | Path, data: Any, *, sort_keys: bool = False) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=sort_keys, ensure_ascii=False) + "\n")


def _owner_pid(name: str, marker: str) -> int | None:
    """The process id in `.NAME-partial-PID-xxxx` / `.NAME-old-PID`."""
    rest = name.split(marker, 1)[1]
    digits = rest.split("-", 1)[0]
    return int(digits) if digits.isdigit() else None


def recover_atomic_dir(dst: str | Path) -> list[str]:
    """Finish what a killed atomic_dir left beside dst (a crash or power cut: no handler ran): a partial folder of
    a process that is gone is removed; an old copy moved aside just before the rename is put back when dst is
    missing, else removed. Folders of a live process (another run at work) are left alone."""
    from aipc_env.core.procs import pid_alive

    dst = Path(dst)
    done: list[str] = []
    if not dst.parent.is_dir():
        return done
    for marker in ("-partial-", "-old-"):
        for item in sorted(dst.parent.glob(f".{glob.escape(dst.name)}{marker}*")):
            pid = _owner_pid(item.name, f".{dst.name}{marker}")
            if pid is None or pid_alive(pid) or not item.is_dir() or item.is_symlink():
                continue
            if marker == "-old-" and not dst.exists():
                os.replace(item, dst)
                done.append(f"put back {dst} from {item.name} (an interrupted replace)")
            else:
                shutil.rmtree(item, ignore_errors=True)
                done.append(f"removed {item.name}, left by an interrupted run")
    return done


@contextlib.contextmanager
def atomic_dir(dst: str | Path) -> Iterator[Path]:
    """Yield a hidden temporary folder beside dst; on success it replaces dst, on any error it is removed. What a
    killed process leaves (the partial folder, an old copy moved aside) the next atomic_dir of dst cleans up."""
    from aipc_env.core.interrupts import checkpoint

    dst = Path(dst)
    if dst.exists() and not dst.is_dir():
        raise InputError("exists and is a file; expected a folder", path=dst, fix="choose another output folder")
    dst.parent.mkdir(parents=True, exist_ok=True)
    recover_atomic_dir(dst)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dst.name}-partial-{os.getpid()}-", dir=dst.parent))
    old = dst.with_name(f".{dst.name}-old-{os.getpid()}")
    moved = False
    try:
        yield tmp
        checkpoint("atomic-dir:before-rename")
        if dst.exists():
            os.replace(dst, old)
            moved = True
            checkpoint("atomic-dir:after-old-moved")
        respect_umask(tmp)  # mkdtemp made it 0700; libraries write some files 0600
        os.replace(tmp, dst)
    except BaseException:
        if moved and not dst.exists():
            os.replace(old, dst)  # the old folder back where it was
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if moved:
        shutil.rmtree(old, ignore_errors=True)


def shown(path: str | Path) -> str:
    """A path as text that any output can carry: bytes of a file name that are not UTF-8 (Python keeps them as
    lone surrogates) become \\xNN escapes instead of failing the JSON, HTML or terminal write later."""
    return str(path).encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


_BOMS = ((b"\xef\xbb\xbf", "utf-8"), (b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be"))
"""The byte-order marks a text file may start with (UTF-16 is what PowerShell 5.1's `>` writes)."""
LEGACY_CODE_PAGE = "cp1252"
"""What `cmd`'s `>` writes on a Western-European Windows: the legacy code page tried after UTF-8."""


def _decode_marked(raw: bytes, path: str | Path, what: str) -> tuple[str, str] | None:
    """Text that starts with a byte-order mark, decoded by it, and the encoding it was read as; None without one."""
    for bom, encoding in _BOMS:
        if raw.startswith(bom):
            try:
                text = raw[len(bom) :].decode(encoding)
            except UnicodeDecodeError as exc:
                raise InputError(
                    f"{what} starts with a {encoding} byte-order mark but is not {encoding} text "
                    f"({exc.reason} at byte {exc.start + len(bom)})",
                    path=path,
                ) from None
            return text, "utf-8 with a byte-order mark" if encoding == "utf-8" else encoding
    return None


def decode_text(raw: bytes, path: str | Path, what: str) -> str:
    """UTF-8 (with or without BOM) or UTF-16 with a BOM (what PowerShell 5.1's `>` writes); nothing else."""
    marked = _decode_marked(raw, path, what)
    if marked is not None:
        return marked[0]
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        hint = (
            "it looks like UTF-16 without a byte-order mark"
            if b"\x00" in raw[:200]
            else "it looks like a Windows ANSI code page (cp1252)"
        )
        raise InputError(
            f"{what} is not UTF-8 text ({exc.reason} at byte {exc.start}; {hint})",
            path=path,
            fix="save it as UTF-8 (in PowerShell: Get-Content F | Set-Content -Encoding utf8 F2)",
        ) from None


def decode_guessing(raw: bytes, path: str | Path, what: str, fix: str = "save it as UTF-8") -> tuple[str, str]:
    """Text a user pasted from a Windows shell, and the encoding it was read as: a byte-order mark says (UTF-8, or
    UTF-16 as PowerShell 5.1's `>` writes it), else UTF-8, else the legacy code page (cp1252, as `cmd` writes).
    UTF-16 is never guessed without its mark (any even number of bytes decodes as UTF-16)."""
    marked = _decode_marked(raw, path, what)
    if marked is not None:
        return marked
    try:
        return raw.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        pass
    try:
        return raw.decode(LEGACY_CODE_PAGE), LEGACY_CODE_PAGE
    except UnicodeDecodeError as exc:
        raise InputError(
            f"{what} is neither UTF-8, UTF-16 nor {LEGACY_CODE_PAGE} text ({exc.reason} at byte {exc.start})", path=path, fix=fix
        ) from None


def read_text(path: str | Path, what: str = "file", max_bytes: int | None = None) -> str:
    """A user's text file, read from the stream up to its bound (a device or a pipe such as /dev/zero has no size
    to check beforehand), decoded strictly."""
    path = Path(path)
    limit = max_bytes or 64 * 2**20
    too_big = InputError(
        f"{what} is larger than {limit // 2**20} MiB", path=path, fix="aipc-env's input files are small; check the path"
    )
    try:
        if path.is_file() and path.stat().st_size > limit:
            raise too_big
        with path.open("rb") as fh:
            raw = fh.read(limit + 1)
        if len(raw) > limit:
            raise too_big
    except FileNotFoundError:
        raise InputError(f"{what} not found", path=path, fix="check the path") from None
    except IsADirectoryError:
        raise InputError(f"{what} is a folder, expected a file", path=path) from None
    except PermissionError:
        raise InputError(f"cannot read {what}: permission denied", path=path) from None
    except OSError as exc:
        raise InputError(f"cannot read {what}: {exc.strerror}", path=path) from None
    return decode_text(raw, path, what)


MAX_INPUT_BYTES = 64 * 2**20
"""The largest JSON or YAML file aipc-env reads from a user (a doctor report is ~100 KB, a lock ~200 KB)."""
MAX_DEPTH = 64
"""The deepest nesting of a user's JSON or YAML (aipc-env's own formats nest at most ~8 levels)."""
MAX_YAML_NODES = 200_000
"""YAML nodes after aliases are expanded: a few hundred bytes of anchors and aliases can stand for billions. The
nodes written are counted too, as the document is composed, so a large file stops at the bound instead of being
built whole first."""
MAX_YAML_BYTES = 4 * 2**20
"""The largest YAML document read (the largest aipc-env reads, environments/xpu-wheels.yaml, is ~120 KB; a
conda-lock file ~1 MB), refused before parsing starts."""


def _too_long_number(path: str | Path, what: str) -> InputError:
    """Python refuses to turn a number of more than sys.get_int_max_str_digits() digits (4300) into an int."""
    import sys

    return InputError(
        f"{what} holds a number of more than {sys.get_int_max_str_digits()} digits",
        path=path,
        fix="aipc-env's files hold small numbers; this is not one of them",
    )


def _too_deep(path: str | Path, what: str) -> InputError:
    return InputError(
        f"{what} is nested deeper than {MAX_DEPTH} levels",
        path=path,
        fix="aipc-env's files nest a few levels; this is not one of them",
    )


def check_depth(data: Any, path: str | Path, what: str, limit: int = MAX_DEPTH) -> Any:
    """Refuse data nested deeper than `limit` (walked without recursion)."""
    containers = (dict, list)
    stack = [(data, 1)] if isinstance(data, containers) else []
    while stack:  # only containers are pushed: scalars cannot deepen anything
        item, depth = stack.pop()
        if depth > limit:
            raise _too_deep(path, what)
        values = item.values() if isinstance(item, dict) else item
        stack.extend((v, depth + 1) for v in values if isinstance(v, containers))
    return data


class DuplicateKeyError(ValueError):
    """A JSON object names one key twice: readers disagree which value wins (Python's json keeps the last)."""


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json's object_pairs_hook of every JSON reader of aipc-env: a key twice in one object is an error."""
    data = dict(pairs)
    if len(data) != len(pairs):
        seen: set[str] = set()
        twice = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]  # next() over a generator whose items are the duplicate keys
        raise DuplicateKeyError(f"the key {twice[:80]!r} appears twice in one object")
    return data


def loads_json(text: str | bytes) -> Any:
    """json.loads for every JSON aipc-env reads (a tool's output, a record, a plan): duplicate keys are an error
    (DuplicateKeyError, a ValueError), so no value is silently dropped. User files go through parse_json."""
    return json.loads(text, object_pairs_hook=unique_keys)


def parse_json(text: str, path: str | Path, what: str = "JSON file") -> Any:
    """json.loads with the limits of every user file: size, depth, one value per key; errors name the file and the
    place."""
    if len(text) > MAX_INPUT_BYTES:
        raise InputError(f"{what} is larger than {MAX_INPUT_BYTES // 2**20} MiB", path=path)
    try:
        data = loads_json(text)
    except RecursionError:
        raise _too_deep(path, what) from None
    except json.JSONDecodeError as exc:
        raise InputError(f"not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}", path=path) from None
    except DuplicateKeyError as exc:
        raise InputError(
            f"{what} is ambiguous: {exc}", path=path, fix="keep one value per key (readers disagree which of two wins)"
        ) from None
    except ValueError:  # the only other ValueError json.loads raises: an integer past the digit limit
        raise _too_long_number(path, what) from None
    return check_depth(data, path, what)


def _check_yaml_graph(root: Any, path: str | Path, what: str) -> None:
    """Depth and the node count as the aliases expand (a shared node counts each time it is used), computed on the
    composed graph before anything is built from it."""
    import yaml

    size: dict[int, int] = {}
    stack: list[tuple[Any, int, bool]] = [(root, 1, False)]
    while stack:
        node, depth, done = stack.pop()
        if depth > MAX_DEPTH:
            raise _too_deep(path, what)
        if isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        else:
            size[id(node)] = 1
            continue
        if done:
            total = 1 + sum(size[id(c)] for c in children)
            if total > MAX_YAML_NODES:
                raise InputError(
                    f"{what} expands to more than {MAX_YAML_NODES} values (anchors and aliases)",
                    path=path,
                    fix="write the values out; aipc-env's files are small",
                )
            size[id(node)] = total
        elif id(node) not in size:
            stack.append((node, depth, True))
            stack.extend((c, depth + 1, False) for c in children if id(c) not in size)


def _bounded_loader(text: str, path: str | Path, what: str) -> Any:
    """A safe loader (libyaml's parser when PyYAML has it) whose composer counts the nodes it makes and their depth,
    and stops past MAX_YAML_NODES or MAX_DEPTH while composing: the document is never built whole before a limit
    applies."""
    import yaml
    from yaml.composer import Composer

    base: Any = None
    if getattr(yaml, "__with_libyaml__", False):
        from yaml._yaml import CParser as base  # type: ignore[no-redef]  # libyaml's C classes where present, else the pure-Python ones (same interface)

    class _Counting(Composer):  # type: ignore[misc, unused-ignore]  # PyYAML has no type information here (no types-PyYAML): Composer is Any
        made = 0
        depth = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise _too_deep(path, what)
            try:
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

        def compose_scalar_node(self, anchor: Any) -> Any:
            self._count()
            return super().compose_scalar_node(anchor)

        def compose_sequence_node(self, anchor: Any) -> Any:
            self._count()
            return super().compose_sequence_node(anchor)

        def compose_mapping_node(self, anchor: Any) -> Any:
            self._count()
            return super().compose_mapping_node(anchor)

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            """One value per key, as in every JSON reader: YAML's loaders keep the last of two silently (two `train:`
            sections, the first dropped). Checked on the keys as written, before a merge (`<<`) brings in the keys an
            explicit one may override."""
            seen: dict[Any, int] = {}
            for key_node, _ in node.value if isinstance(node, yaml.MappingNode) else ():
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key, line = self.construct_object(key_node, deep=True), key_node.start_mark.line + 1
                try:
                    first = seen.get(key)
                except TypeError:  # an unhashable key: the constructor below names it
                    continue
                if first is not None:
                    raise InputError(
                        f"{what} is ambiguous: the key {str(key)[:80]!r} appears twice in one mapping "
                        f"({f'line {line}' if first == line else f'lines {first} and {line}'})",
                        path=path,
                        fix="keep one value per key (YAML keeps the last one silently)",
                    )
                seen[key] = line
            return super().construct_mapping(node, deep=deep)

        def _count(self) -> None:
            self.made += 1
            if self.made > MAX_YAML_NODES:
                raise InputError(
                    f"{what} holds more than {MAX_YAML_NODES} values", path=path, fix="aipc-env's files are small; check the path"
                )

    if base is not None:  # libyaml's events, composed here (CParser's own composer cannot be bounded)

        class _Loader(_Counting, base, yaml.constructor.SafeConstructor, yaml.resolver.Resolver):  # type: ignore[misc, unused-ignore]  # libyaml's C parser mixed into the bounded composer (a runtime base)
            def __init__(self, stream: str) -> None:
                base.__init__(self, stream)
                Composer.__init__(self)
                yaml.constructor.SafeConstructor.__init__(self)
                yaml.resolver.Resolver.__init__(self)
    else:

        class _Loader(_Counting, yaml.SafeLoader):  # type: ignore[no-redef, misc, unused-ignore]  # PyYAML is Any here (no stubs); libyaml's C classes where present, else the pure-Python ones (same interface)
            pass

    return _Loader(text)


def parse_yaml(text: str, path: str | Path, what: str = "YAML file") -> Any:
    """yaml.safe_load with the limits of every user file: size (MAX_YAML_BYTES, before parsing), the values written
    (while composing), depth, alias expansion, one value per key; errors name the place."""
    import yaml

    if len(text) > MAX_YAML_BYTES or len(text.encode("utf-8", "surrogatepass")) > MAX_YAML_BYTES:
        raise InputError(
            f"{what} is larger than {MAX_YAML_BYTES // 2**20} MiB",
            path=path,
            fix="aipc-env's YAML files are small; check the path",
        )
    if any("\ud800" <= c <= "\udfff" for c in text):  # libyaml encodes the text first: a lone surrogate raises there
        raise InputError(f"{what} holds text that is not UTF-8 (a lone surrogate)", path=path, fix="save it as UTF-8")
    loader = _bounded_loader(text, path, what)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_yaml_graph(node, path, what)
        return loader.construct_document(node)
    except RecursionError:
        raise _too_deep(path, what) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        if "maximum nesting depth" in problem:  # libyaml's scanner looks ahead past our composer's bound
            raise _too_deep(path, what) from None
        raise InputError(f"not valid YAML{where}: {problem}", path=path) from None
    except ValueError:  # PyYAML's int(): an integer past the digit limit
        raise _too_long_number(path, what) from None
    finally:
        loader.dispose()


def read_yaml(path: str | Path, what: str = "YAML file") -> Any:
    return parse_yaml(read_text(path, what), Path(path), what)


def read_json(path: str | Path, what: str = "JSON file") -> Any:
    return parse_json(read_text(path, what), Path(path), what)


def parse_toml(text: str, path: str | Path, what: str = "TOML file") -> Any:
    """tomllib.loads with the limits of every user file: size, depth (the parser recurses into nested arrays and
    inline tables; a deep one is a named error, not a RecursionError)."""
    import tomllib

    if len(text) > MAX_INPUT_BYTES:
        raise InputError(f"{what} is larger than {MAX_INPUT_BYTES // 2**20} MiB", path=path)
    try:
        data = tomllib.loads(text)
    except RecursionError:
        raise _too_deep(path, what) from None
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"not valid TOML: {exc}", path=path) from None
    except ValueError:  # tomllib's int(): an integer past the digit limit
        raise _too_long_number(path, what) from None
    return check_depth(data, path, what)
