(function () {
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
})();
