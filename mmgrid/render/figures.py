"""The report's figures as PNG files (matplotlib, Agg backend), in the papers' layouts.

Each function takes a tidy DataFrame and a path, draws one figure and returns the path;
none of them reads the registry.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

GROUP_STYLE = {"all": ("tab:blue", "All users"), "active": ("tab:green", "Active"),
               "non_active": ("tab:red", "Non-active")}
BASE_STYLE = {"original": ("tab:gray", "Original base"), "historical": ("tab:orange", "Historical checkpoint"),
              "neutral": ("tab:purple", "Neutral base"), "none": ("black", "No base")}


def pyplot():
    # lazy: matplotlib (~0.9 s) and its Agg backend only once a figure is drawn, so that
    # importing the studies neither pays for it nor switches a notebook's backend
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: as matplotlib above

    return plt


def _grid(n: int, ncols: int = 3, size: tuple[float, float] = (4.0, 3.2)):
    plt = pyplot()
    ncols = max(1, min(ncols, n))
    nrows = int(np.ceil(n / ncols))
    fig, axes = plt.subplots(nrows, ncols, figsize=(size[0] * ncols, size[1] * nrows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat[:n])


def save_figure(fig, path: Path) -> Path:
    """Write ``fig`` as a PNG at ``path`` (folders made), then close it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    pyplot().close(fig)
    return path


STAR_STYLE = {"all": ("-", "solid"), "active": ((0, (5, 3)), "dashed"), "non_active": ((0, (6, 2, 1, 2)), "dash-dot")}


def figure5_lambda(curves: pd.DataFrame, stars: pd.DataFrame, path: Path, metric: str = "ndcg@10",
                   bands: pd.DataFrame | None = None) -> Path:
    """MMGRid Figure 5: metric (in %) against lambda per domain, one line per user group, lambda* marked.

    Each group's curve carries its pointwise 95% band (shaded and edged in the group's colour, so
    overlapping bands stay apart); lambda* is a vertical line in the group's line style
    (:data:`STAR_STYLE`) with its 95% interval drawn as a bar along the top of the panel.

    Args:
        curves: long temporal results (domain, group, lambda, metric, value as a fraction).
        stars: lambda* per (domain, group) (with ``ci_low``/``ci_high``: the interval bars).
        path: PNG path.
        metric: the metric drawn.
        bands: seed-averaged curves with pointwise 95% bands (domain, group, lambda, value, low,
            high; :func:`mmgrid.sweep.evidence.bands`); drawn instead of ``curves`` when given.
    """
    if bands is not None and not bands.empty:
        curves = bands.assign(metric=metric)
    sub = curves[curves["metric"] == metric]
    domains = sorted(sub["domain"].unique())
    fig, axes = _grid(len(domains))
    for ax, d in zip(axes, domains):
        groups = list(sub[sub["domain"] == d].groupby("group"))
        for k, (g, gdf) in enumerate(groups):
            color, label = GROUP_STYLE.get(g, ("black", g))
            gdf = gdf.sort_values("lambda")
            ax.plot(gdf["lambda"], gdf["value"] * 100, color=color, label=label, marker=".", lw=1.4)
            if {"low", "high"} <= set(gdf.columns):
                lo, hi = gdf["low"].to_numpy(float) * 100, gdf["high"].to_numpy(float) * 100
                ax.fill_between(gdf["lambda"], lo, hi, color=color, alpha=0.12, lw=0)
                ax.plot(gdf["lambda"], lo, color=color, lw=0.7, alpha=0.8, ls=(0, (1, 1)))
                ax.plot(gdf["lambda"], hi, color=color, lw=0.7, alpha=0.8, ls=(0, (1, 1)))
            st = stars[(stars["domain"] == d) & (stars["group"] == g)]
            if not st.empty:
                ls = STAR_STYLE.get(g, ("--", ""))[0]
                lam = float(st["lambda_star"].iloc[0])
                ax.axvline(lam, color=color, lw=1.4, ls=ls)
                if {"ci_low", "ci_high"} <= set(st.columns) and np.isfinite(st[["ci_low", "ci_high"]].to_numpy(float)).all():
                    y = 0.97 - 0.045 * k  # one row per group along the top, in axes coordinates
                    ax.plot([float(st["ci_low"].iloc[0]), float(st["ci_high"].iloc[0])], [y, y], color=color, lw=2.5,
                            transform=ax.get_xaxis_transform(), solid_capstyle="butt")
                    ax.plot([lam], [y], marker="|", color="black", ms=7, transform=ax.get_xaxis_transform())
        ax.axvline(1.0, color="0.6", ls=":", lw=0.8)
        low, high = ax.get_ylim()
        ax.set_ylim(low, high + 0.16 * (high - low))  # headroom: the lambda* interval bars sit above the curves
        ax.set_title(d)
        ax.set_xlabel("lambda_temp")
        ax.set_ylabel(f"{metric.upper()} (%)")
    handles, labels = axes[0].get_legend_handles_labels()
    from matplotlib.lines import Line2D  # lazy: matplotlib is imported only once a figure is drawn (pyplot)

    for g, (ls, name) in STAR_STYLE.items():
        handles.append(Line2D([], [], color=GROUP_STYLE[g][0], ls=ls, lw=1.4))
        labels.append(f"lambda* {GROUP_STYLE[g][1].lower()} ({name})")
    handles.append(Line2D([], [], color="0.3", lw=2.5))
    labels.append("lambda* 95% interval")
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8, frameon=False)
    fig.suptitle("theta_t1 + lambda (theta_t2 - theta_t1): mean with 95% band (users, seeds)\n"
                 "vertical lines = lambda* (solid: all, dashed: active, dash-dot: non-active); bars at the top: "
                 "its 95% interval", fontsize=9)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout(rect=(0, 0.1, 1, 0.92))
    fig.savefig(path, dpi=110)
    pyplot().close(fig)
    return path


def figure2_norms(norms: pd.DataFrame, path: Path) -> Path:
    """MMGRid Figure 2: L1 norm of task vectors per paradigm x domain, one bar per period."""
    paradigms = list(dict.fromkeys(norms["paradigm"]))
    fig, axes = _grid(len(paradigms), ncols=4, size=(4.6, 3.4))
    for ax, p in zip(axes, paradigms):
        sub = norms[norms["paradigm"] == p]
        table = sub.pivot_table(index="domain", columns="period", values="l1", aggfunc="last")
        periods = list(dict.fromkeys(sub["period"]))
        table = table.reindex(columns=periods)
        x = np.arange(len(table.index))
        w = 0.8 / max(1, len(periods))
        for i, per in enumerate(periods):
            ax.bar(x + i * w - 0.4 + w / 2, table[per].to_numpy(dtype=float), width=w, label=per)
        ax.set_xticks(x, table.index, rotation=30, ha="right", fontsize=8)
        ax.set_title(p)
        ax.set_ylabel("||tau||_1")
    axes[0].legend(fontsize=8)
    fig.suptitle("Task-vector L1 norm vs. start model", fontsize=10)
    return save_figure(fig, path)


def figure3_heatmaps(rel: pd.DataFrame, path: Path) -> Path:
    """MMGRid Figure 3: relative change (%) of domain i (row) merged with domain j (column).

    One panel per (paradigm, method); ``rel`` holds the merged rows with ``rel_change``.
    """
    plt = pyplot()
    panels = list(dict.fromkeys(zip(rel["paradigm"], rel["method"])))
    fig, axes = _grid(len(panels), ncols=3, size=(4.2, 3.8))
    for ax, (p, m) in zip(axes, panels):
        sub = rel[(rel["paradigm"] == p) & (rel["method"] == m)]
        partner = np.where(sub["eval_domain"] == sub["domain_i"], sub["domain_j"], sub["domain_i"])
        sub = sub.assign(partner=partner)
        doms = sorted(set(sub["eval_domain"]) | set(sub["partner"]))
        mat = sub.pivot_table(index="eval_domain", columns="partner", values="rel_change", aggfunc="mean")
        mat = mat.reindex(index=doms, columns=doms) * 100
        lim = np.nanmax(np.abs(mat.to_numpy(dtype=float))) if np.isfinite(mat.to_numpy(dtype=float)).any() else 1.0
        im = ax.imshow(mat.to_numpy(dtype=float), cmap="RdBu", vmin=-lim, vmax=lim)
        for (i, j), v in np.ndenumerate(mat.to_numpy(dtype=float)):
            if np.isfinite(v):
                ax.text(j, i, f"{v:+.0f}", ha="center", va="center", fontsize=7)
        ax.set_xticks(range(len(doms)), doms, rotation=30, ha="right", fontsize=8)
        ax.set_yticks(range(len(doms)), doms, fontsize=8)
        ax.set_xlabel("merged with")
        ax.set_ylabel("evaluated on")
        ax.set_title(f"{p} / {m}", fontsize=9)
        plt.colorbar(im, ax=ax, fraction=0.046, label="% change vs own t2")
    fig.suptitle("% change vs. each domain's own t2 checkpoint", fontsize=10)
    return save_figure(fig, path)


def figure4_alpha(rel: pd.DataFrame, path: Path, errors: pd.DataFrame | None = None) -> Path:
    """MMGRid Figure 4: joint relative change against alpha, one line per base, a panel per paradigm x method.

    Joint performance = mean over both evaluated domains and over pairs of the relative change.
    ``errors`` (paradigm, method, base_kind, alpha, low, high in %) draws 95% error bars.
    """
    sub = rel.dropna(subset=["alpha"])
    panels = list(dict.fromkeys(zip(sub["paradigm"], sub["method"])))
    fig, axes = _grid(max(1, len(panels)), ncols=3)
    alphas = np.sort(sub["alpha"].astype(float).unique())
    gap = float(np.min(np.diff(alphas))) if len(alphas) > 1 else 0.5
    for ax, (p, m) in zip(axes, panels):
        s = sub[(sub["paradigm"] == p) & (sub["method"] == m)]
        kinds = list(s.groupby("base_kind"))
        for j, (kind, k) in enumerate(kinds):
            color, label = BASE_STYLE.get(kind, ("black", kind))
            curve = k.groupby("alpha")["rel_change"].mean() * 100
            # bases side by side at each alpha (a small dodge), so that equal values do not hide each other
            x = curve.index.to_numpy(float) + 0.06 * gap * (j - (len(kinds) - 1) / 2)
            ax.plot(x, curve.to_numpy(), marker="o", color=color, label=label)
            if errors is not None and not errors.empty:
                e = errors[(errors["paradigm"] == p) & (errors["method"] == m) & (errors["base_kind"] == kind)]
                e = e.set_index("alpha").reindex(curve.index)
                if e[["low", "high"]].notna().all().all():
                    ax.errorbar(x, curve.to_numpy(), fmt="none", ecolor=color, capsize=3,
                                yerr=[curve.to_numpy() - e["low"].to_numpy(), e["high"].to_numpy() - curve.to_numpy()])
        ax.set_xticks(alphas)
        ax.set_xlim(alphas[0] - 0.3 * gap, alphas[-1] + 0.3 * gap)
        ax.axhline(0, color="0.6", lw=0.8)
        ax.set_title(f"{p} / {m}", fontsize=9)
        ax.set_xlabel("alpha (weight of the pair's first domain, Eq. 7)")
        ax.set_ylabel("joint % change (95% interval)")
        ax.legend(fontsize=7)
    fig.suptitle("Cross-domain merging with different bases (Eq. 7-8)", fontsize=10)
    return save_figure(fig, path)


def regression_plot(table: pd.DataFrame, feature: str, path: Path, loo: pd.DataFrame | None = None,
                    rho: float = float("nan")) -> Path:
    """lambda* (non-active users) against a domain statistic, with the fitted line (Table 4).

    ``table`` with ``ci_low`` / ``ci_high`` draws lambda*'s 95% interval as error bars.
    """
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.6))
    x, y = table[feature].to_numpy(float), table["lambda_star"].to_numpy(float)
    ax.scatter(x, y, color="tab:red", zorder=3, label="lambda* (non-active)")
    if {"ci_low", "ci_high"} <= set(table.columns) and table[["ci_low", "ci_high"]].notna().all().all():
        lo, hi = table["ci_low"].to_numpy(float), table["ci_high"].to_numpy(float)
        ax.errorbar(x, y, yerr=[y - lo, hi - y], fmt="none", ecolor="tab:red", capsize=3, lw=1,
                    label="95% interval (users, seeds)")
    for d, xi, yi in zip(table["domain"], x, y):
        ax.annotate(str(d), (xi, yi), fontsize=7, xytext=(3, 3), textcoords="offset points")
    if len(x) >= 2 and np.ptp(x) > 0:
        k, c = np.polyfit(x, y, 1)
        xs = np.linspace(x.min(), x.max(), 20)
        ax.plot(xs, c + k * xs, color="0.3", lw=1, label="least squares")
    if loo is not None:
        ax.scatter(loo[feature], loo["lambda_pred"], marker="x", color="tab:blue", label="leave-one-out prediction")
    ax.set_xlabel(feature)
    ax.set_ylabel("lambda*")
    ax.set_title(f"Spearman rho = {rho:.2f}")
    ax.legend(fontsize=7)
    return save_figure(fig, path)


def pareto_orbit(points: pd.DataFrame, path: Path) -> Path:
    """Orbit paper Figure 6 layout: text retention (x) against Recall@10 in % (y), one marker per variant.

    ``points`` (:func:`mmgrid.sweep.study_results.pareto_points`) with ``*_low``/``*_high`` columns draws
    95% error bars on both axes. Each point is named in the legend (no labels on the plot to
    collide); the unregularized variant (regularizer ``none``) is the filled circle, and a dotted
    line marks retention 1 (the start model's own text ability).
    """
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.4, 4.2))
    markers = {"none": "o", "l2_init": "s", "soup_to_go": "^", "orbit": "*"}
    colors = plt.get_cmap("tab10")
    for i, (_, r) in enumerate(points.reset_index(drop=True).iterrows()):
        reg = r["regularizer"]
        x, y = float(r["text_retention"]), float(r["recall@10"])
        xerr = yerr = None
        if pd.notna(r.get("text_retention_low")) and pd.notna(r.get("text_retention_high")):
            xerr = [[x - float(r["text_retention_low"])], [float(r["text_retention_high"]) - x]]
        if pd.notna(r.get("recall@10_low")) and pd.notna(r.get("recall@10_high")):
            yerr = [[y - float(r["recall@10_low"])], [float(r["recall@10_high"]) - y]]
        name = "unregularized" if reg == "none" else reg
        # the unregularized point is a larger open circle: it stays visible under a point at the same place
        style = dict(ms=12, mfc="none", mew=1.8, zorder=4) if reg == "none" else dict(ms=9 if reg == "orbit" else 7)
        ax.errorbar([x], [y], xerr=xerr, yerr=yerr, fmt=markers.get(reg, "D"), color=colors(i % 10),
                    ecolor=colors(i % 10), elinewidth=1, capsize=3, label=f"{r['variant']} / {r['paradigm']} ({name})",
                    **style)
    for i, (_, sub) in enumerate(points.groupby("paradigm")):  # a front per paradigm: rows compete within one
        front = pareto_front(sub, "text_retention", "recall@10")
        if len(front) > 1:
            ax.plot(front["text_retention"], front["recall@10"], color="0.5", ls="--", lw=1,
                    label="Pareto front" if i == 0 else None)
    ax.axvline(1.0, color="0.6", ls=":", lw=1, label="retention 1 = start model's text")
    ax.set_xlabel("text retention (base ppl / ppl)" + (", 95% interval" if points.get(
        "text_retention_low", pd.Series(dtype=float)).notna().any() else " (no interval recorded)"))
    ax.set_ylabel("Recall@10 (%), 95% interval")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    return save_figure(fig, path)


def pareto_front(points: pd.DataFrame, x: str, y: str) -> pd.DataFrame:
    """Rows no other row beats on both ``x`` and ``y`` (larger is better), sorted by ``x``."""
    pts = points.dropna(subset=[x, y])
    keep = []
    for i, r in pts.iterrows():
        dominated = ((pts[x] >= r[x]) & (pts[y] >= r[y]) & ((pts[x] > r[x]) | (pts[y] > r[y]))).any()
        if not dominated:
            keep.append(i)
    return pts.loc[keep].sort_values(x)
