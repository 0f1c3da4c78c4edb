"""report.html's grid section: one heatmap of domain x period per paradigm and variant, with selectors
(metric, user group, seeds pooled or one seed), the interval on hover, and a click that opens the
checkpoint's card (coordinates, parents, lineage drawn as SVG, results, manifest), from a
:class:`~mmgrid.sweep.grid_view.GridView`. All data is inlined as JSON; the script uses plotly.js,
which :mod:`mmgrid.render.report_html` inlines in the page's head.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mmgrid.render.report_html_encode import html_attr, script_json
from mmgrid.render.report_html_encode import html_text as _e

if TYPE_CHECKING:  # pragma: no cover
    from mmgrid.sweep.grid_view import GridView



GRID_JS = r"""
(function(){
const G = JSON.parse(document.getElementById('grid-data').textContent);
const C = JSON.parse(document.getElementById('card-data').textContent);
const sel = id => document.getElementById(id).value;
const fmt = v => (typeof v === 'number' && isFinite(v)) ? v.toFixed(2) : '-';
function cellsOf(p, m, g, s){
  const z = p.domains.map(() => p.periods.map(() => null));
  const cd = p.domains.map(() => p.periods.map(() => ['', 'not evaluated on the test window', '']));
  for (const c of G.cells){
    if (c.panel !== p.key || c.metric !== m || c.group !== g || c.seed !== s) continue;
    const i = p.domains.indexOf(c.domain), j = p.periods.indexOf(c.period);
    z[i][j] = c.value;
    const ci = (c.low === null || c.high === null) ? 'no interval recorded' : '95% interval [' + fmt(c.low) + ', ' + fmt(c.high) + ']';
    const n = (c.n_users ? c.n_users + ' test examples, ' : '') + c.ids.length + ' checkpoint(s)';
    cd[i][j] = [c.id, ci, n];
  }
  return [z, cd];
}
function draw(){
  const m = sel('grid-metric'), g = sel('grid-group'), s = sel('grid-seed');
  for (const p of G.panels){
    const [z, cd] = cellsOf(p, m, g, s);
    const div = document.getElementById('heat-' + p.key.replace(/[^A-Za-z0-9_-]/g, '_'));
    Plotly.react(div, [{type: 'heatmap', z: z, x: p.periods, y: p.domains, customdata: cd, colorscale: 'Viridis',
      texttemplate: '%{z:.2f}', hoverongaps: true, colorbar: {title: {text: '%'}, thickness: 12},
      hovertemplate: '%{y} / %{x}<br>' + m + ' (' + g + ', ' + (s === 'pooled' ? 'seeds pooled' : 'seed ' + s) +
        ') = %{z:.2f}%<br>%{customdata[1]}<br>%{customdata[2]}<br>click: checkpoint card<extra></extra>'}],
      {title: {text: p.paradigm + ' / ' + p.variant, font: {size: 13}}, margin: {l: 70, r: 10, t: 36, b: 40},
       height: 110 + 42 * p.domains.length, xaxis: {type: 'category', title: {text: 'period'}},
       yaxis: {type: 'category', automargin: true}},
      {responsive: true, displayModeBar: false});
    if (!div.dataset.bound){
      div.on('plotly_click', ev => { const id = ev.points[0].customdata[0]; if (id) openCard(id); });
      div.dataset.bound = '1';
    }
  }
}
// every value from the data passes through esc() before it becomes markup (the five HTML characters)
function esc(t){ return String(t).replace(/[&<>"']/g, ch => ({'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;',"'":'&#39;'}[ch])); }
const isNum = v => typeof v === 'number' && isFinite(v);
const num = (v, k) => isNum(v) ? v.toFixed(k) : '-';
function lineageSvg(L){
  const nodes = Array.isArray(L && L.nodes) ? L.nodes : [], edges = Array.isArray(L && L.edges) ? L.edges : [];
  const W = 190, H = 34, X = n => 10 + (+n.x || 0) * W, Y = n => 10 + (+n.y || 0) * H;
  const at = {}; for (const n of nodes) at[n.id] = n;
  const w = 10 + (Math.max(0, ...nodes.map(n => +n.x || 0)) + 1) * W, h = 20 + (Math.max(0, ...nodes.map(n => +n.y || 0)) + 1) * H;
  let s = '<svg width="' + w + '" height="' + h + '" role="img" aria-label="lineage">';
  for (const e of edges){ const a = at[e.from], b = at[e.to]; if (!a || !b) continue;
    s += '<line x1="' + (X(a) + 170) + '" y1="' + (Y(a) + 11) + '" x2="' + X(b) + '" y2="' + (Y(b) + 11) +
         '" stroke="#888"><title>' + esc(e.role) + '</title></line>'; }
  for (const n of nodes){
    s += '<g><rect x="' + X(n) + '" y="' + Y(n) + '" width="170" height="22" rx="4" fill="' + (n.target ? '#cfe8d5' : '#eef') +
         '" stroke="#667"></rect><text x="' + (X(n) + 4) + '" y="' + (Y(n) + 15) + '">' + esc(String(n.label).slice(0, 24)) +
         '</text><title>' + esc(n.id + ' ' + n.label) + '</title></g>'; }
  return s + '</svg>';
}
function openCard(id){
  if (!Object.prototype.hasOwnProperty.call(C, id)) return;
  const c = C[id], box = document.getElementById('card');
  box.hidden = false; box.dataset.id = id;
  const coords = Object.entries(c.coords || {}).map(([k, v]) => '<tr><th>' + esc(k) + '</th><td>' + esc(v) + '</td></tr>').join('');
  const parents = (c.parents || []).map(p => (Object.prototype.hasOwnProperty.call(C, p.id) ? '<a href="#card-' + esc(p.id) + '">' +
    esc(p.id) + '</a>' : '<code>' + esc(p.id) + '</code>') + ' (' + esc(p.role) + ')').join(', ') || 'none';
  const pct = r => /@/.test(String(r.metric)) ? 100 : 1;
  const res = (c.results || []).map(r => '<tr><td>' + esc(r.split) + '</td><td>' + esc(r.group) + '</td><td>' + esc(r.metric) +
    (pct(r) === 100 ? ' (%)' : '') + '</td><td>' + (isNum(r.value) ? (r.value * pct(r)).toFixed(pct(r) === 100 ? 2 : 4) : '-') +
    '</td><td>' + (isNum(r.ci_low) && isNum(r.ci_high) ? '[' + num(r.ci_low * pct(r), 2) + ', ' + num(r.ci_high * pct(r), 2) + ']' : '-') +
    '</td><td>' + esc(r.study || '') + '</td></tr>').join('');
  box.innerHTML = '<h3>Checkpoint <code>' + esc(id) + '</code> (' + esc(c.kind) + (c.seed !== null && c.seed !== undefined ? ', seed ' + esc(c.seed) : '') + ')</h3>' +
    '<div class="scroll"><table class="t">' + coords + '</table></div><p>Parents: ' + parents + '</p>' +
    '<h4>Lineage</h4><div class="scroll">' + lineageSvg(c.lineage) + '</div>' +
    '<h4>Results</h4><div class="scroll"><table class="t"><tr><th>split</th><th>group</th><th>metric</th><th>value</th>' +
    '<th>95% interval</th><th>study</th></tr>' + res + '</table></div>' +
    '<details><summary>Manifest</summary><pre>' + esc(JSON.stringify(c.manifest, null, 1)) + '</pre></details>' +
    '<p><code>mmgrid show ' + esc(id) + '</code> &middot; <code>mmgrid lineage ' + esc(id) + '</code></p>';
  if (location.hash !== '#card-' + id) history.replaceState(null, '', '#card-' + encodeURIComponent(id));
  box.scrollIntoView({block: 'nearest'});
}
window.mmgridOpenCard = openCard;
for (const id of ['grid-metric', 'grid-group', 'grid-seed']) document.getElementById(id).addEventListener('change', draw);
const fromHash = () => { const h = location.hash; if (!h.startsWith('#card-')) return;
  let id = h.slice(6); try { id = decodeURIComponent(id); } catch (err) { return; } openCard(id); };
window.addEventListener('hashchange', fromHash);
draw();
fromHash();
window.mmgridGridDrawn = true;
})();
"""


def _json_script(element_id: str, data: Any) -> str:
    return f'<script type="application/json" id="{html_attr(element_id)}">{script_json(data)}</script>'


def _options(element_id: str, label: str, values: list[str], names: dict[str, str] | None = None) -> str:
    opts = "".join(f'<option value="{_e(v)}">{_e((names or {}).get(v, v))}</option>' for v in values)
    return f'<label>{_e(label)}<select id="{element_id}">{opts}</select></label>'


def grid_section(view: "GridView") -> str:
    """The grid's section of the page (heatmaps, selectors, the card box, the data and the script)."""
    if not view.cells:
        return ('<section id="grid"><h2>Grid</h2><p class="note">No evaluated checkpoints yet: run `mmgrid build` and '
                "`mmgrid eval`.</p></section>")
    seeds = {s: ("seeds pooled" if s == "pooled" else "the one replicate" if s == "-1" else f"seed {s}") for s in view.seeds}
    groups = {"all": "all users", "active": "active users", "non_active": "non-active users"}
    controls = ('<p class="controls">' + _options("grid-metric", "metric", view.metrics)
                + _options("grid-group", "user group", view.groups, groups)
                + _options("grid-seed", "training seeds", view.seeds, seeds) + "</p>")
    panels = "".join(f'<div class="panel" id="heat-{_safe(p["key"])}" data-panel="{html_attr(p["key"])}"></div>'
                     for p in view.panels)
    grid = {"split": view.split, "panels": view.panels, "cells": view.cells}
    return ('<section id="grid"><h2>Grid</h2><p>One heatmap per paradigm and variant: rows are domains, columns '
            f"periods; each cell is that checkpoint's metric on the test window <code>{_e(view.split)}</code>, in %. "
            "Seeds pooled: the mean over every training seed's replicate with a 95% interval over users and seeds; "
            "per seed: that replicate's recorded mean and interval. Hover a cell for its interval; click it for the "
            "checkpoint's card.</p>" + controls + f'<div class="panels">{panels}</div>'
            + '<div id="card" hidden></div>' + _json_script("grid-data", grid) + _json_script("card-data", view.cards)
            + f"<script>{GRID_JS}</script></section>")


def _safe(key: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "_-" else "_" for ch in key)


