"""Build minimal wheels and a PEP 503 index folder: local stand-ins for PyPI and the PyTorch XPU index.

Used by tests and benchmarks (a wheel with a `+xpu` local version, a same-name decoy) so index routing, local
versions and hash checks are proven without the real indexes.
"""

from __future__ import annotations

import base64
import hashlib
import html
import zipfile
from pathlib import Path

from packaging.utils import canonicalize_name

__all__ = ["make_wheel", "sha256_of", "write_simple_index"]


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def make_wheel(
    folder: Path,
    name: str,
    version: str,
    *,
    requires: list[str] = (),
    tag: str = "py3-none-any",
    payload: str = "",
    scripts: dict[str, str] | None = None,
    requires_python: str | None = None,
) -> Path:
    """A valid wheel with one module `<name>_stub` whose VALUE is `payload` (to tell builds apart), and
    console scripts `{command: "module:function"}` for installers to write entry points of."""
    folder.mkdir(parents=True, exist_ok=True)
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    files = {
        f"{dist}_stub.py": f"VALUE = {payload or version!r}\n".encode(),
        f"{info}/METADATA": (
            "Metadata-Version: 2.1\n"
            f"Name: {name}\n"
            f"Version: {version}\n"
            + (f"Requires-Python: {requires_python}\n" if requires_python else "")
            + "".join(f"Requires-Dist: {r}\n" for r in requires)
        ).encode(),
        f"{info}/WHEEL": f"Wheel-Version: 1.0\nGenerator: aipc-env-tests\nRoot-Is-Purelib: true\nTag: {tag}\n".encode(),
    }
    if scripts:
        files[f"{dist}_stub.py"] += b"def main():\n    print(VALUE)\n"
        files[f"{info}/entry_points.txt"] = (
            "[console_scripts]\n" + "".join(f"{command} = {target}\n" for command, target in scripts.items())
        ).encode()
    record = "\n".join([_record_line(n, d) for n, d in files.items()] + [f"{info}/RECORD,,"]) + "\n"
    files[f"{info}/RECORD"] = record.encode()
    path = folder / f"{dist}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for n, d in files.items():
            zf.writestr(n, d)
    return path


def write_simple_index(wheels: list[Path], root: Path) -> Path:
    """A PEP 503 simple index under root/simple with sha256 fragments; returns the simple/ folder."""
    by_project: dict[str, list[Path]] = {}
    for w in wheels:
        by_project.setdefault(canonicalize_name(w.name.split("-")[0]), []).append(w)
    simple = root / "simple"
    simple.mkdir(parents=True, exist_ok=True)
    links = []
    for project, files in sorted(by_project.items()):
        (simple / project).mkdir(exist_ok=True)
        body = "".join(
            f'<a href="../../files/{html.escape(f.name)}#sha256={sha256_of(f)}">{html.escape(f.name)}</a><br>\n' for f in files
        )
        (simple / project / "index.html").write_text(f"<!DOCTYPE html><html><body>\n{body}</body></html>\n")
        links.append(f'<a href="{project}/">{project}</a><br>')
    (simple / "index.html").write_text("<!DOCTYPE html><html><body>\n" + "\n".join(links) + "\n</body></html>\n")
    files_dir = root / "files"
    files_dir.mkdir(exist_ok=True)
    for w in wheels:
        target = files_dir / w.name
        if target.resolve() != w.resolve():
            target.write_bytes(w.read_bytes())
    return simple
