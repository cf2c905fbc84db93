"""One view of many machines: read `aipc-env doctor --json` reports (a folder of them, from Ansible's fetch or
Intune), group the failing checks by check and fix, compare each machine's pair and env with a golden machine's,
and write a static HTML page (a table and a small chart, no server), a CSV and a JSON summary. A report that
cannot be read, or that a newer aipc-env wrote, is listed as such and never stops the rest."""

from __future__ import annotations

import hashlib
import html
from collections.abc import Iterable
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import ValidationError

from aipc_env.errors import AipcError, InputError
from aipc_env.formats import StrictModel, VersionedModel

__all__ = [
    "FleetReport",
    "MachineRow",
    "build_fleet_report",
    "env_hash",
    "read_reports",
    "render_csv",
    "render_html",
]


class MachineRow(StrictModel):
    key: str
    """machine id, else hostname, else the file name."""
    file: str
    state: Literal["ok", "failing", "drifted", "failing+drifted", "unreadable", "newer"]
    hostname: str | None = None
    machine_id: str | None = None
    collected_at: str | None = None
    pair: str | None = None
    env_hash: str | None = None
    failed: list[str] = []
    warned: list[str] = []
    drift: list[str] = []
    problem: str | None = None
    """Why the report could not be used (unreadable or newer)."""


class CheckGroup(StrictModel):
    check: str
    title: str
    status: str
    fix: str
    machines: list[str]


class FleetReport(VersionedModel):
    """`aipc-env fleet report --json`."""

    FORMAT: ClassVar[str] = "fleet report"
    schema_version: Literal[1] = 1
    machines: list[MachineRow]
    groups: list[CheckGroup]
    golden: str | None = None
    golden_pair: str | None = None
    golden_env_hash: str | None = None
    counts: dict[str, int]

    @property
    def problems(self) -> bool:
        return any(m.state != "ok" for m in self.machines)


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


def _load(path: Path):
    """(DoctorReport | None, problem state, problem text)."""
    from aipc_env.doctor import REPORT_SCHEMA_VERSION, DoctorReport
    from aipc_env.fileio import parse_json, read_text

    try:
        raw = parse_json(read_text(path, "doctor report"), path, "doctor report")
    except (OSError, ValueError, AipcError) as exc:
        return None, "unreadable", f"not a readable JSON file: {getattr(exc, 'message', exc)}"
    if not isinstance(raw, dict) or "findings" not in raw or "facts" not in raw:
        return None, "unreadable", "not an aipc-env doctor --json report"
    version = raw.get("schema_version", raw.get("report_schema_version"))
    if isinstance(version, int) and version > REPORT_SCHEMA_VERSION:
        return None, "newer", f"written by a newer aipc-env (report schema_version {version}); update aipc-env"
    try:
        return DoctorReport.model_validate(raw), None, None
    except ValidationError as exc:
        first = exc.errors()[0]
        return None, "unreadable", f"invalid report: {'.'.join(map(str, first['loc']))}: {first['msg']}"


def read_reports(paths: Iterable[Path]) -> list[tuple[Path, object, str | None, str | None]]:
    return [(p, *_load(p)) for p in _files(paths)]


def _identity(report, path: Path) -> tuple[str, str | None, str | None]:
    machine = report.facts.machine
    if machine is not None:
        return machine.machine_id or machine.hostname or path.stem, machine.hostname, machine.machine_id
    return path.stem, None, None


def _pair_and_env(report) -> tuple[str | None, str | None, dict[str, str]]:
    env = report.facts.training_env
    pair = report.resolution.pair or (env.pair if env else None)
    dists = env.distributions if env and not env.error else {}
    return pair, env_hash(dists) if dists else None, dists


def build_fleet_report(paths: Iterable[Path], golden: Path | None = None) -> FleetReport:
    golden_pair = golden_hash = None
    golden_dists: dict[str, str] = {}
    if golden is not None:
        report, state, problem = _load(golden)
        if report is None:
            raise InputError(f"the golden report is {state}: {problem}", path=golden, key="--golden")
        golden_pair, golden_hash, golden_dists = _pair_and_env(report)
    rows: list[MachineRow] = []
    groups: dict[tuple[str, str], CheckGroup] = {}
    for path, report, state, problem in read_reports(paths):
        if golden is not None and path.resolve() == golden.resolve():
            continue
        if report is None:
            rows.append(MachineRow(key=path.stem, file=str(path), state=state, problem=problem))  # type: ignore[arg-type]
            continue
        key, hostname, machine_id = _identity(report, path)
        pair, ehash, dists = _pair_and_env(report)
        failed = [f.id for f in report.findings if f.status.value in ("fail", "crash")]
        warned = [f.id for f in report.findings if f.status.value == "warn"]
        for f in report.findings:
            if f.status.value in ("fail", "crash", "warn"):
                group = groups.setdefault((f.id, f.fix), CheckGroup(check=f.id, title=f.title, status=f.status.value,
                                                                    fix=f.fix, machines=[]))
                group.machines.append(hostname or key)
        drift = []
        if golden is not None:
            if pair != golden_pair:
                drift.append(f"pair {pair or 'none'} (golden {golden_pair or 'none'})")
            if ehash != golden_hash:
                changed = sorted(set(dists.items()) ^ set(golden_dists.items()))
                names = sorted({name for name, _ in changed})
                drift.append(f"env {ehash} (golden {golden_hash}): {len(names)} package(s) differ: "
                             + ", ".join(f"{n} {dists.get(n, '-')}/{golden_dists.get(n, '-')}" for n in names[:6])
                             + (" ..." if len(names) > 6 else ""))
        state_name = "failing+drifted" if failed and drift else "failing" if failed else "drifted" if drift else "ok"
        rows.append(MachineRow(key=key, file=str(path), state=state_name, hostname=hostname, machine_id=machine_id,  # type: ignore[arg-type]
                               collected_at=report.facts.collected_at, pair=pair, env_hash=ehash, failed=failed,
                               warned=warned, drift=drift))
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.state] = counts.get(row.state, 0) + 1
    ordered = sorted(groups.values(), key=lambda g: (g.status != "fail", -len(g.machines), g.check))
    return FleetReport(machines=rows, groups=ordered, golden=str(golden) if golden else None, golden_pair=golden_pair,
                       golden_env_hash=golden_hash, counts=counts)


def render_csv(report: FleetReport) -> str:
    from aipc_env.tabular import csv_text

    return csv_text(["machine", "state", "hostname", "machine_id", "pair", "env_hash", "failed_checks", "warned_checks",
                     "drift", "problem", "file"],
                    ([m.key, m.state, m.hostname, m.machine_id, m.pair, m.env_hash, " ".join(m.failed),
                      " ".join(m.warned), "; ".join(m.drift), m.problem, m.file] for m in report.machines))


STYLE = """body{font:14px system-ui,sans-serif;margin:24px;color:#222}table{border-collapse:collapse;width:100%}
th,td{border-bottom:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top}th{background:#f4f4f4}
tr[data-state=ok] td.state{color:#1a7f37}tr[data-state^=failing] td.state{color:#cf222e;font-weight:600}
tr[data-state=drifted] td.state{color:#9a6700;font-weight:600}tr[data-state=unreadable] td.state,
tr[data-state=newer] td.state{color:#8250df}code{font-size:12px}#filter{margin:8px 0;padding:4px;width:320px}"""

SCRIPT = """document.getElementById('filter').addEventListener('input', function (e) {
  var q = e.target.value.toLowerCase();
  document.querySelectorAll('#machines tbody tr').forEach(function (tr) {
    tr.style.display = tr.textContent.toLowerCase().indexOf(q) >= 0 ? '' : 'none';
  });
});"""


def _chart(counts: dict[str, int]) -> str:
    colours = {"ok": "#2da44e", "failing": "#cf222e", "drifted": "#bf8700", "failing+drifted": "#a40e26",
               "unreadable": "#8250df", "newer": "#6e40c9"}
    total = max(sum(counts.values()), 1)
    x, bars, legend = 0.0, [], []
    for state, colour in colours.items():
        n = counts.get(state, 0)
        if not n:
            continue
        width = 600 * n / total
        bars.append(f'<rect x="{x:.1f}" y="0" width="{width:.1f}" height="24" fill="{colour}"><title>{state}: {n}'
                    "</title></rect>")
        legend.append(f'<span style="color:{colour}">&#9632;</span> {state} {n}')
        x += width
    return (f'<svg id="chart" width="600" height="24" role="img" aria-label="machines by state">{"".join(bars)}'
            f'</svg><p>{" &nbsp; ".join(legend)}</p>')


def render_html(report: FleetReport) -> str:
    esc = html.escape
    rows = []
    for m in report.machines:
        detail = "; ".join(m.drift) or m.problem or ""
        rows.append(f'<tr data-state="{esc(m.state)}" data-machine="{esc(m.key)}"><td>{esc(m.key)}</td>'
                    f'<td class="state">{esc(m.state)}</td><td>{esc(m.hostname or "")}</td><td>{esc(m.pair or "")}</td>'
                    f'<td><code>{esc(m.env_hash or "")}</code></td><td>{esc(" ".join(m.failed))}</td>'
                    f'<td>{esc(detail)}</td></tr>')
    groups = "".join(f'<tr data-check="{esc(g.check)}"><td>{esc(g.check)}</td><td>{esc(g.status)}</td>'
                     f"<td>{len(g.machines)}</td><td>{esc(g.fix)}</td><td>{esc(', '.join(g.machines[:8]))}"
                     f"{' …' if len(g.machines) > 8 else ''}</td></tr>" for g in report.groups)
    golden = (f"<p>Golden machine: <code>{esc(report.golden or '')}</code> — pair {esc(report.golden_pair or 'none')}, "
              f"env <code>{esc(report.golden_env_hash or '')}</code></p>") if report.golden else \
        "<p>No golden machine given: drift is not judged (--golden FILE).</p>"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>aipc-env fleet report</title><style>{STYLE}</style></head>
<body><h1>aipc-env fleet report</h1>
<p>{len(report.machines)} machines. {", ".join(f"{esc(k)}: {v}" for k, v in sorted(report.counts.items()))}</p>
{_chart(report.counts)}
{golden}
<h2>Problems by check and fix</h2>
<table id="groups"><thead><tr><th>check</th><th>status</th><th>machines</th><th>fix</th><th>which</th></tr></thead>
<tbody>{groups}</tbody></table>
<h2>Machines</h2>
<input id="filter" placeholder="filter machines, checks, pairs">
<table id="machines"><thead><tr><th>machine</th><th>state</th><th>hostname</th><th>pair</th><th>env</th>
<th>failed checks</th><th>drift / problem</th></tr></thead><tbody>{"".join(rows)}</tbody></table>
<script>{SCRIPT}</script>
</body></html>
"""
