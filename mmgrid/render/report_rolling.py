"""The report's "Deployment over time" section (the rolling deployment study, :mod:`mmgrid.sweep.rolling`):
each strategy's metric on the window it was deployed on, with its 95% band, the accuracy-matrix heatmap of each
strategy, the pooled table with paired differences to lambda = 1 (Holm) and BWT / FWT / forgetting,
and the verdicts; :func:`rolling_text` is also what `mmgrid sweep rolling` prints. report.md draws PNG figures (matplotlib, as :mod:`mmgrid.render.figures`); report.html adds
the same section through its extra sections (plotly)."""

from __future__ import annotations

import html
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from mmgrid.render.figures import pyplot, save_figure
from mmgrid.sweep.rolling import REFERENCE, RollingStudy, rolling_study

if TYPE_CHECKING:
    from mmgrid.config.grid import GridConfig
    from mmgrid.registry.api import Registry

TITLE = "Deployment over time"


def rolling_text(study: RollingStudy, metric: str | None = None) -> str:
    """The study as Markdown, as `mmgrid sweep rolling` prints it and the report's section ends: the pooled
    table, per-window means and the transfer measures (BWT, FWT, forgetting), then the verdicts."""
    metric = metric or study.metric
    if study.empty:
        return "No rolling deployment recorded (run `mmgrid sweep rolling RUN`)."
    r = study.rows[(study.rows["metric"] == metric) & (study.rows["domain"] == "all")]
    lines = [f"Deployed model on the next window, {metric} (all users, every domain; 95% intervals: pooled over "
             "the (domain, window) cells, a window's over its users, seeds kept; difference to latest = lambda 1, "
             "Holm over the strategies)", "",
             "| strategy | pooled | difference to latest | p (Holm) | " + " | ".join(study.windows) + " |",
             "|---|---|---|---|" + "---|" * len(study.windows)]
    for strat, g in r.groupby("strategy", sort=False):
        allrow = g[g["window"] == "all"]
        if allrow.empty:
            continue
        a = allrow.iloc[0]
        per = [g[g["window"] == w]["mean"] for w in study.windows]
        lines.append(f"| {strat} | {a['mean']:.4f} [{a['ci_low']:.4f}, {a['ci_high']:.4f}] | {a['diff']:+.4f} "
                     f"[{a['diff_low']:+.4f}, {a['diff_high']:+.4f}] | "
                     f"{'' if a['p_holm'] != a['p_holm'] else f'{a.p_holm:.3g}'} | "
                     + " | ".join(f"{float(x.iloc[0]):.4f}" if len(x) else "" for x in per) + " |")
    if not study.transfer.empty:
        tr = study.transfer.groupby("strategy")[["bwt", "fwt", "forgetting"]].mean()
        lines += ["", f"Accuracy matrix R[i, j] of {study.metric} (deployment after period i on window j) per "
                  "strategy, mean over domains: BWT, FWT (against theta_0) and forgetting", "",
                  "| strategy | BWT | FWT | forgetting |", "|---|---|---|---|"]
        lines += [f"| {s} | {x.bwt:+.4f} | {x.fwt:+.4f} | {x.forgetting:+.4f} |" for s, x in tr.iterrows()]
    lines += ["", *study.verdict_lines()]
    return "\n".join(lines)


def _curves(study: RollingStudy, metric: str) -> pd.DataFrame:
    r = study.rows
    return r[(r["metric"] == metric) & (r["domain"] == "all") & (r["window"] != "all")]


def curve_figure(study: RollingStudy, path: Path, metric: str | None = None) -> Path:
    """Each strategy's metric (in %) on the window it was deployed on, every domain's users pooled, 95% band."""
    metric = metric or study.metric
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.0))
    c = _curves(study, metric)
    x = np.arange(len(study.windows))
    for strat, g in c.groupby("strategy", sort=False):
        g = g.set_index("window").reindex(study.windows)
        line = ax.plot(x, g["mean"] * 100, marker="o", lw=2.2 if strat == REFERENCE else 1.2, label=strat,
                       color="black" if strat == REFERENCE else None)[0]
        ax.fill_between(x, g["ci_low"] * 100, g["ci_high"] * 100, color=line.get_color(), alpha=0.12)
    ax.set_xticks(x, study.windows)
    ax.set_xlabel("window deployed on (the period after the one trained)")
    ax.set_ylabel(f"{metric} (%)")
    ax.legend(fontsize=7, ncol=2)
    return save_figure(fig, path)


def strategy_matrices(study: RollingStudy) -> dict[str, dict[str, Any]]:
    """Strategy -> its accuracy matrix averaged over domains (``R`` in %, ``windows``, ``deployed_at``), the
    reference first; a strategy with no complete matrix is left out."""
    out: dict[str, dict[str, Any]] = {}
    names = sorted({s for _, s in study.matrices}, key=lambda s: (s != REFERENCE, s))
    for strat in names:
        ms = [m for (d, s), m in sorted(study.matrices.items()) if s == strat]
        out[strat] = {"R": np.mean([np.array(m["R"]) for m in ms], axis=0) * 100, "windows": ms[0]["windows"],
                      "deployed_at": ms[0]["deployed_at"]}
    return out


def matrix_figure(study: RollingStudy, path: Path) -> Path | None:
    """Each strategy's accuracy matrix R[i, j] (deployment after period i on window j, mean over domains) as a
    heatmap, one panel a strategy, on one colour scale."""
    mats = strategy_matrices(study)
    if not mats:
        return None
    plt = pyplot()
    n = len(mats)
    cols = min(n, 3)
    rows = -(-n // cols)
    shape = next(iter(mats.values()))["R"].shape
    fig, axes = plt.subplots(rows, cols, figsize=(cols * (0.9 * shape[1] + 1.6), rows * (0.8 * shape[0] + 1.3)),
                             squeeze=False)
    lo = min(float(np.nanmin(m["R"])) for m in mats.values())
    hi = max(float(np.nanmax(m["R"])) for m in mats.values())
    im = None
    for ax, (strat, m) in zip(axes.flat, mats.items()):
        R = m["R"]
        im = ax.imshow(R, cmap="viridis", vmin=lo, vmax=hi)
        for i in range(R.shape[0]):
            for j in range(R.shape[1]):
                ax.text(j, i, f"{R[i, j]:.1f}", ha="center", va="center", color="white", fontsize=7)
        ax.set_xticks(range(R.shape[1]), m["windows"], fontsize=7)
        ax.set_yticks(range(R.shape[0]), m["deployed_at"], fontsize=7)
        ax.set_title(strat, fontsize=9)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.supxlabel("evaluated on window j")
    fig.supylabel("deployed after period i")
    fig.colorbar(im, ax=list(axes.flat)[n - 1], label=f"{study.metric} (%)")  # one scale for every panel
    return save_figure(fig, path)


def rolling_markdown(study: RollingStudy, out: Path) -> tuple[list[str], list[str]]:
    """(report.md lines, figure file names drawn into ``out``)."""
    lines = ["At every period each strategy deploys a model on the next window, built from the checkpoints and "
             "windows up to that period only (`mmgrid sweep rolling`; docs/studies.md, *Rolling deployment*).", ""]
    figs = []
    if not study.empty:
        p = curve_figure(study, Path(out) / "rolling_curves.png")
        figs.append(p.name)
        cap = f"{study.metric} of each strategy on the window it was deployed on (every domain's users; 95% bands)"
        lines += [f"![{cap}]({p.name})", "", f"*{cap}*", ""]
        m = matrix_figure(study, Path(out) / "rolling_matrix.png")
        if m is not None:
            figs.append(m.name)
            cap = (f"Accuracy matrix of each strategy ({REFERENCE}: lambda = 1): deployment after period i on window j, "
                   f"{study.metric} in %, mean over domains")
            lines += [f"![{cap}]({m.name})", "", f"*{cap}*", ""]
    lines += [rolling_text(study), ""]
    return lines, figs


def rolling_html(study: RollingStudy) -> str:
    """The section's HTML: the per-window curves (plotly, with bands), each strategy's accuracy-matrix heatmap,
    the table and the verdicts."""
    import plotly.graph_objects as go  # lazy: only when report.html is written

    if study.empty:
        return '<p class="note">No rolling deployment recorded.</p>'
    fig = go.Figure()
    for strat, g in _curves(study, study.metric).groupby("strategy", sort=False):
        g = g.set_index("window").reindex(study.windows)
        fig.add_trace(go.Scatter(x=study.windows, y=g["mean"] * 100, name=strat, mode="lines+markers",
                                 error_y=dict(type="data", symmetric=False, array=(g["ci_high"] - g["mean"]) * 100,
                                              arrayminus=(g["mean"] - g["ci_low"]) * 100)))
    fig.update_layout(title=f"{study.metric} (%) on the window deployed on", template="plotly_white")
    conf = {"responsive": True, "displaylogo": False}
    plot = fig.to_html(full_html=False, include_plotlyjs=False, div_id="rolling-curves", config=conf)
    mats = strategy_matrices(study)
    if mats:
        from plotly.subplots import make_subplots  # lazy: only when report.html is written

        cols = min(len(mats), 3)
        heat = make_subplots(rows=-(-len(mats) // cols), cols=cols, subplot_titles=list(mats))
        lo = min(float(np.nanmin(m["R"])) for m in mats.values())
        hi = max(float(np.nanmax(m["R"])) for m in mats.values())
        for k, (strat, m) in enumerate(mats.items()):
            heat.add_trace(go.Heatmap(z=m["R"], x=m["windows"], y=m["deployed_at"], zmin=lo, zmax=hi,
                                      coloraxis="coloraxis", texttemplate="%{z:.1f}", name=strat),
                           row=k // cols + 1, col=k % cols + 1)
        heat.update_layout(title=f"Accuracy matrix R[i, j], {study.metric} (%): deployment after period i (rows) on "
                                 "window j (columns)", template="plotly_white", coloraxis={"colorscale": "Viridis"},
                           height=260 * (-(-len(mats) // cols)) + 80)
        plot += heat.to_html(full_html=False, include_plotlyjs=False, div_id="rolling-matrix", config=conf)
    return plot + "<pre>" + html.escape(rolling_text(study)) + "</pre>"


def rolling_results(cfg: GridConfig, registry: Registry) -> RollingStudy | None:
    """The study read back for the report (None where nothing is recorded)."""
    t = cfg.sweeps.temporal
    st = rolling_study(registry, t.paradigm, t.variant, t.metric)
    return None if st.empty else st
