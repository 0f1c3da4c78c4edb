"""report.html: one self-contained interactive page of the grid and the studies, rendered from the same
typed results as report.md (:mod:`mmgrid.sweep.study_results`) and the grid's cells and cards
(:mod:`mmgrid.sweep.grid_view`).

plotly draws the figures; its JavaScript bundle (from the ``plotly`` package, no network) and every
number are inlined, so the file opens anywhere, offline. Recall and NDCG are in % everywhere.

The page: the Findings, each verdict linking to its section; the grid as one heatmap of domain x
period per paradigm and variant (metric, user group and seed-pooled / per-seed selectable; hover
shows the 95% interval; a click opens the checkpoint's card with its coordinates, manifest,
parents, results and lineage drawn); Table 2; the cross-domain results with intervals; the temporal
lambda curves with bands, lambda* with its interval, edge flags and the synthetic world's own
value; Tables 4 and 3; the Orbit Pareto points; a calibration section where a ``calibration``
result exists (:data:`EXTRA_SECTIONS`); the glossary.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import pandas as pd

from mmgrid.render.figures import GROUP_STYLE
from mmgrid.render.markdown import cell_text, finding_notes
from mmgrid.render.report_calibration import TITLE as CALIBRATION_TITLE
from mmgrid.render.report_calibration import calibration_html
from mmgrid.render.report_html_encode import html_attr, plotly_div
from mmgrid.render.report_html_encode import html_text as _e
from mmgrid.render.report_html_grid import grid_section
from mmgrid.render.report_rolling import TITLE as ROLLING_TITLE, rolling_html
from mmgrid.render.report_temporal import CONTINUAL_TITLE, GROUP_LABEL, continual_intro
from mmgrid.sweep import tables as tb
from mmgrid.sweep.continual import CLAIM
from mmgrid.sweep.study_records import FINDINGS, GLOSSARY, StudyResults

if TYPE_CHECKING:  # pragma: no cover
    from mmgrid.sweep.grid_view import GridView

# key -> (title, renderer(result) -> html): sections a later study adds to the page (e.g. "calibration"
# from `mmgrid calibrate`); rendered after the studies when StudyResults holds a result under that key.
EXTRA_SECTIONS: dict[str, tuple[str, Callable[[Any], str]]] = {"calibration": (CALIBRATION_TITLE, calibration_html),
                                                               "rolling": (ROLLING_TITLE, rolling_html)}

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1150px;margin:0 auto;padding:0 12px 40px;
color:#222;line-height:1.45}
h1{font-size:1.5em}h2{margin-top:1.8em;border-bottom:1px solid #ddd;padding-bottom:.2em}
nav{position:sticky;top:0;background:#fff;padding:6px 0;border-bottom:1px solid #eee;z-index:5;font-size:.9em;display:flex;flex-wrap:wrap}
nav a{margin-right:.8em;white-space:nowrap}
.scroll{overflow-x:auto;max-width:100%}
table.t{border-collapse:collapse;font-size:.85em;margin:.5em 0}
table.t th,table.t td{border:1px solid #ddd;padding:3px 6px;text-align:right;white-space:nowrap}
table.t th{background:#f5f5f5;position:sticky;left:0}
table.t tbody th{text-align:left}
.verdict{display:inline-block;min-width:7.5em;font-weight:600;padding:0 .4em;border-radius:3px}
.holds{background:#d9f2d9}.fails{background:#f6d5d5}.inconclusive{background:#f2ecd0}.notevaluated{background:#eee}
.note{background:#f7f7f7;border-left:4px solid #999;padding:.4em .8em}
.failed{background:#fde8e8;border-left:4px solid #c00;padding:.4em .8em;font-weight:600}
.controls label{margin-right:1em}.controls select{margin-left:.3em}
.panels,.figs{display:flex;flex-wrap:wrap;gap:10px}
.panel{flex:1 1 330px;min-width:260px;max-width:560px}.fig{flex:1 1 420px;min-width:260px;max-width:100%;overflow:hidden}
#card{border:2px solid #4a7;border-radius:6px;padding:.6em 1em;margin-top:1em}
#card[hidden]{display:none}
pre{background:#f7f7f7;padding:.5em;overflow-x:auto;font-size:.8em;max-height:22em}
svg text{font-size:11px;font-family:monospace}
@media (max-width:600px){body{padding:0 6px}table.t{font-size:.75em}}
"""


def render_html(results: StudyResults, view: "GridView | None") -> str:
    """The whole page as one string."""
    import plotly.offline  # lazy: plotly (~0.3 s) is loaded only when report.html is written

    cfg = results.cfg
    body: list[str] = []
    toc = [("findings", "Findings")]
    body.append(_findings(results))
    if view is not None:
        toc.append(("grid", "Grid"))
        body.append(grid_section(view))
    renderers: dict[str, Callable[[Any], str]] = {"table2": _table2, "diagnostics": _diagnostics,
                                                  "cross_domain": _cross_domain, "temporal": _temporal,
                                                  "prediction": _prediction, "pareto": _pareto}
    for key, s in results.sections.items():
        toc.append((key, s.title.split(":")[0]))
        body.append(f'<section id="{html_attr(key)}"><h2>{_e(s.title)}</h2>')
        if s.missing is not None:
            body.append(f'<p class="note">Not available: {_e(s.missing)}</p>')
        elif s.error is not None:
            body.append(f'<p class="failed">FAILED: this section could not be computed: {_e(s.error)}</p>')
        else:
            body.append(renderers[key](s.result))
        body.append("</section>")
    for key, (title, render) in EXTRA_SECTIONS.items():
        r = results.get(key)
        if r is not None:
            toc.append((key, title))
            body.append(f'<section id="{html_attr(key)}"><h2>{_e(title)}</h2>{render(r)}</section>')
    toc.append(("glossary", "Glossary"))
    body.append(_glossary())
    nav = "<nav>" + "".join(f'<a href="#{html_attr(k)}">{_e(t)}</a>' for k, t in toc) + "</nav>"
    failed = ""
    if results.failed:
        failed = ('<p class="failed">This report is incomplete: '
                  + ", ".join(_e(s.title) for s in results.failed) + " failed.</p>")
    head = (f"<h1>mmgrid report: grid <code>{_e(cfg.name)}</code></h1>"
            f"<p>Registry <code>{_e(results.registry_root)}</code>, prepared data <code>{_e(results.fingerprint)}</code>, "
            f"grid hash <code>{_e(cfg.hash())}</code>. Domains: {_e(', '.join(results.domains))}. "
            "Recall and NDCG are in % everywhere; each number is a mean over test users (and training seeds where "
            "pooled) with its 95% interval in brackets. Hover a point or cell for its interval.</p>")
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>mmgrid report: {_e(cfg.name)}</title><style>{CSS}</style>"
            f"<script>{plotly.offline.get_plotlyjs()}</script></head><body>"
            + nav + head + failed + "\n".join(body) + f"<script>{READY_JS}</script></body></html>")


# Each figure was drawn while the page was still being parsed, at the width its box had then; once every
# box is laid out, size them again (plotly's `responsive` only follows later window resizes).
READY_JS = """
window.addEventListener('load', function(){
  for (const gd of document.querySelectorAll('.js-plotly-plot')) Plotly.Plots.resize(gd);
  window.mmgridReady = true;
});
"""


# --------------------------------------------------------------------------- helpers


def _table(df: pd.DataFrame, fmt: str = "{:.2f}") -> str:
    """A pandas table as HTML (escaped), scrollable sideways in a narrow window."""
    if df is None or df.empty:
        return '<p class="note">(empty)</p>'
    show = df.copy()
    if isinstance(show.columns, pd.MultiIndex):
        show.columns = [" ".join(map(str, c)) for c in show.columns]
    show = show.map(lambda v: cell_text(v, fmt))
    return '<div class="scroll">' + show.to_html(classes="t", border=0, escape=True, na_rep="-") + "</div>"


def _plot(fig: Any, div_id: str) -> str:
    fig.update_layout(margin=dict(l=50, r=10, t=50, b=40), template="plotly_white", autosize=True)
    fig.update_layout(title_font_size=13)
    return plotly_div(fig, div_id, {"responsive": True, "displaylogo": False})


def _go():
    import plotly.graph_objects as go  # lazy: plotly (~0.3 s) only when report.html is written

    return go


def _finite(v: Any) -> bool:
    try:
        return math.isfinite(float(v))
    except (TypeError, ValueError):
        return False


VERDICT_CLASS = {"holds": "holds", "does not hold": "fails", "inconclusive": "inconclusive"}


def _findings(results: StudyResults) -> str:
    got = results.findings()
    rows = []
    for key, where, claim in FINDINGS:
        f = got.get(key)
        if f is None:
            rows.append(f'<li><span class="verdict notevaluated">not evaluated</span> {_e(where)}: {_e(claim)} '
                        "(its inputs are missing)</li>")
        else:
            rows.append(f'<li id="finding-{html_attr(key)}"><span class="verdict {VERDICT_CLASS.get(f.verdict, "")}">{_e(f.verdict)}'
                        f"</span> {_e(where)}: {_e(claim)} <br><small>{_e(f.evidence)} &mdash; "
                        f'<a href="#{html_attr(f.section)}">evidence</a></small>'
                        + "".join(f'<br><small class="finding-note">{_e(t)}</small>' for t in finding_notes(f))
                        + "</li>")
    return ('<section id="findings"><h2>Findings</h2><p>Each of the papers\' findings judged from the 95% interval '
            "of its effect: <b>holds</b> (on the claimed side), <b>does not hold</b> (on the other side), "
            "<b>inconclusive</b> (straddles no effect).</p><ul>" + "".join(rows) + "</ul></section>")


def _glossary() -> str:
    return ('<section id="glossary"><h2>Glossary</h2><dl>'
            + "".join(f"<dt><b>{_e(t)}</b></dt><dd>{_e(d)}</dd>" for t, d in GLOSSARY) + "</dl></section>")


# --------------------------------------------------------------------------- sections


def _table2(r: Any) -> str:
    out = ["<p>Rows: paradigms (SASRec and most-popular as references); R = Recall, N = NDCG, in %, "
           "mean [95% interval] over test users and seeds.</p>", _table(r.table)]
    for short, wide in r.comparison_tables.items():
        out.append(f"<p>Paired per user, {_e(short)} in % points: paradigm minus reference, mean [95% interval], "
                   "Holm-corrected p in parentheses.</p>" + _table(wide))
    return "".join(out)


def _diagnostics(r: Any) -> str:
    out = ["<p>L1 norm of each task vector (theta - start model): exact values of stored weights.</p>",
           _table(r.norm_table, "{:.4g}")]
    if not r.pairs.empty:
        show = r.pairs.set_index(r.pairs["paradigm"] + " / " + r.pairs["domain_i"] + "+" + r.pairs["domain_j"])
        out.append("<p>Between domains' last-stage task vectors: cosine, sign dissimilarity, geometry conflict.</p>"
                   + _table(show[["cosine", "sign_dissimilarity", "geometry_conflict"]], "{:.3f}"))
    return "".join(out)


def _cross_domain(r: Any) -> str:
    go = _go()
    out = []
    if r.seeds and len(r.seeds) < len(r.all_seeds):
        out.append(f'<p class="note">This study ran on training seed {", ".join(map(str, r.seeds))} only: its '
                   "intervals resample users only.</p>")
    e = r.errors
    if e is not None and not e.empty:
        figs = []
        for i, ((p, m), sub) in enumerate(e.groupby(["paradigm", "method"], sort=False)):
            fig = go.Figure()
            kinds = list(dict.fromkeys(sub["base_kind"]))
            for j, (kind, k) in enumerate(sub.groupby("base_kind", sort=False)):
                k = k.sort_values("alpha")
                shift = 0.012 * (j - (len(kinds) - 1) / 2)  # bases at the same alpha side by side, not on top
                fig.add_trace(go.Scatter(x=k["alpha"] + shift, y=k["value"], mode="lines+markers", name=str(kind),
                                         error_y=dict(type="data", symmetric=False, array=k["high"] - k["value"],
                                                      arrayminus=k["value"] - k["low"]),
                                         hovertemplate="alpha %{customdata[2]}<br>%{y:+.2f}% [%{customdata[0]:+.2f}, "
                                                       "%{customdata[1]:+.2f}]<extra>" + _e(kind) + "</extra>",
                                         customdata=np.c_[k["low"], k["high"], k["alpha"]]))
            fig.add_hline(y=0, line_color="#999", line_width=1)
            fig.update_layout(title=f"{p} / {m}: joint % change of {r.metric.upper()}", height=330, showlegend=True,
                              xaxis_title="alpha (Eq. 7)", yaxis_title="joint % change (95% interval)")
            figs.append(f'<div class="fig">{_plot(fig, f"fig4-{i}")}</div>')
        out.append('<p>Figure 4: joint % change (mean over both domains and all pairs) against alpha per base, '
                   'with 95% error bars (users resampled).</p><div class="figs">' + "".join(figs) + "</div>")
    out.append(f"<p>Mean % change of {_e(r.metric.upper())} over pairs, evaluated domains and alphas:</p>"
               + _table(r.summary, "{:+.2f}"))
    c = r.cells
    if c is not None and not c.empty:
        show = c.assign(**{"merged (%) [95%]": [_ci(v, lo, hi) for v, lo, hi in zip(c["merged (%)"], c["low"], c["high"])]})
        show = show[["paradigm", "pair", "method", "base", "alpha", "evaluated on", "merged (%) [95%]", "own t2 (%)",
                     "% change", "recipe"]]
        out.append("<p>Every merged model on each of its two domains: its value with the 95% interval over users, "
                   "the domain's own t2 checkpoint, and the % change.</p>" + _table(show.set_index("paradigm"), "{:.2f}"))
    if not r.orderings.empty:
        o = r.orderings
        show = pd.DataFrame({"difference (% points) [95%]": [_ci(x.diff * 100, x.ci_low * 100, x.ci_high * 100, True)
                                                             for x in o.itertuples()],
                             "p (Holm)": [f"{v:.3g}" for v in o["p_holm"]]},
                            index=o["paradigm"] + " / " + o["method"] + ": " + o["better"] + " - " + o["worse"])
        out.append("<p>Base orderings (MMGRid Fig. 4), paired per user:</p>" + _table(show))
    return "".join(out)


def _ci(v: Any, lo: Any, hi: Any, sign: bool = False) -> str:
    if not _finite(v):
        return "-"
    f = "{:+.2f}" if sign else "{:.2f}"
    return f.format(float(v)) + (f" [{f.format(float(lo))}, {f.format(float(hi))}]" if _finite(lo) and _finite(hi) else "")


DASH = {"all": "solid", "active": "dash", "non_active": "dashdot"}


def _temporal(r: Any) -> str:
    go = _go()
    band = r.band if r.band is not None and not r.band.empty else None
    data = band if band is not None else r.results[r.results["metric"] == r.metric]
    figs = []
    for i, d in enumerate(sorted(data["domain"].unique())):
        fig = go.Figure()
        sub = data[data["domain"] == d]
        shapes, k = [], 0
        for g in [g for g in ("all", "active", "non_active") if g in set(sub["group"])]:
            color, label = GROUP_STYLE.get(g, ("black", g))
            color = _css_color(color)
            gd = sub[sub["group"] == g].sort_values("lambda")
            if band is not None:
                fig.add_trace(go.Scatter(x=gd["lambda"], y=gd["high"] * 100, mode="lines", line=dict(width=0.6, color=color,
                                         dash="dot"), showlegend=False, hoverinfo="skip", legendgroup=g))
                fig.add_trace(go.Scatter(x=gd["lambda"], y=gd["low"] * 100, mode="lines", fill="tonexty",
                                         line=dict(width=0.6, color=color, dash="dot"), fillcolor=_alpha(color, 0.13),
                                         name=f"{label} 95% band", hoverinfo="skip", legendgroup=g, showlegend=False))
                cd = np.c_[gd["low"] * 100, gd["high"] * 100]
                tmpl = "lambda %{x}<br>%{y:.2f}% [%{customdata[0]:.2f}, %{customdata[1]:.2f}]"
            else:
                cd, tmpl = None, "lambda %{x}<br>%{y:.2f}% (no interval recorded)"
            fig.add_trace(go.Scatter(x=gd["lambda"], y=gd["value"] * 100, mode="lines+markers", name=label,
                                     line=dict(color=color), customdata=cd, legendgroup=g,
                                     hovertemplate=tmpl + f"<extra>{_e(label)}</extra>"))
            st = r.stars[(r.stars["domain"] == d) & (r.stars["group"] == g)]
            if not st.empty:
                s = st.iloc[0]
                edge = " (edge)" if bool(s.get("on_edge", False)) else ""
                shapes.append(dict(type="line", x0=s["lambda_star"], x1=s["lambda_star"], yref="paper", y0=0, y1=0.86,
                                   line=dict(color=color, dash=DASH.get(g, "dash"), width=2)))
                if _finite(s.get("ci_low")) and _finite(s.get("ci_high")):
                    y = 0.9 + 0.033 * k
                    shapes.append(dict(type="rect", x0=s["ci_low"], x1=s["ci_high"], yref="paper", y0=y, y1=y + 0.022,
                                       fillcolor=color, line=dict(width=0), opacity=0.8))
                # a legend entry names lambda*, its interval and the edge flag in the line's own style
                fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", legendgroup=g,
                                         line=dict(color=color, dash=DASH.get(g, "dash"), width=2),
                                         name=f"lambda* {label.lower()}: {lam_label(s)}{edge}"))
                k += 1
        world = r.world_lambdas.get(d) if r.world_lambdas else None
        if world is not None:
            shapes.append(dict(type="line", x0=world, x1=world, yref="paper", y0=0, y1=0.86,
                               line=dict(color="black", dash="dot", width=1.5)))
            label = "population lambda*" if r.world_source.startswith("population") else "formula lambda"
            fig.add_annotation(x=world, y=0.02, yref="paper", text=label, showarrow=False,
                               font=dict(size=9), xanchor="left")
        edges = [g for dd, g in r.edge if dd == d]
        fig.update_layout(title=f"{d}" + (f" (lambda* on the grid's edge: {', '.join(edges)})" if edges else ""),
                          shapes=shapes, height=460, xaxis_title="lambda",
                          yaxis_title=f"{r.metric.upper()} (%)", legend=dict(orientation="h", y=-0.2, font=dict(size=10)))
        figs.append(f'<div class="fig">{_plot(fig, f"fig5-{i}")}</div>')
    text = ("<p>Figure 5: the metric along the line from theta_t1 to theta_t2 and beyond, per domain and user group: "
            "mean over users and seeds with its 95% band (shaded); vertical lines mark lambda* (solid: all, dashed: "
            "active, dash-dot: non-active; the legend gives each value), its 95% interval is the bar in the group's "
            "colour at the top of the plot; the dotted "
            "black line is the synthetic world's own non-active lambda* where there is one.</p>")
    out = [text, '<div class="figs">' + "".join(figs) + "</div>", "<p>lambda* per domain and user group:</p>",
           _table(r.lambda_table)]
    if r.world is not None:
        out.append(f"<p>The synthetic world's own non-active lambda* ({_e(r.world_source)}) against the non-active "
                   "users' lambda* interval:</p>" + _table(r.world))
    return "".join(out)


def lam_label(s: Any) -> str:
    v, lo, hi = s["lambda_star"], s.get("ci_low"), s.get("ci_high")
    return f"{float(v):.2f}" + (f" [{float(lo):.2f}, {float(hi):.2f}]" if _finite(lo) and _finite(hi) else "")


def _css_color(name: str) -> str:
    from matplotlib.colors import to_hex  # lazy: matplotlib (~0.9 s) only when report.html is written

    return to_hex(name)


def _alpha(hex_color: str, a: float) -> str:
    h = hex_color.lstrip("#")
    r, g, b = (int(h[i:i + 2], 16) for i in (0, 2, 4))
    return f"rgba({r},{g},{b},{a})"


def _prediction(r: Any) -> str:
    out = ["<p><b>Table 4</b>: domain statistics, the non-active users' lambda* with its 95% interval, its "
           "leave-one-out prediction and the Eq. 11 blend.</p>", _table(r.table4, "{:.3f}"), _table(r.regression, "{:.4g}")]
    sp = r.spearman
    if sp is not None:
        ci = f" [{sp.ci_low:.2f}, {sp.ci_high:.2f}]" if _finite(sp.ci_low) else " (no interval)"
        out.append(f"<p>Spearman's rho between {_e(r.feature)} and lambda*: <b>{sp.rho:.3f}</b>{ci}, exact "
                   f"permutation p = {sp.pvalue:.3g} over {sp.n} domains.</p>")
    lo = r.loo_error
    if lo is not None:
        ci = f" [{lo.ci_low:+.3f}, {lo.ci_high:+.3f}]" if _finite(lo.ci_low) else ""
        out.append(f"<p>Leave-one-out error: {lo.mae_loo:.3f} against {lo.mae_default:.3f} for lambda = 1; "
                   f"difference {lo.diff:+.3f}{ci}.</p>")
    out.append("<p><b>Table 3</b>: all users at lambda = 1, at lambda_hat* and at the all-users lambda* (oracle), in %, "
               "mean [95% interval].</p>" + _table(r.table3))
    if r.table3_comparisons is not None and not r.table3_comparisons.empty:
        out.append("<p>Paired per user, in % points (Holm-corrected p):</p>"
                   + _table(tb.table3_comparison_table(r.table3_comparisons)))
    if r.continual is not None:
        out.append(_continual(r.continual, next((f for f in r.findings if f.key == "t3_continual"), None)))
    return "".join(out)


def _continual(c: Any, finding: Any) -> str:
    """Table 3's continual-merging rows: per user group (active and non-active folded) the means and the
    differences to lambda = 1, then the verdict badge; where nothing is recorded, how to record it."""
    if c.empty:
        return f'<p class="note" id="continual"><b>{_e(CONTINUAL_TITLE)}</b>: {_e(c.how)}</p>'
    out = [f'<p id="continual"><b>{_e(CONTINUAL_TITLE)}</b> (<code>mmgrid sweep continual</code>): '
           f"{_e(continual_intro(c))}</p>"]
    for g, (means, diffs) in c.groups.items():
        label = GROUP_LABEL.get(g, g)
        body = (f"<p><i>{_e(label.capitalize())} users</i>, mean [95% interval]:</p>{_table(means)}"
                f"<p><i>{_e(label.capitalize())} users</i>, minus lambda = 1 (% points) [95% interval] (p Holm):</p>"
                f"{_table(diffs)}")
        out.append(body if g == "all" else f"<details><summary>{_e(label.capitalize())} users</summary>{body}</details>")
    if finding is not None:
        out.append(f'<p><span class="verdict {VERDICT_CLASS.get(finding.verdict, "")}">{_e(finding.verdict)}</span> '
                   f"{_e(CLAIM)} <br><small>{_e(finding.evidence)}</small>"
                   + "".join(f'<br><small class="finding-note">{_e(t)}</small>' for t in finding_notes(finding))
                   + "</p>")
    return "".join(out)


def _pareto(r: Any) -> str:
    go = _go()
    pts = r.points
    fig = go.Figure()
    for _, p in pts.iterrows():
        def err(c: str) -> dict | None:
            lo, hi = p.get(f"{c}_low"), p.get(f"{c}_high")
            if not (_finite(lo) and _finite(hi)):
                return None
            return dict(type="data", symmetric=False, array=[float(hi) - float(p[c])], arrayminus=[float(p[c]) - float(lo)])

        name = f"{p['variant']} / {p['paradigm']} ({'unregularized' if p['regularizer'] == 'none' else p['regularizer']})"
        fig.add_trace(go.Scatter(x=[p["text_retention"]], y=[p["recall@10"]], mode="markers", name=name,
                                 error_x=err("text_retention"), error_y=err("recall@10"),
                                 marker=dict(size=12, symbol="circle-open" if p["regularizer"] == "none" else "circle"),
                                 hovertemplate=f"{_e(name)}<br>retention %{{x:.3f}}<br>R@10 %{{y:.2f}}% "
                                               f"{_ci(p['recall@10'], p['recall@10_low'], p['recall@10_high'])}<extra></extra>"))
    fig.add_vline(x=1.0, line_dash="dot", line_color="#999")
    fig.update_layout(height=380, xaxis_title="text retention (base ppl / ppl)", yaxis_title="Recall@10 (%), 95% interval")
    show = pts.set_index(pts["variant"] + " / " + pts["paradigm"])
    table = pd.DataFrame({"regularizer": show["regularizer"], "text retention": show["text_retention"].map("{:.3f}".format),
                          "R@10 (%) [95%]": [_ci(a, b, c) for a, b, c in zip(show["recall@10"], show["recall@10_low"],
                                                                              show["recall@10_high"])]})
    return ("<p>Text retention against Recall@10 per variant; error bars are 95% intervals; the open circle is the "
            "unregularized variant.</p>" + _plot(fig, "pareto") + _table(table))
