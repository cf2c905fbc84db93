"""Generate many doctor reports (fleet tests and benchmarks) from two recorded ones (fixtures/reports/: the output
of `aipc-env doctor --facts fixtures/machines/<name>.json --json`, kept as written, so a change of the doctor does
not change what the fleet report is tested on), each copy given its own machine identity, some with failures
and some with another env."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

REPORTS = Path(__file__).resolve().parents[1] / "fixtures" / "reports"


def generate_reports(folder: Path, count: int, *, drifted_every: int = 97, failing_every: int = 31) -> dict:
    """Write `count` reports into folder; returns {"golden": path, "drifted": [...], "failing": [...]}."""
    good = json.loads((REPORTS / "win11_core_ultra_32gb.report.json").read_text(encoding="utf-8"))
    sixteen = json.loads((REPORTS / "win11_16gb.report.json").read_text(encoding="utf-8"))
    folder.mkdir(parents=True, exist_ok=True)
    golden = folder.parent / "golden.json"
    good_golden = json.loads(json.dumps(good))
    good_golden["facts"]["machine"] = {"hostname": "golden-pc", "machine_id": str(uuid.UUID(int=0)), "source": None}
    golden.write_text(json.dumps(good_golden, indent=1))
    base_good, base_bad = good, sixteen
    drifted, failing = [], []
    for i in range(count):
        failing_one = i % failing_every == 5
        report = json.loads(json.dumps(base_bad if failing_one else base_good))
        name = f"AIPC-{i:04d}"
        report["facts"]["machine"] = {"hostname": name, "machine_id": str(uuid.UUID(int=i + 1)), "source": "test"}
        if i % drifted_every == 3:
            report["facts"]["training_env"]["distributions"]["bitsandbytes"] = "0.49.1"
            drifted.append(name)
        if failing_one:
            failing.append(name)
        (folder / f"{name}.json").write_text(json.dumps(report))
    return {"golden": golden, "drifted": drifted, "failing": failing}
