"""Read a dataset's layout into samples, following qwen-image-finetune's naming rules (runbook §3).

Scanning never decodes images; it records where each sample's parts are and what is odd about the layout.
"""

from __future__ import annotations

import csv
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from aipc_env.errors import InputError

__all__ = [
    "CONTROL_DIRS",
    "EXTRA_CONTROL",
    "IMAGE_EXTS",
    "TARGET_DIRS",
    "Sample",
    "Scan",
    "csv_dialect",
    "read_csv_text",
    "scan_dataset",
]

IMAGE_EXTS = (".jpg", ".jpeg", ".png", ".bmp", ".webp")
TARGET_DIRS = ("training_images", "images", "target_images", "target", "targets")
CONTROL_DIRS = ("control_images", "control", "condition_images", "controls")
EXTRA_CONTROL = re.compile(r"^(?P<stem>.+)_control_(?P<n>\d+)$")
"""The stem of an extra control image: <stem>_control_<n>."""


@dataclass
class Sample:
    id: str
    target: Path | bytes | None
    controls: list[Path | bytes] = field(default_factory=list)
    """Main control first, then _control_1, _control_2 ..."""
    mask: Path | bytes | None = None
    prompt: str | None = None
    prompt_file: Path | None = None
    """The prompt's .txt (local datasets), also when it is empty."""
    where: str = ""
    """Where the sample comes from (a file, or parquet file and row) for messages."""


@dataclass
class Scan:
    format: Literal["local", "parquet", "csv"]
    root: Path
    samples: list[Sample]
    issues: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _utf8_name(p: Path) -> bool:
    try:
        p.name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _images(folder: Path) -> dict[str, Path]:
    """Images by stem; names that are not UTF-8 are left out (undecodable_names reports them)."""
    return {p.stem: p for p in sorted(folder.iterdir()) if p.is_file() and p.suffix.lower() in IMAGE_EXTS and _utf8_name(p)}


def undecodable_names(folder: Path) -> list[str]:
    """File names that are not valid UTF-8 (shown with their bad bytes escaped): the trainers cannot open them
    by name on every platform, so the scan reports them instead of failing later."""
    return [os.fsencode(p.name).decode("utf-8", "backslashreplace") for p in sorted(folder.iterdir()) if not _utf8_name(p)]


def _first_dir(root: Path, names: tuple[str, ...]) -> Path | None:
    return next((root / n for n in names if (root / n).is_dir()), None)


def _read_prompt(path: Path) -> str:
    return path.read_text(encoding="utf-8-sig", errors="replace").strip()


def _scan_local(root: Path) -> Scan:
    scan = Scan("local", root, [])
    tdir, cdir = _first_dir(root, TARGET_DIRS), _first_dir(root, CONTROL_DIRS)
    if tdir is None or cdir is None:
        missing = [f"a target folder ({' / '.join(TARGET_DIRS)})" for _ in [0] if tdir is None] + [
            f"a control folder ({' / '.join(CONTROL_DIRS)})" for _ in [0] if cdir is None
        ]
        scan.issues.append(f"{root}: missing {' and '.join(missing)}")
        return scan
    for folder in (tdir, cdir):
        bad = undecodable_names(folder)
        if bad:
            scan.issues.append(f"{folder}: {len(bad)} file name(s) are not valid UTF-8 ({', '.join(bad[:3])}); rename them")
    timgs, cimgs = _images(tdir), _images(cdir)
    targets = {s: p for s, p in timgs.items() if not s.endswith("_mask") and not EXTRA_CONTROL.match(s)}
    if not targets:
        scan.issues.append(
            f"{tdir}: no target images ({', '.join(IMAGE_EXTS)}); the upstream loader crashes on an empty folder (IndexError)"
        )
        return scan
    for stem, target in sorted(targets.items()):
        sample = Sample(id=stem, target=target, where=str(target))
        for folder in (tdir, cdir):  # training_images/ wins
            txt = folder / f"{stem}.txt"
            if txt.is_file():
                sample.prompt = _read_prompt(txt)
                sample.prompt_file = txt
                break
        if stem in cimgs:
            sample.controls.append(cimgs[stem])
        extras = sorted(
            ((int(m.group("n")), p) for s, p in cimgs.items() if (m := EXTRA_CONTROL.match(s)) and m.group("stem") == stem)
        )
        sample.controls += [p for _, p in extras]
        sample.mask = cimgs.get(f"{stem}_mask") or timgs.get(f"{stem}_mask")
        scan.samples.append(sample)
    orphans = sorted({s for s in cimgs if not s.endswith("_mask") and not EXTRA_CONTROL.match(s)} - set(targets))
    if orphans:
        scan.warnings.append(f"{len(orphans)} control image(s) without a target are ignored: {', '.join(orphans[:5])}")
    return scan


def _scan_parquet(root: Path) -> Scan:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise InputError("reading parquet datasets needs pyarrow", path=root, fix="pip install pyarrow") from None
    scan = Scan("parquet", root, [])
    files = sorted((root / "data").glob("train-*.parquet"))
    for f in files:
        try:
            table = pq.read_table(f)
        except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for a damaged file
            scan.issues.append(f"{f.name}: cannot be read as parquet ({type(exc).__name__}: {str(exc)[:120]})")
            continue
        cols = set(table.column_names)
        missing = {"target_image", "control_images", "prompt"} - cols
        if missing:
            scan.issues.append(f"{f.name}: missing column(s) {', '.join(sorted(missing))}")
            continue
        for i, row in enumerate(table.to_pylist()):

            def data(v: Any) -> Any:  # pyarrow rows: an image cell is {"bytes": ..., "path": ...} or raw bytes
                return v.get("bytes") if isinstance(v, dict) else v

            controls = [data(c) for c in (row["control_images"] or [])]
            scan.samples.append(
                Sample(
                    id=f"{f.stem}#{i}",
                    target=data(row["target_image"]),
                    controls=[c for c in controls if c is not None],
                    mask=data(row.get("control_mask")) if "control_mask" in cols else None,
                    prompt=(row["prompt"] or "").strip() or None,
                    where=f"{f.name} row {i}",
                )
            )
    if not files:
        scan.issues.append(f"{root / 'data'}: no train-*.parquet files")
    return scan


MAX_CSV_BYTES = 256 * 2**20
"""A dataset CSV's size limit (a million rows of paths and prompts is ~200 MiB)."""


def csv_rows(path: Path, text: str) -> Iterator[tuple[int, dict[str, str | None]]]:
    """(line number, row) of a dataset CSV; a malformed row (a field over the csv module's limit of 131,072
    characters, a NUL byte, an unclosed quote) is an input error naming the file and the line."""
    import io

    with io.StringIO(text, newline="") as fh:
        reader = csv.DictReader(fh, dialect=csv_dialect(text))
        try:
            reader.fieldnames  # noqa: B018 - reads the header, which can be malformed too
            for row in reader:
                yield reader.line_num, row
        except csv.Error as exc:
            line = reader.reader.line_num  # DictReader's own count lags behind a failed row
            raise InputError(
                f"not a readable CSV row: {exc}",
                path=path,
                key=f"line {line}",
                fix="a field holds a path or a prompt; check the quoting of that line",
            ) from None


def csv_header(path: Path, text: str) -> list[str]:
    import io

    with io.StringIO(text, newline="") as fh:
        try:
            return list(next(csv.reader(fh, dialect=csv_dialect(text)), []))
        except csv.Error as exc:
            raise InputError(f"not a readable CSV header: {exc}", path=path, key="line 1") from None


def csv_dialect(text: str) -> str:
    """excel, or excel-tab for a tab-separated header (Excel's "Unicode text" is TSV)."""
    header = text.splitlines()[0] if text.strip() else ""
    return "excel-tab" if "\t" in header and "," not in header else "excel"


def read_csv_text(path: Path) -> str:
    """A CSV in UTF-8 (with or without BOM), UTF-16 (with BOM; what Excel's "Unicode text" writes) or, failing
    both, the Windows ANSI code page cp1252 (what Excel's plain "CSV" writes on Western Windows)."""
    if path.stat().st_size > MAX_CSV_BYTES:
        raise InputError(
            f"the CSV is larger than {MAX_CSV_BYTES // 2**20} MiB",
            path=path,
            fix="a dataset CSV lists paths and prompts; split it or check the path",
        )
    from aipc_env.core.fileio import decode_guessing

    return decode_guessing(path.read_bytes(), path, "the CSV", fix='save it as "CSV UTF-8" (Excel) or UTF-8 (any editor)')[0]


def _scan_csv(path: Path) -> Scan:
    scan = Scan("csv", path, [])
    text = read_csv_text(path)
    cols = csv_header(path, text)
    if "path_target" not in cols or "prompt" not in cols:
        scan.issues.append(f"{path.name}: needs columns path_target and prompt (got {', '.join(cols)})")
        return scan
    extra_cols = sorted((c for c in cols if re.fullmatch(r"path_control_\d+", c)), key=lambda c: int(c.rsplit("_", 1)[1]))
    base = path.parent  # relative paths are relative to the CSV (upstream: the current folder)
    for i, row in csv_rows(path, text):

        def p(col: str, row: dict[str, str | None] = row) -> Path | None:
            v = (row.get(col) or "").strip()
            return (base / v) if v else None

        controls = [c for c in [p("path_control"), *[p(c) for c in extra_cols]] if c is not None]
        scan.samples.append(
            Sample(
                id=f"line {i}",
                target=p("path_target"),
                controls=controls,  # type: ignore[arg-type]  # a sample's parts are paths or in-memory bytes, as Sample declares at run time
                mask=p("path_mask"),
                prompt=(row.get("prompt") or "").strip() or None,
                where=f"{path.name} line {i}",
            )
        )
    return scan


def scan_dataset(path: str | Path) -> Scan:
    path = Path(path)
    if not path.exists():
        raise InputError("dataset not found", path=path, fix="check the path")
    if path.is_file():
        if path.suffix.lower() != ".csv":
            raise InputError(
                "a dataset file must be a .csv",
                path=path,
                fix="pass a dataset folder, a parquet folder (with data/train-*.parquet) or a CSV",
            )
        return _scan_csv(path)
    if (path / "data").is_dir() and any((path / "data").glob("*.parquet")):
        return _scan_parquet(path)
    return _scan_local(path)
