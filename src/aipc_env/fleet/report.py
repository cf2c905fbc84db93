"""One view of many machines: read `aipc-env doctor --json` reports (a folder of them, from Ansible's fetch or
Intune), group the failing checks by check and fix, compare each machine's pair and env with a golden machine's,
into one FleetReport (its JSON is `fleet report --json`; fleet/render.py writes the page and the CSV). A report
that cannot be read, or that a newer aipc-env wrote, is listed as such and never stops the rest."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import ValidationError

from aipc_env.core.formats import StrictModel, VersionedModel
from aipc_env.errors import AipcError, InputError

if TYPE_CHECKING:  # pragma: no cover
    from aipc_env.doctor import DoctorReport

__all__ = [
    "FleetReport",
    "MachineRow",
    "build_fleet_report",
    "env_hash",
]


DRIFT_KINDS = ("driver", "oneapi", "os", "aipc-env", "pair", "env")
"""Every provisioned fact compared with the golden machine: the Intel GPU driver, the oneAPI releases installed,
the OS build, the aipc-env release, the torch+xpu / oneAPI pair and the env's packages."""
STATE_ORDER = ("failing+drifted", "failing", "drifted", "older", "newer", "unreadable", "ok", "superseded")
"""Problems first: the order rows are listed and counted in."""
UPGRADE = "pipx upgrade aipc-env on that machine, then collect again: aipc-env doctor --json"


class DriftEntry(StrictModel):
    kind: Literal["driver", "oneapi", "os", "aipc-env", "pair", "env"]
    value: str | None
    golden: str | None
    detail: str = ""

    def describe(self) -> str:
        text = f"{self.kind} {self.value or 'none'} (golden {self.golden or 'none'})"
        return text + (f": {self.detail}" if self.detail else "")


class MachineRow(StrictModel):
    key: str
    """machine id, else hostname, else the file name."""
    file: str
    state: Literal["ok", "failing", "drifted", "failing+drifted", "unreadable", "newer", "older", "superseded"]
    hostname: str | None = None
    machine_id: str | None = None
    collected_at: str | None = None
    pair: str | None = None
    env_hash: str | None = None
    facts: dict[str, str | None] = {}
    """The provisioned facts of this machine, by drift kind."""
    failed: list[str] = []
    warned: list[str] = []
    drift: list[DriftEntry] = []
    problem: str | None = None
    """Why the report could not be used (unreadable, newer, older) or which report replaced it (superseded)."""
    superseded_by: str | None = None


class CheckGroup(StrictModel):
    check: str
    title: str
    status: str
    fix: str
    machines: list[str]


class FleetReport(VersionedModel):
    """`aipc-env fleet report --json`."""

    FORMAT: ClassVar[str] = "fleet report"
    SCHEMA_VERSION: ClassVar[int] = 2
    schema_version: Literal[2] = 2
    machines: list[MachineRow]
    """One row per machine (its newest report), problems first; then the superseded reports."""
    groups: list[CheckGroup]
    golden: str | None = None
    golden_pair: str | None = None
    golden_env_hash: str | None = None
    golden_facts: dict[str, str | None] = {}
    counts: dict[str, int]
    drift_counts: dict[str, int] = {}

    @property
    def problems(self) -> bool:
        return any(m.state not in ("ok", "superseded") for m in self.machines)


def env_hash(distributions: dict[str, str]) -> str:
    """A fingerprint of an env's installed distributions (name==version, sorted)."""
    text = "\n".join(f"{k}=={v}" for k, v in sorted(distributions.items()))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _files(paths: Iterable[Path]) -> list[Path]:
    out: list[Path] = []
    for path in paths:
        if path.is_dir():
            out += sorted(p for p in path.rglob("*.json") if p.is_file())
        elif path.is_file():
            out.append(path)
        else:
            raise InputError("no such file or folder", path=path, fix="pass folders of `aipc-env doctor --json` reports")
    return out


_Unusable = Literal["unreadable", "newer", "older"]
"""The states of a report that cannot be read as a current doctor report."""


def _load(path: Path) -> tuple[DoctorReport, None, None] | tuple[None, _Unusable, str]:
    """(DoctorReport | None, problem state, problem text). A good report is parsed and validated in one step by
    pydantic's JSON parser (typed all the way down, with its own nesting limit); anything else is read again the
    careful way, to say exactly what is wrong with it."""
    from aipc_env.core.fileio import parse_json, read_text
    from aipc_env.doctor import REPORT_SCHEMA_VERSION, DoctorReport

    try:
        text = read_text(path, "doctor report")
    except (OSError, ValueError, AipcError) as exc:
        return None, "unreadable", f"not a readable JSON file: {getattr(exc, 'message', exc)}"
    try:
        return DoctorReport.model_validate_json(text), None, None
    except ValidationError:
        pass
    try:
        raw = parse_json(text, path, "doctor report")
    except (ValueError, AipcError) as exc:
        return None, "unreadable", f"not a readable JSON file: {getattr(exc, 'message', exc)}"
    if not isinstance(raw, dict) or "findings" not in raw or "facts" not in raw:
        return None, "unreadable", "not an aipc-env doctor --json report"
    legacy = "schema_version" not in raw and "report_schema_version" in raw
    version = raw.get("schema_version", raw.get("report_schema_version"))
    if isinstance(version, int) and version > REPORT_SCHEMA_VERSION:
        return None, "newer", f"written by a newer aipc-env (report schema_version {version}); update aipc-env"
    if legacy or (isinstance(version, int) and version < REPORT_SCHEMA_VERSION):
        return (
            None,
            "older",
            (f"written by an older aipc-env (report format {version}, this one reads {REPORT_SCHEMA_VERSION}): {UPGRADE}"),
        )
    try:
        return DoctorReport.model_validate(raw), None, None
    except ValidationError as exc:
        first = exc.errors()[0]
        return None, "unreadable", f"invalid report: {'.'.join(map(str, first['loc']))}: {first['msg']}"


def _identity(report: DoctorReport, path: Path) -> tuple[str, str | None, str | None]:
    from aipc_env.core.fileio import shown

    machine = report.facts.machine
    if machine is not None:
        return machine.machine_id or machine.hostname or shown(path.stem), machine.hostname, machine.machine_id
    return shown(path.stem), None, None


def provisioned(report: DoctorReport) -> tuple[dict[str, str | None], dict[str, str]]:
    """(the provisioned facts by drift kind, the env's distributions) of one report."""
    facts = report.facts
    intel = [g for g in facts.gpus if g.is_intel]
    drivers = sorted({g.driver_version for g in intel if g.driver_version})
    releases = sorted({i.version for i in facts.oneapi.installs if i.version})
    env = facts.training_env
    dists = env.distributions if env and not env.error else {}
    os_build = " ".join(x for x in (facts.os.system, facts.os.version or facts.os.release) if x)
    return {
        "driver": ", ".join(drivers) or None,
        "oneapi": ", ".join(releases) or None,
        "os": os_build or None,
        "aipc-env": facts.aipc_env_version or None,
        "pair": report.resolution.pair or (env.pair if env else None),
        "env": env_hash(dists) if dists else None,
    }, dists


def _drift(
    mine: dict[str, str | None], dists: dict[str, str], golden: dict[str, str | None], golden_dists: dict[str, str]
) -> list[DriftEntry]:
    out = []
    for kind in DRIFT_KINDS:
        if mine.get(kind) == golden.get(kind):
            continue
        detail = ""
        if kind == "env":
            names = sorted({name for name, _ in set(dists.items()) ^ set(golden_dists.items())})
            detail = (
                f"{len(names)} package(s) differ: "
                + ", ".join(f"{n} {dists.get(n, '-')}/{golden_dists.get(n, '-')}" for n in names[:6])
                + (" ..." if len(names) > 6 else "")
            )
        out.append(DriftEntry(kind=kind, value=mine.get(kind), golden=golden.get(kind), detail=detail))
    return out


def _when(collected_at: str | None) -> float:
    import datetime as dt

    try:
        stamp = dt.datetime.fromisoformat(collected_at or "")
    except ValueError:
        return float("-inf")
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=dt.UTC)
    return stamp.timestamp()


@dataclass
class Seen:
    """What the fleet view needs of one good report (small, picklable: workers read reports in parallel)."""

    path: str
    key: str
    hostname: str | None
    machine_id: str | None
    collected_at: str | None
    facts: dict[str, str | None]
    dists: dict[str, str]
    findings: list[tuple[str, str, str, str]]
    """(id, title, status, fix) of every warn, fail or crash."""

    @property
    def when(self) -> float:
        return _when(self.collected_at)


def _summarize(path: Path) -> Seen | MachineRow:
    from aipc_env.core.fileio import shown

    report, state, problem = _load(path)
    if report is None:
        return MachineRow(key=shown(path.stem), file=shown(path), state=state, problem=problem)
    key, hostname, machine_id = _identity(report, path)
    facts, dists = provisioned(report)
    findings: list[tuple[str, str, str, str]] = [
        (f.id, f.title, f.status.value, f.fix) for f in report.findings if f.status.value in ("fail", "crash", "warn")
    ]
    return Seen(shown(path), key, hostname, machine_id, report.facts.collected_at, facts, dists, findings)


PARALLEL_FROM = 2000
"""Reports from which reading them is spread over the CPU cores (pydantic's validation is the cost)."""


def _summarize_all(files: list[Path], parallel_from: int = PARALLEL_FROM) -> list[Seen | MachineRow]:
    """Every report summarized, in the files' order; from `parallel_from` files on, by worker processes."""
    workers = min(os.cpu_count() or 1, 8)
    if len(files) < parallel_from or workers < 2:
        return [_summarize(p) for p in files]
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(_summarize, files, chunksize=max(len(files) // (workers * 4), 1)))


def build_fleet_report(paths: Iterable[Path], golden: Path | None = None) -> FleetReport:
    golden_facts: dict[str, str | None] = {}
    golden_dists: dict[str, str] = {}
    if golden is not None:
        report, state, problem = _load(golden)
        if report is None:
            raise InputError(f"the golden report is {state}: {problem}", path=golden, key="--golden")
        golden_facts, golden_dists = provisioned(report)
    golden_real = golden.resolve() if golden is not None else None
    files = [
        p for p in _files(paths) if not (golden_real is not None and p.name == golden_real.name and p.resolve() == golden_real)
    ]
    unusable: list[MachineRow] = []
    newest: dict[str, Seen] = {}
    losers: list[Seen] = []
    for seen in _summarize_all(files):
        if isinstance(seen, MachineRow):
            unusable.append(seen)
            continue
        current = newest.get(seen.key)
        if current is None or (seen.when, seen.path) > (current.when, current.path):
            newest[seen.key] = seen
            if current is not None:
                losers.append(current)
        else:
            losers.append(seen)
    rows: list[MachineRow] = []
    groups: dict[tuple[str, str], CheckGroup] = {}
    for key, seen in newest.items():
        failed = [i for i, _, status, _ in seen.findings if status in ("fail", "crash")]
        warned = [i for i, _, status, _ in seen.findings if status == "warn"]
        for check, title, status, fix in seen.findings:
            group = groups.setdefault((check, fix), CheckGroup(check=check, title=title, status=status, fix=fix, machines=[]))
            group.machines.append(seen.hostname or key)
        drift = _drift(seen.facts, seen.dists, golden_facts, golden_dists) if golden is not None else []
        state_name = "failing+drifted" if failed and drift else "failing" if failed else "drifted" if drift else "ok"
        rows.append(
            MachineRow(
                key=key,
                file=seen.path,
                state=state_name,
                hostname=seen.hostname,
                machine_id=seen.machine_id,
                collected_at=seen.collected_at,
                pair=seen.facts["pair"],
                env_hash=seen.facts["env"],
                facts=seen.facts,
                failed=failed,
                warned=warned,
                drift=drift,
            )
        )
    superseded = [
        MachineRow(
            key=s.key,
            file=s.path,
            state="superseded",
            hostname=s.hostname,
            machine_id=s.machine_id,
            collected_at=s.collected_at,
            pair=s.facts["pair"],
            env_hash=s.facts["env"],
            facts=s.facts,
            superseded_by=newest[s.key].path,
            problem=f"superseded by the newer report {newest[s.key].path}",
        )
        for s in losers
    ]
    rows += unusable
    rows.sort(key=lambda r: (STATE_ORDER.index(r.state), r.key))
    superseded.sort(key=lambda r: (r.key, r.collected_at or ""))
    counts: dict[str, int] = {}
    drift_counts: dict[str, int] = {}
    for row in rows + superseded:
        counts[row.state] = counts.get(row.state, 0) + 1
        for d in row.drift:  # superseded rows carry none: only the newest report per machine is compared
            drift_counts[d.kind] = drift_counts.get(d.kind, 0) + 1
    ordered = sorted(groups.values(), key=lambda g: (g.status not in ("fail", "crash"), -len(g.machines), g.check))
    return FleetReport(
        machines=rows + superseded,
        groups=ordered,
        golden=str(golden) if golden else None,
        golden_pair=golden_facts.get("pair"),
        golden_env_hash=golden_facts.get("env"),
        golden_facts=golden_facts,
        counts=counts,
        drift_counts=drift_counts,
    )
