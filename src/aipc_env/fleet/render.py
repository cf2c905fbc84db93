"""The fleet report as files people open: a static HTML page (a sortable, filterable table and a small chart, no
server, every value escaped) and a CSV (cells that a spreadsheet would run as formulas are escaped)."""

from __future__ import annotations

import html

from aipc_env.fleet.report import DRIFT_KINDS, STATE_ORDER, UPGRADE, FleetReport, MachineRow

__all__ = ["render_csv", "render_html"]


def render_csv(report: FleetReport) -> str:
    from aipc_env.tabular import csv_text

    return csv_text(["machine", "state", "hostname", "machine_id", "collected_at", "pair", "env_hash", "driver",
                     "oneapi", "os", "aipc_env", "failed_checks", "warned_checks", "drift_kinds", "drift", "problem",
                     "file"],
                    ([m.key, m.state, m.hostname, m.machine_id, m.collected_at, m.pair, m.env_hash,
                      m.facts.get("driver"), m.facts.get("oneapi"), m.facts.get("os"), m.facts.get("aipc-env"),
                      " ".join(m.failed), " ".join(m.warned), " ".join(d.kind for d in m.drift),
                      "; ".join(d.describe() for d in m.drift), m.problem, m.file] for m in report.machines))


STYLE = """body{font:14px system-ui,sans-serif;margin:24px;color:#222}table{border-collapse:collapse;width:100%}
th,td{border-bottom:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top}th{background:#f4f4f4}
th[data-sort]{cursor:pointer}th[aria-sort=ascending]::after{content:" \\25B2"}th[aria-sort=descending]::after{
content:" \\25BC"}tr[data-state=ok] td.state{color:#1a7f37}tr[data-state^=failing] td.state{color:#cf222e;
font-weight:600}tr[data-state=drifted] td.state{color:#9a6700;font-weight:600}tr[data-state=unreadable] td.state,
tr[data-state=newer] td.state,tr[data-state=older] td.state{color:#8250df}tr[data-state=superseded]{color:#777}
code{font-size:12px}.controls{margin:8px 0}.controls input,.controls select{margin-right:8px;padding:4px}
#filter{width:320px}.drift{color:#9a6700}"""

SCRIPT = """(function () {
  var table = document.getElementById('machines');
  var body = table.tBodies[0];
  var text = document.getElementById('filter'), state = document.getElementById('state'),
      drift = document.getElementById('drift');
  function apply() {
    var q = text.value.toLowerCase(), s = state.value, d = drift.value, shown = 0;
    Array.prototype.forEach.call(body.rows, function (tr) {
      var ok = (!q || tr.textContent.toLowerCase().indexOf(q) >= 0) &&
               (!s || tr.getAttribute('data-state') === s) &&
               (!d || (' ' + tr.getAttribute('data-drift') + ' ').indexOf(' ' + d + ' ') >= 0);
      tr.style.display = ok ? '' : 'none';
      if (ok) { shown++; }
    });
    document.getElementById('shown').textContent = shown;
  }
  function sortBy(th, descending) {
    var index = th.cellIndex, numeric = th.getAttribute('data-sort') === 'number';
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = a.cells[index].getAttribute('data-key') || a.cells[index].textContent;
      var y = b.cells[index].getAttribute('data-key') || b.cells[index].textContent;
      var c = numeric ? (parseFloat(x) || 0) - (parseFloat(y) || 0) :
              x.localeCompare(y, undefined, {numeric: true, sensitivity: 'base'});
      return descending ? -c : c;
    });
    rows.forEach(function (tr) { body.appendChild(tr); });
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (h) { h.removeAttribute('aria-sort'); });
    th.setAttribute('aria-sort', descending ? 'descending' : 'ascending');
  }
  Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th) {
    if (!th.hasAttribute('data-sort')) { return; }
    th.addEventListener('click', function () { sortBy(th, th.getAttribute('aria-sort') === 'ascending'); });
  });
  [text, state, drift].forEach(function (el) { el.addEventListener('input', apply); });
  /* a link can open the page filtered and sorted: #state=drifted&drift=driver&q=text&sort=collected-desc */
  location.hash.replace(/^#/, '').split('&').forEach(function (part) {
    var kv = part.split('='), key = kv[0], value = decodeURIComponent(kv[1] || '');
    if (key === 'state') { state.value = value; }
    if (key === 'drift') { drift.value = value; }
    if (key === 'q') { text.value = value; }
    if (key === 'sort') {
      var name = value.replace(/-desc$/, ''), th = table.querySelector('th[data-col="' + name + '"]');
      if (th) { sortBy(th, /-desc$/.test(value)); }
    }
  });
  apply();
})();"""


def _chart(counts: dict[str, int]) -> str:
    colours = {"failing+drifted": "#a40e26", "failing": "#cf222e", "drifted": "#bf8700", "older": "#8250df",
               "newer": "#6e40c9", "unreadable": "#57606a", "ok": "#2da44e"}
    total = max(sum(counts.get(s, 0) for s in colours), 1)
    x, bars, legend = 0.0, [], []
    for state, colour in colours.items():
        n = counts.get(state, 0)
        if not n:
            continue
        width = 600 * n / total
        bars.append(f'<rect x="{x:.1f}" y="0" width="{width:.1f}" height="24" fill="{colour}"><title>{state}: {n}'
                    "</title></rect>")
        legend.append(f'<a href="#state={state}" style="color:{colour}">&#9632;</a> {state} {n}')
        x += width
    return (f'<svg id="chart" width="600" height="24" role="img" aria-label="machines by state">{"".join(bars)}'
            f'</svg><p>{" &nbsp; ".join(legend)}</p>')


COLUMNS = (("machine", "text"), ("state", "text"), ("hostname", "text"), ("collected", "text"), ("pair", "text"),
           ("driver", "text"), ("oneapi", "text"), ("os", "text"), ("aipc-env", "text"), ("failed", "text"),
           ("drift / problem", "text"))


def _machine_row(m: MachineRow) -> str:
    esc = html.escape
    detail = "; ".join(d.describe() for d in m.drift) or m.problem or ""
    state_key = str(STATE_ORDER.index(m.state))
    cells = [esc(m.key), esc(m.state), esc(m.hostname or ""), esc(m.collected_at or ""), esc(m.pair or "")]
    cells += [esc(m.facts.get(k) or "") for k in ("driver", "oneapi", "os", "aipc-env")]
    cells += [esc(" ".join(m.failed)), esc(detail)]
    tds = "".join(f'<td class="state" data-key="{state_key}">{c}</td>' if i == 1 else
                  f'<td class="drift">{c}</td>' if i == 10 and m.drift else f"<td>{c}</td>"
                  for i, c in enumerate(cells))
    kinds = " ".join(d.kind for d in m.drift)
    return (f'<tr data-state="{esc(m.state)}" data-machine="{esc(m.key)}" data-drift="{esc(kinds)}">{tds}</tr>')


def render_html(report: FleetReport) -> str:
    esc = html.escape
    current = [m for m in report.machines if m.state != "superseded"]
    old = [m for m in report.machines if m.state == "superseded"]
    rows = "".join(_machine_row(m) for m in current)
    groups = "".join(f'<tr data-check="{esc(g.check)}"><td>{esc(g.check)}</td><td>{esc(g.status)}</td>'
                     f"<td>{len(g.machines)}</td><td>{esc(g.fix)}</td><td>{esc(', '.join(g.machines[:8]))}"
                     f"{' …' if len(g.machines) > 8 else ''}</td></tr>" for g in report.groups)
    if report.golden:
        facts = ", ".join(f"{esc(k)} <code>{esc(report.golden_facts.get(k) or 'none')}</code>" for k in DRIFT_KINDS)
        golden = f"<p>Golden machine: <code>{esc(report.golden)}</code>: {facts}</p>"
        drift = ("<p>Drift by kind: " + (" &nbsp; ".join(
            f'<a href="#drift={k}" data-drift-kind="{k}">{k}</a> {report.drift_counts.get(k, 0)}' for k in DRIFT_KINDS))
            + "</p>")
    else:
        golden, drift = "<p>No golden machine given: drift is not judged (--golden FILE).</p>", ""
    head = "".join(f'<th data-sort="{kind}" data-col="{esc(name.split(" ")[0])}">{esc(name)}</th>'
                   for name, kind in COLUMNS)
    state_options = "".join(f'<option value="{s}">{s} ({report.counts.get(s, 0)})</option>' for s in STATE_ORDER
                            if s != "superseded")
    drift_options = "".join(f'<option value="{k}">{k} ({report.drift_counts.get(k, 0)})</option>' for k in DRIFT_KINDS)
    superseded = ""
    if old:
        items = "".join(f'<tr data-state="superseded"><td>{esc(m.key)}</td><td>{esc(m.collected_at or "")}</td>'
                        f"<td>{esc(m.file)}</td><td>{esc(m.superseded_by or '')}</td></tr>" for m in old)
        superseded = (f"<h2>Superseded reports ({len(old)})</h2><p>Older reports of machines that sent a newer one; "
                      "only the newest counts.</p><table id=\"superseded\"><thead><tr><th>machine</th><th>collected"
                      f"</th><th>file</th><th>replaced by</th></tr></thead><tbody>{items}</tbody></table>")
    counts = ", ".join(f"{esc(k)}: {report.counts[k]}" for k in STATE_ORDER if report.counts.get(k))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>aipc-env fleet report</title><style>{STYLE}</style></head>
<body><h1>aipc-env fleet report</h1>
<p>{len(current)} machines. {counts}</p>
{_chart(report.counts)}
{golden}
{drift}
<h2>Problems by check and fix</h2>
<table id="groups"><thead><tr><th>check</th><th>status</th><th>machines</th><th>fix</th><th>which</th></tr></thead>
<tbody>{groups}</tbody></table>
<h2>Machines</h2>
<p>Problems first; click a column to sort. Older reports: {esc(UPGRADE)}.</p>
<div class="controls"><input id="filter" placeholder="filter machines, checks, pairs">
<select id="state"><option value="">every state</option>{state_options}</select>
<select id="drift"><option value="">any drift</option>{drift_options}</select>
<span id="shown">{len(current)}</span> shown</div>
<table id="machines"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>
{superseded}
<script>{SCRIPT}</script>
</body></html>
"""
