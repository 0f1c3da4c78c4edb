"""report.md's temporal sections, rendered from typed results: Figure 5 with lambda* and its interval,
Tables 4 and 3 (:class:`~mmgrid.sweep.study_results.TemporalResults`,
:class:`~mmgrid.sweep.study_results.PredictionResults`; nothing here reads the registry or fits).
"""

from __future__ import annotations

import math
from typing import Any

from mmgrid.render import figures as fg
from mmgrid.render.markdown import finding_notes
from mmgrid.sweep import tables as tb
from mmgrid.sweep.continual import CLAIM, LABELS, POOLED
from mmgrid.sweep.study_records import ContinualResults, Finding
from mmgrid.sweep.study_results import MissingInputs, PredictionResults, TemporalResults, lam_text  # noqa: F401

README_FIGURE = "figure5_lambda.png"


def render_temporal(rep: Any, r: TemporalResults) -> None:
    """Figure 5, the lambda* table, the edge note and the synthetic world's own lambda."""
    rep.figure(fg.figure5_lambda(r.results, r.stars, rep.out / README_FIGURE, r.metric, r.band),
               f"Figure 5: {r.metric.upper()} (%) of theta_t1 + lambda (theta_t2 - theta_t1) ({r.paradigm}), mean over "
               "users and seeds with its 95% band (shaded, edged in the group's colour); vertical lines: lambda* per "
               "user group (solid: all, dashed: active, dash-dot: non-active) with its 95% interval as a bar at the top")
    how = "the seed-averaged curve" + (f", smoothed by a running mean over {r.smooth} grid points" if r.smooth > 1 else "")
    rep.add(f"lambda* = argmax of {r.metric} on {how} (ties go to the lambda closest to 1), with a 95% bootstrap "
            "interval (users and seeds resampled, argmax recomputed); (edge) = the maximum sits on the grid's "
            f"first or last point. Seeds: {', '.join(map(str, r.seeds)) or 'as recorded (no per-user values)'}.", "")
    rep.table(r.lambda_table, "lambda* per domain and group", r.lambda_provenance, fmt="{:.2f}")
    if r.edge:
        rep.add("_On the grid's edge: " + ", ".join(f"{d}/{g}" for d, g in r.edge)
                + ". The true maximum may lie outside the grid: set `sweeps.temporal.extend_steps` (docs/studies.md) "
                "to let the sweep extend the grid there._", "")
    if r.world is not None:
        rep.add(f"Synthetic world: the world's own lambda for the non-active users ({r.world_source or 'source unknown'}), "
                "against their lambda* interval:", "")
        rep.table(r.world, "World truth")


def render_prediction(rep: Any, r: PredictionResults) -> None:
    """Table 4, the regression, Spearman's rho, the LOO error, the regression plot and Table 3."""
    pred = r.prediction
    rep.add("**Table 4** (layout of MMGRid Table 4): statistics of the training data, the non-active users' "
            "lambda* with its 95% interval, its leave-one-out prediction and the Eq. 11 blend "
            "lambda_hat* = (1 - p_active) lambda*_pred + p_active.", "")
    rep.table(r.table4, "Table 4", r.table4_provenance)
    rep.table(r.regression, "Regression", None, fmt="{:.4g}")
    grp = pred.group.replace("_", "-")
    sp, feature = r.spearman, r.feature
    if sp is not None:
        ci = f" [{sp.ci_low:.2f}, {sp.ci_high:.2f}]" if math.isfinite(sp.ci_low) else " (no interval: no per-user values)"
        rep.add(f"**Spearman's rho** between {feature} and the {grp} users' lambda* over {sp.n} domains: "
                f"**rho = {sp.rho:.3f}**{ci} (95% interval from resampling users within each domain and seeds, "
                f"lambda* recomputed per resample; exact permutation p = {sp.pvalue:.3g} over all {sp.n}! pairings). "
                f"lambda* **{pred.direction}** as {feature} rises"
                + (" (the direction of MMGRid Table 4)." if pred.direction == "falls" else
                   "; MMGRid Table 4 shows it falling."), "")
    else:
        rep.add(f"Spearman's rho is undefined here ({len(pred.table)} domain(s) or constant values).", "")
    lo = r.loo_error
    if lo is not None:
        ci = f" [{lo.ci_low:+.3f}, {lo.ci_high:+.3f}]" if math.isfinite(lo.ci_low) else ""
        rep.add(f"**Leave-one-out error**: mean |lambda*_pred - lambda*| = {lo.mae_loo:.3f} against "
                f"{lo.mae_default:.3f} for the default lambda = 1; difference {lo.diff:+.3f}{ci} "
                "(negative: the prediction is closer; interval from the same lambda* resamples).", "")
    for note in pred.notes:
        rep.add(f"_Note: {note}_", "")
    rep.figure(fg.regression_plot(r.plot_table, feature, rep.out / "lambda_regression.png", pred.loo, pred.rho),
               f"lambda* of {grp} users against {feature}, with its 95% interval (error bars) and the leave-one-out "
               "predictions")
    rep.add("**Table 3** (layout of MMGRid Table 3): all users at lambda = 1 (the t2 checkpoint), at the "
            "leave-one-out lambda_hat* and at the all-users lambda* (an oracle: chosen on the test users), in %, "
            "mean [95% interval].", "")
    if not r.lambda_hat_used:
        rep.add("_The lambda_hat* row is empty: run `mmgrid predict-lambda CONFIG` to evaluate it._", "")
    else:
        rep.add("lambda_hat* used: " + ", ".join(f"{d} {v:.3f}" for d, v in r.lambda_hat_used.items()), "")
    rep.table(r.table3, "Table 3", r.table3_provenance)
    if r.table3_comparisons is not None and not r.table3_comparisons.empty:
        rep.add("Paired per user (same users and seeds), in % points; p per domain, Holm-corrected over the domains "
                "of each comparison and metric:", "")
        rep.table(tb.table3_comparison_table(r.table3_comparisons), "Table 3 comparisons")
    if r.continual is not None:
        render_continual(rep, r.continual, next((f for f in r.findings if f.key == "t3_continual"), None))


GROUP_LABEL = {"all": "all", "active": "active", "non_active": "non-active"}
CONTINUAL_TITLE = "Table 3, continual merging"


def continual_intro(c: ContinualResults) -> str:
    """The text above Table 3's continual-merging rows, after its title (report.md and report.html; plain text)."""
    short = dict(tb.METRICS).get(c.metric, c.metric)
    seeds = (f" Training seeds: {', '.join(map(str, c.seeds))}"
             + (f" (of {', '.join(map(str, c.all_seeds))}: the study ran on these only, so its intervals rest on "
                "fewer replicates)" if set(c.seeds) != set(c.all_seeds) else "") + "." if c.seeds else "")
    lams = "; ".join(f"{LABELS.get(k, k)} at " + ", ".join(f"{d} {v:.2f}" for d, v in sorted(by.items()))
                     for k, by in sorted(c.study.lambdas.items()) if by)
    seeds += f" lambda evaluated: {lams}." if lams else ""
    return ("each domain's checkpoints merged in the order "
            "they arrived, pretrain -> t1 -> t2, by the continual-merging methods MagMax, OPCM and DOP and by task "
            "arithmetic and TIES over the same sequence, beside lambda scaling at lambda = 1, lambda_hat* and lambda* "
            f"(an oracle), all evaluated on the test window; {short} in %, mean [95% interval] over users and seeds, "
            f"per user group; {POOLED}: every domain's users pooled. Below each group's means: the difference "
            "to lambda = 1 on the same users and seeds, in % points [95% interval] (p, Holm-corrected over every "
            "comparison of the group)." + seeds)


def render_continual(rep: Any, c: ContinualResults, finding: Finding | None) -> None:
    """Table 3's continual-merging rows: per user group the means and the differences to lambda = 1, and the
    verdict line; where nothing is recorded, how to record it."""
    if c.empty:
        rep.add(f"**{CONTINUAL_TITLE}**: _{c.how}_", "")
        return
    rep.add(f"**{CONTINUAL_TITLE}** (`mmgrid sweep continual`): {continual_intro(c)}", "")
    for g, (means, diffs) in c.groups.items():
        label = GROUP_LABEL.get(g, g)
        rep.add(f"*{label.capitalize()} users*, mean [95% interval]:", "")
        rep.table(means, f"Table 3, continual merging ({label} users)", c.provenance if g == "all" else None)
        rep.add(f"*{label.capitalize()} users*, minus lambda = 1 (% points) [95% interval] (p Holm):", "")
        rep.table(diffs, f"Table 3, continual merging vs lambda = 1 ({label} users)")
    if finding is not None:
        rep.add(f"- **{finding.verdict}** at 95%: {CLAIM} ({finding.evidence})",
                *[f"  - {t}" for t in finding_notes(finding)], "")
