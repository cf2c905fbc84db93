"""What qwen-image-finetune's own loader (qflux.data.dataset, 460ba1a) does differently from aipc-env with a dataset
aipc-env calls valid: `aipc-env dataset validate --engine qflux` warns about each. Read from the files, never
decoded. (aipc-env's own trainer handles all of these.)"""

from __future__ import annotations

import re
from pathlib import Path

from aipc_env.dataset.scan import CONTROL_DIRS, EXTRA_CONTROL, IMAGE_EXTS, TARGET_DIRS, Scan, csv_rows, read_csv_text

__all__ = ["qflux_warnings"]


def _upper_ext(folder: Path) -> list[str]:
    return [
        p.name
        for p in sorted(folder.iterdir())
        if p.is_file() and p.suffix.lower() in IMAGE_EXTS and p.suffix != p.suffix.lower()
    ]


def _local(root: Path) -> list[str]:
    out: list[str] = []
    tdir = next((root / n for n in TARGET_DIRS if (root / n).is_dir()), None)
    cdir = next((root / n for n in CONTROL_DIRS if (root / n).is_dir()), None)
    if tdir is None or cdir is None:
        return out
    for folder in (tdir, cdir):
        upper = _upper_ext(folder)
        if upper:
            out.append(
                f"qflux: {folder}: {len(upper)} image(s) with an upper-case extension ({', '.join(upper[:3])}) "
                "are skipped by upstream's loader (its extension check is case-sensitive); rename them to "
                "lower case"
            )
        boms = [p.name for p in sorted(folder.glob("*.txt")) if p.read_bytes()[:3] == b"\xef\xbb\xbf"]
        if boms:
            out.append(
                f"qflux: {folder}: {len(boms)} prompt file(s) start with a UTF-8 BOM ({', '.join(boms[:3])}); "
                "upstream reads them as plain UTF-8 and keeps the BOM in the prompt; save them without BOM"
            )
    extras: dict[str, dict[int, str]] = {}
    for p in sorted(cdir.iterdir()):
        m = EXTRA_CONTROL.match(p.stem)
        if m and p.suffix.lower() in IMAGE_EXTS:
            extras.setdefault(m.group("stem"), {})[int(m.group("n"))] = p.suffix
    mixed = sorted(stem for stem, found in extras.items() if len(set(found.values())) > 1)
    if mixed:
        out.append(
            f"qflux: {len(mixed)} sample(s) mix extensions among their extra controls ({', '.join(mixed[:3])}): "
            "upstream counts _control_N files of one extension only and drops the others; use one "
            "extension for all of a sample's controls"
        )
    return out


def _csv(path: Path, text: str) -> list[str]:
    relative = []
    for i, row in csv_rows(path, text):
        for col, value in row.items():
            if (
                col
                and col.startswith("path_")
                and value
                and value.strip()
                and not Path(value.strip()).is_absolute()
                and not re.match(r"^[A-Za-z]:[\\/]", value.strip())
            ):
                relative.append(f"line {i} {col}")
    if not relative:
        return []
    return [
        f"qflux: {path.name}: {len(relative)} relative path(s) ({', '.join(relative[:3])}): upstream resolves "
        "them against the current folder (src/ when launched as documented), not the CSV's folder, and fails; "
        "write absolute paths"
    ]


def qflux_warnings(scan: Scan) -> list[str]:
    """Warnings for the qflux engine, on top of the runbook's verdict."""
    if scan.format == "local":
        return _local(scan.root)
    if scan.format == "csv":
        return _csv(scan.root, read_csv_text(scan.root))
    return [
        f"qflux: {scan.root} is a local parquet folder: upstream's loader cannot read it unless the clone is "
        "adapted (`aipc-env adapt CLONE` routes the dict form to `datasets`); give it as "
        f"dataset_path: [{{repo_id: {scan.root}, split: train}}] (`aipc-env recommend --engine qflux` does)"
    ]
