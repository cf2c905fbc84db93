"""Generate many doctor reports (fleet tests and benchmarks): the real doctor run on whole-machine fixtures, each
copy given its own machine identity, some with failures and some with another env or pair."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

MACHINES = Path(__file__).resolve().parents[1] / "fixtures" / "machines"


def generate_reports(folder: Path, count: int, *, drifted_every: int = 97, failing_every: int = 31) -> dict:
    """Write `count` reports into folder; returns {"golden": path, "drifted": [...], "failing": [...]}."""
    from aipc_env.doctor import run_checks
    from aipc_env.facts import load_facts
    from aipc_env.facts.model import MachineIdentity
    from aipc_env.matrix import load_matrix

    matrix = load_matrix()
    good = load_facts(MACHINES / "win11_core_ultra_32gb.json")
    sixteen = load_facts(MACHINES / "win11_16gb.json")
    folder.mkdir(parents=True, exist_ok=True)
    golden = folder.parent / "golden.json"
    good.machine = MachineIdentity(hostname="golden-pc", machine_id=str(uuid.UUID(int=0)))
    golden.write_text(run_checks(good, matrix).model_dump_json(indent=1))
    base_good = run_checks(good, matrix).model_dump(mode="json")
    base_bad = run_checks(sixteen, matrix).model_dump(mode="json")
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
