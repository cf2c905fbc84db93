"""The fleet report as files people open: a static HTML page (a sortable, filterable table and a small chart, no
server, every value escaped) and a CSV (cells that a spreadsheet would run as formulas are escaped)."""

from __future__ import annotations

from aipc_env.fleet.report import DRIFT_KINDS, STATE_ORDER, UPGRADE, FleetReport, MachineRow

__all__ = ["render_csv", "render_html"]


def render_csv(report: FleetReport) -> str:
    from aipc_env.fleet.tabular import csv_text

    return csv_text(
        [
            "machine",
            "state",
            "hostname",
            "machine_id",
            "collected_at",
            "pair",
            "env_hash",
            "driver",
            "oneapi",
            "os",
            "aipc_env",
            "failed_checks",
            "warned_checks",
            "drift_kinds",
            "drift",
            "problem",
            "file",
        ],
        (
            [
                m.key,
                m.state,
                m.hostname,
                m.machine_id,
                m.collected_at,
                m.pair,
                m.env_hash,
                m.facts.get("driver"),
                m.facts.get("oneapi"),
                m.facts.get("os"),
                m.facts.get("aipc-env"),
                " ".join(m.failed),
                " ".join(m.warned),
                " ".join(d.kind for d in m.drift),
                "; ".join(d.describe() for d in m.drift),
                m.problem,
                m.file,
            ]
            for m in report.machines
        ),
    )


def _chart(counts: dict[str, int]) -> list[dict[str, object]]:
    """The bar chart's bars: machines by state, in a fixed order and colour."""
    colours = {
        "failing+drifted": "#a40e26",
        "failing": "#cf222e",
        "drifted": "#bf8700",
        "older": "#8250df",
        "newer": "#6e40c9",
        "unreadable": "#57606a",
        "ok": "#2da44e",
    }
    total = max(sum(counts.get(s, 0) for s in colours), 1)
    x, bars = 0.0, []
    for state, colour in colours.items():
        n = counts.get(state, 0)
        if n:
            bars.append({"state": state, "colour": colour, "n": n, "x": x, "width": 600 * n / total})
            x += 600 * n / total
    return bars


COLUMNS = (
    ("machine", "text"),
    ("state", "text"),
    ("hostname", "text"),
    ("collected", "text"),
    ("pair", "text"),
    ("driver", "text"),
    ("oneapi", "text"),
    ("os", "text"),
    ("aipc-env", "text"),
    ("failed", "text"),
    ("drift / problem", "text"),
)


def _machine_row(m: MachineRow) -> dict[str, object]:
    detail = "; ".join(d.describe() for d in m.drift) or m.problem or ""
    cells = [m.key, m.state, m.hostname or "", m.collected_at or "", m.pair or ""]
    cells += [m.facts.get(k) or "" for k in ("driver", "oneapi", "os", "aipc-env")]
    cells += [" ".join(m.failed), detail]
    return {"m": m, "cells": cells, "state_key": str(STATE_ORDER.index(m.state)), "kinds": " ".join(d.kind for d in m.drift)}


def render_html(report: FleetReport) -> str:
    """The page (templates/report.html.j2, with report.css and report.js inlined): every value escaped."""
    from aipc_env.core.templating import render_page
    from aipc_env.fleet import TEMPLATES, template_text

    current = [m for m in report.machines if m.state != "superseded"]
    return render_page(
        TEMPLATES,
        "report.html.j2",
        report=report,
        current=current,
        old=[m for m in report.machines if m.state == "superseded"],
        rows=[_machine_row(m) for m in current],
        chart=_chart(report.counts),
        counts=[(k, report.counts[k]) for k in STATE_ORDER if report.counts.get(k)],
        states=[s for s in STATE_ORDER if s != "superseded"],
        drift_kinds=DRIFT_KINDS,
        columns=COLUMNS,
        upgrade=UPGRADE,
        style=template_text("report.css"),
        script=template_text("report.js"),
    )
