"""The report's temporal sections: Figure 5 with lambda* and its interval, Tables 4 and 3.

lambda* comes from the seed-averaged per-user curve (:func:`mmgrid.sweep.evidence.robust_stars`),
Table 4 adds Spearman's rho with its interval and exact permutation p and the leave-one-out error
against lambda = 1, Table 3 the paired comparisons of lambda_hat* and lambda* with lambda = 1;
each appends its verdicts to ``ctx["findings"]`` (:data:`mmgrid.sweep.report.FINDINGS`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from mmgrid.config import GridConfig
from mmgrid.errors import MmgridError
from mmgrid.stats import HOLDS, INCONCLUSIVE, contains, loo_error_vs_default, verdict
from mmgrid.sweep import evidence as ev
from mmgrid.sweep import figures as fg
from mmgrid.sweep import tables as tb
from mmgrid.sweep.lambda_model import association, from_stars, stats_table, study_stars
from mmgrid.sweep.temporal import temporal_results

README_FIGURE = "figure5_lambda.png"


class MissingInputs(MmgridError):
    """A report section's inputs are not in the registry yet."""


def _lam(v: float, lo: float, hi: float, edge: Any = False) -> str:
    if v is None or not math.isfinite(v):
        return "-"
    text = f"{v:.2f}" + (f" [{lo:.2f}, {hi:.2f}]" if math.isfinite(lo) and math.isfinite(hi) else "")
    return text + (" (edge)" if bool(edge) else "")


def _temporal(rep: Any, cfg: GridConfig, registry: Any, ctx: dict[str, Any]) -> None:
    t = cfg.sweeps.temporal
    res = temporal_results(registry, paradigm=t.paradigm, variant=t.variant)
    if res.empty:
        raise MissingInputs(f"no temporal results for paradigm {t.paradigm!r}; run `mmgrid sweep temporal CONFIG`.")
    pu = ev.PerUser(registry)
    curves = ev.temporal_curves(registry, t.paradigm, t.variant, t.metric, pu=pu)
    # the lambda* `mmgrid predict-lambda` prints: the per-user curves', else every seed's stored group means
    every_seed = res if curves else temporal_results(registry, paradigm=t.paradigm, variant=t.variant, seed="all")
    stars = study_stars(every_seed, t.metric, curves, t.smooth)
    if curves:
        band = ev.bands(curves, t.smooth)
    else:  # no per-user values: no interval
        for c in ("ci_low", "ci_high", "edge_share"):
            stars[c] = np.nan
        lams = np.sort(res["lambda"].astype(float).unique())
        stars["on_edge"] = np.isclose(stars["lambda_star"], lams[0]) | np.isclose(stars["lambda_star"], lams[-1])
        band = None
    ctx.update(temporal=res, stars=stars, curves=curves, pu=pu)
    rep.figure(fg.figure5_lambda(res, stars, rep.out / README_FIGURE, t.metric, band),
               f"Figure 5: {t.metric.upper()} of theta_t1 + lambda (theta_t2 - theta_t1) ({t.paradigm}), mean over "
               "users and seeds with a 95% band; dashed lines mark lambda* per user group")
    stars = stars.assign(cell=[_lam(r.lambda_star, r.ci_low, r.ci_high, r.on_edge) for r in stars.itertuples()])
    wide = stars.pivot(index="domain", columns="group", values="cell")
    wide = wide.reindex(columns=[g for g in ("all", "active", "non_active") if g in wide.columns])
    prov = {d: list(dict.fromkeys(res.loc[res["domain"] == d, "recipe_hash"])) for d in wide.index}
    how = ("the seed-averaged curve" + (f", smoothed by a running mean over {t.smooth} grid points" if t.smooth > 1 else ""))
    seeds = sorted({s for c in curves.values() for s in c.seeds}) if curves else []
    rep.add(f"lambda* = argmax of {t.metric} on {how} (ties go to the lambda closest to 1), with a 95% bootstrap "
            "interval (users and seeds resampled, argmax recomputed); (edge) = the maximum sits on the grid's "
            f"first or last point. Seeds: {', '.join(map(str, seeds)) or 'as recorded (no per-user values)'}.", "")
    rep.table(wide, "lambda* per domain and group", prov, fmt="{:.2f}")
    edge = stars[stars["on_edge"].astype(bool)]
    if not edge.empty:
        rep.add("_On the grid's edge: " + ", ".join(f"{r.domain}/{r.group}" for r in edge.itertuples())
                + ". The true maximum may lie outside the grid: set `sweeps.temporal.extend_steps` (docs/studies.md) "
                "to let the sweep extend the grid there._", "")
    _temporal_findings(rep, cfg, stars, ctx)


def _temporal_findings(rep: Any, cfg: GridConfig, stars: pd.DataFrame, ctx: dict[str, Any]) -> None:
    al = stars[stars["group"] == "all"]
    if not al.empty and al["ci_low"].notna().any():
        off = al[(al["ci_low"] > 1.0) | (al["ci_high"] < 1.0)]
        ctx["findings"].append({"key": "f5_not1", "verdict": HOLDS if len(off) else INCONCLUSIVE,
                                "evidence": f"{len(off)} of {len(al)} domains' lambda* interval (all users) excludes 1"
                                + (": " + ", ".join(f"{r.domain} {_lam(r.lambda_star, r.ci_low, r.ci_high)}"
                                                    for r in off.itertuples()) if len(off) else "")})
        disjoint = [(a.domain, b.domain) for a in al.itertuples() for b in al.itertuples()
                    if a.domain < b.domain and (a.ci_high < b.ci_low or b.ci_high < a.ci_low)]
        ctx["findings"].append({"key": "f5_varies", "verdict": HOLDS if disjoint else INCONCLUSIVE,
                                "evidence": f"{len(disjoint)} pair(s) of domains with disjoint lambda* intervals (all users)"
                                + (f", e.g. {disjoint[0][0]} vs {disjoint[0][1]}" if disjoint else "")})
    truth = ev.analytic_lambdas(cfg.data.root)
    na = stars[(stars["group"] == "non_active") & stars["domain"].isin(list(truth))]
    if truth and not na.empty and na["ci_low"].notna().any():
        rows, verdicts = {}, []
        for r in na.itertuples():
            value = truth[r.domain]
            outside = value > r.grid_high + 1e-9 or value < r.grid_low - 1e-9 if hasattr(r, "grid_high") else False
            v = INCONCLUSIVE if outside and r.on_edge else contains(r.ci_low, r.ci_high, value)
            verdicts.append(v)
            rows[r.domain] = {"world's lambda": f"{value:.2f}", "lambda* non-active": _lam(r.lambda_star, r.ci_low, r.ci_high, r.on_edge),
                              "contains it": v + (" (beyond the grid)" if outside else "")}
        rep.add("Synthetic world: the world's own lambda for its category trend, 1 + cos(2 pi 91 / P) with P the "
                "trend's period (truth.json; a proxy from the category mix alone), against the non-active users' "
                "lambda* interval:", "")
        rep.table(pd.DataFrame(rows).T, "World truth")
        n_in = sum(v == HOLDS for v in verdicts)
        ctx["findings"].append({"key": "world", "verdict": tb._combine(verdicts),
                                "evidence": f"{n_in} of {len(verdicts)} domains' intervals contain it"})


def _prediction(rep: Any, cfg: GridConfig, registry: Any, prepared: Any, ctx: dict[str, Any]) -> None:
    if "temporal" not in ctx:
        raise MissingInputs("no temporal results (see Figure 5).")
    t, pl = cfg.sweeps.temporal, cfg.sweeps.predict_lambda
    stars = ctx["stars"]
    pred = from_stars(stars[["domain", "group", "lambda_star"]], stats_table(prepared), t.paradigm, t.metric,
                      pl.group, list(pl.features))
    pred.curves, pred.smooth = ctx["curves"] or {}, t.smooth
    feature = pred.features[0]
    domains = [str(d) for d in pred.table["domain"]]
    reps = ev.star_replicates(ctx["curves"], domains, pred.group, t.smooth) if ctx["curves"] else None
    t4, prov4 = tb.table4(pred, stars=stars)
    rep.add("**Table 4** (layout of MMGRid Table 4): statistics of the training data, the non-active users' "
            "lambda* with its 95% interval, its leave-one-out prediction and the Eq. 11 blend "
            "lambda_hat* = (1 - p_active) lambda*_pred + p_active.", "")
    rep.table(t4, "Table 4", prov4)
    rep.table(tb.regression_summary(pred), "Regression", None, fmt="{:.4g}")
    grp = pred.group.replace("_", "-")
    if len(pred.table) >= 3:
        x, y = pred.table[feature].to_numpy(float), pred.table["lambda_star"].to_numpy(float)
        sp = association(pred)  # the same numbers `mmgrid predict-lambda` prints
        if math.isfinite(sp.rho):
            v = verdict(sp.ci_low, sp.ci_high, "less")
            ci = f" [{sp.ci_low:.2f}, {sp.ci_high:.2f}]" if math.isfinite(sp.ci_low) else " (no interval: no per-user values)"
            rep.add(f"**Spearman's rho** between {feature} and the {grp} users' lambda* over {sp.n} domains: "
                    f"**rho = {sp.rho:.3f}**{ci} (95% interval from resampling users within each domain and seeds, "
                    f"lambda* recomputed per resample; exact permutation p = {sp.pvalue:.3g} over all {sp.n}! pairings). "
                    f"lambda* **{pred.direction}** as {feature} rises"
                    + (" (the direction of MMGRid Table 4)." if pred.direction == "falls" else
                       "; MMGRid Table 4 shows it falling."), "")
            ctx["findings"].append({"key": "t4_rho", "verdict": v,
                                    "evidence": f"rho({feature}, lambda*) = {sp.rho:.2f}{ci}, exact p {sp.pvalue:.3g}, "
                                                f"{sp.n} domains"})
        else:
            rep.add(f"Spearman's rho is undefined here ({len(pred.table)} domains or constant values).", "")
        if pred.loo is not None:
            lo = loo_error_vs_default(x, y, reps, default=1.0)
            ci = f" [{lo.ci_low:+.3f}, {lo.ci_high:+.3f}]" if math.isfinite(lo.ci_low) else ""
            rep.add(f"**Leave-one-out error**: mean |lambda*_pred - lambda*| = {lo.mae_loo:.3f} against "
                    f"{lo.mae_default:.3f} for the default lambda = 1; difference {lo.diff:+.3f}{ci} "
                    "(negative: the prediction is closer; interval from the same lambda* resamples).", "")
            ctx["findings"].append({"key": "t4_loo", "verdict": verdict(lo.ci_low, lo.ci_high, "less"),
                                    "evidence": f"MAE(LOO) - MAE(lambda = 1) = {lo.diff:+.3f}{ci}"})
    else:
        rep.add(f"Spearman's rho is undefined here ({len(pred.table)} domain(s)).", "")
    for note in pred.notes:
        rep.add(f"_Note: {note}_", "")
    ci = stars[stars["group"] == pred.group][[c for c in ("domain", "ci_low", "ci_high") if c in stars.columns]]
    plot_table = pred.table.merge(ci, on="domain", how="left") if "ci_low" in ci.columns else pred.table
    rep.figure(fg.regression_plot(plot_table, feature, rep.out / "lambda_regression.png", pred.loo, pred.rho),
               f"lambda* of {grp} users against {feature}, with leave-one-out predictions")
    _table3(rep, cfg, registry, pred, ctx)


def _table3(rep: Any, cfg: GridConfig, registry: Any, pred: Any, ctx: dict[str, Any]) -> None:
    t = cfg.sweeps.temporal
    hat = temporal_results(registry, paradigm=pred.paradigm, variant=t.variant, study="lambda_hat")
    domains = sorted(pred.table["domain"])
    rep.add("**Table 3** (layout of MMGRid Table 3): all users at lambda = 1 (the t2 checkpoint), at the "
            "leave-one-out lambda_hat* and at the all-users lambda* (an oracle: chosen on the test users), in %, "
            "mean [95% interval].", "")
    if hat.empty:
        rep.add("_The lambda_hat* row is empty: run `mmgrid predict-lambda CONFIG` to evaluate it._", "")
    else:
        lams = hat.drop_duplicates("domain").set_index("domain")["lambda"]
        rep.add("lambda_hat* used: " + ", ".join(f"{d} {v:.3f}" for d, v in lams.items()), "")
    t3, prov3, comp = tb.table3_ci(registry, ctx.get("pu"), t, ctx["stars"], domains, pred.lambda_hat())
    if t3.empty:
        t3, prov3 = tb.table3(ctx["temporal"], hat, domains)
    rep.table(t3, "Table 3", prov3)
    if comp is not None and not comp.empty:
        rep.add("Paired per user (same users and seeds), in % points; p per domain, Holm-corrected over the domains "
                "of each comparison and metric:", "")
        rep.table(tb.table3_comparison_table(comp), "Table 3 comparisons")
        ctx["findings"] += tb.table3_findings(comp)
