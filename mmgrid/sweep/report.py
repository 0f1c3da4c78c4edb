"""``mmgrid report``: DIR/report.md with PNG figures and Markdown tables, from the registry.

Sections (each degrades to a note when its inputs are missing): Table 2 (baselines),
Figure 2 and pairwise task-vector diagnostics, Figures 3-4 (cross-domain), Figure 5
(temporal lambda curves with lambda* per group), Tables 3-4 and the regression (lambda*
prediction, Spearman's rho), the Orbit Pareto plot, and an appendix naming the registry
ids behind every table row.
"""

from __future__ import annotations

import math
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import pandas as pd

from mmgrid.config import GridConfig
from mmgrid.errors import MmgridError
from mmgrid.sweep import figures as fg
from mmgrid.sweep import tables as tb
from mmgrid.sweep.crossdomain import cross_domain_results, relative_change
from mmgrid.sweep.diagnose import pairwise_diagnostics, task_vector_norms
from mmgrid.sweep.lambda_model import predict_lambda
from mmgrid.sweep.results import checkpoint_metrics
from mmgrid.sweep.selection import lambda_stars
from mmgrid.sweep.temporal import temporal_results

if TYPE_CHECKING:  # pragma: no cover
    from mmgrid.data.dataset import PreparedDataset

README_FIGURE = "figure5_lambda.png"


@dataclass
class Report:
    """What a report is made of while it is written."""

    out: Path
    parts: list[str] = field(default_factory=list)
    provenance: list[str] = field(default_factory=list)
    figures: list[str] = field(default_factory=list)

    def add(self, *text: str) -> None:
        self.parts.extend(text)

    def figure(self, path: Path, caption: str) -> None:
        self.figures.append(path.name)
        self.add(f"![{caption}]({path.name})", "", f"*{caption}*", "")

    def table(self, df: pd.DataFrame, title: str, prov: dict[str, list[str]] | None = None, fmt: str = "{:.3f}") -> None:
        self.add(tb.markdown_table(df, fmt), "")
        if prov:
            self.provenance.append(tb.provenance_markdown(title, prov))
            self.add(f"<sub>Registry ids behind each row: appendix, *{title}*.</sub>", "")


def _section(rep: Report, title: str, fn: Callable[[], None]) -> None:
    """Run one section; on missing inputs or an error, say so in the report instead of crashing."""
    rep.add(f"## {title}", "")
    try:
        fn()
    except MissingInputs as exc:
        rep.add(f"_Not available: {exc}_", "")
    except Exception as exc:  # noqa: BLE001 - a report section must never take the report down
        print(f"mmgrid report: section {title!r} failed:\n{traceback.format_exc()}", file=sys.stderr)
        rep.add(f"_This section could not be produced: {type(exc).__name__}: {exc}_", "")


class MissingInputs(MmgridError):
    """A report section's inputs are not in the registry yet."""


def write_report(cfg: GridConfig, registry: Any, prepared: "PreparedDataset", out_dir: str | Path,
                 diagnostics: bool = True) -> Path:
    """Write ``out_dir/report.md`` and its PNG figures from what the registry holds.

    Args:
        cfg: the grid.
        registry: an open registry.
        prepared: the prepared dataset.
        out_dir: output folder (created).
        diagnostics: compute Figure 2 and the pairwise task-vector diagnostics (loads
            every trained checkpoint once).

    Returns:
        The path of report.md.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rep = Report(out)
    domains = list(prepared.domains)
    rep.add(f"# mmgrid report: grid `{cfg.name}`", "",
            f"Registry `{registry.root}`, prepared data fingerprint `{getattr(prepared, 'fingerprint', '?')}`, "
            f"grid hash `{cfg.hash()}`, written {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. "
            f"Domains: {', '.join(domains)}. Metrics in % unless noted; test window `{cfg.eval.split}`.", "")
    ctx: dict[str, Any] = {}
    _section(rep, "Table 2: baselines (last-stage checkpoints, all users)", lambda: _table2(rep, cfg, registry, domains))
    if diagnostics:
        _section(rep, "Figure 2: task-vector magnitude and domain conflict",
                 lambda: _diagnostics(rep, cfg, registry, prepared))
    _section(rep, "Figures 3 and 4: cross-domain merging", lambda: _cross_domain(rep, cfg, registry))
    _section(rep, "Figure 5: temporal lambda sweeps", lambda: _temporal(rep, cfg, registry, ctx))
    _section(rep, "Tables 3 and 4: predicting lambda* from domain statistics",
             lambda: _prediction(rep, cfg, registry, prepared, ctx))
    _section(rep, "Orbit: text retention against Recall@10", lambda: _pareto(rep, cfg, registry))
    rep.add("## Appendix: provenance", "",
            "Each row's numbers were read from registry evaluations of these checkpoint ids or merge-recipe "
            "hashes (`mmgrid query`, `reg.results(recipe_hash=...)`, `reg.lineage(id)`).", "")
    rep.add(*(p + "\n" for p in rep.provenance))
    path = out / "report.md"
    path.write_text("\n".join(rep.parts))
    return path


# --------------------------------------------------------------------------- sections


def _table2(rep: Report, cfg: GridConfig, registry: Any, domains: list[str]) -> None:
    t2, prov = tb.table2(cfg, registry, domains)
    if t2.empty:
        raise MissingInputs("no evaluated last-stage checkpoints; run `mmgrid build` and `mmgrid eval`.")
    t2.index = [PRETTY.get(i, i) for i in t2.index]
    prov = {PRETTY.get(k, k): v for k, v in prov.items()}
    rep.add("Rows: paradigms (SASRec and most-popular as references); R = Recall, N = NDCG, in %.", "")
    rep.table(t2, "Table 2", prov)


PRETTY = {"text": "Text-grounded (BIGRec)", "semid": "SemID (LC-Rec)", "emb": "SemEmb (HLLM)", "sasrec": "SASRec",
          "popular": "Most popular"}


def _diagnostics(rep: Report, cfg: GridConfig, registry: Any, prepared: Any) -> None:
    paradigms = [p for p in cfg.paradigms if not registry.query(paradigm=p, kind="trained").empty]
    if not paradigms:
        raise MissingInputs("no trained checkpoints in the registry.")
    norms = task_vector_norms(cfg, registry, prepared, paradigms)
    rep.figure(fg.figure2_norms(norms, rep.out / "figure2_norms.png"),
               "Figure 2: L1 norm of task vectors (theta - start model) per paradigm, domain and period")
    t = norms.pivot_table(index=["paradigm", "domain"], columns="period", values="l1", aggfunc="last")
    t = t.reindex(columns=[p for p in cfg.train.stages if p in t.columns])
    t.index = [f"{p} / {d}" for p, d in t.index]
    prov = {f"{r.paradigm} / {r.domain}": [] for r in norms.itertuples()}
    for r in norms.itertuples():
        prov[f"{r.paradigm} / {r.domain}"] += [r.id, r.base_id]
    rep.table(t, "Figure 2 (L1 norms)", {k: list(dict.fromkeys(v)) for k, v in prov.items()}, fmt="{:.4g}")
    pairs = pairwise_diagnostics(cfg, registry, prepared, paradigms)
    if not pairs.empty:
        rep.add("Between domains' last-stage task vectors: cosine, sign dissimilarity (share of entries whose "
                "sign differs where the other vector is nonzero, both ways averaged, Orbit Eq. 1) and GCWM "
                "geometry conflict (1 - Bures fidelity of the updates' covariances; 0 = same geometry).", "")
        show = pairs.set_index(pairs["paradigm"] + " / " + pairs["domain_i"] + "+" + pairs["domain_j"])
        rep.table(show[["cosine", "sign_dissimilarity", "geometry_conflict"]], "Task-vector conflict",
                  {i: [r.id_i, r.id_j, r.base_i, r.base_j] for i, r in zip(show.index, show.itertuples())})


def _cross_domain(rep: Report, cfg: GridConfig, registry: Any) -> None:
    df = cross_domain_results(registry)
    if df.empty:
        raise MissingInputs("no cross-domain results; run `mmgrid sweep cross-domain CONFIG`.")
    metric = cfg.sweeps.cross_domain.metric
    rel = relative_change(df, metric=metric)
    if rel.empty:
        raise MissingInputs("cross-domain results hold no merged models with a baseline.")
    rel["alpha"] = pd.to_numeric(rel["alpha"], errors="coerce")
    heat = rel[(rel["base_kind"].isin(["original", "none"])) & (rel["alpha"].isna() | np.isclose(rel["alpha"], 0.5))]
    if not heat.empty:
        rep.figure(fg.figure3_heatmaps(heat, rep.out / "figure3_heatmaps.png"),
                   f"Figure 3: % change of {metric.upper()} on the row domain after merging with the column domain "
                   "(original base, alpha = 0.5) against its own t2 checkpoint")
    if rel["alpha"].notna().any():
        rep.figure(fg.figure4_alpha(rel, rep.out / "figure4_alpha.png"),
                   "Figure 4: joint % change (mean over both domains and all pairs) against alpha, per base")
    t, prov = tb.cross_domain_table(rel)
    rep.add(f"Mean % change of {metric.upper()} (all users) over pairs, evaluated domains and alphas:", "")
    rep.table(t, "Cross-domain summary", prov, fmt="{:+.2f}")


def _temporal(rep: Report, cfg: GridConfig, registry: Any, ctx: dict[str, Any]) -> None:
    t = cfg.sweeps.temporal
    res = temporal_results(registry, paradigm=t.paradigm, variant=t.variant)
    if res.empty:
        raise MissingInputs(f"no temporal results for paradigm {t.paradigm!r}; run `mmgrid sweep temporal CONFIG`.")
    stars = lambda_stars(res, t.metric)
    ctx["temporal"], ctx["stars"] = res, stars
    rep.figure(fg.figure5_lambda(res, stars, rep.out / README_FIGURE, t.metric),
               f"Figure 5: {t.metric.upper()} of theta_t1 + lambda (theta_t2 - theta_t1) ({t.paradigm}); "
               "dashed lines mark lambda* per user group")
    wide = stars.pivot(index="domain", columns="group", values="lambda_star")
    wide = wide.reindex(columns=[g for g in ("all", "active", "non_active") if g in wide.columns])
    prov = {d: list(dict.fromkeys(res.loc[res["domain"] == d, "recipe_hash"])) for d in wide.index}
    rep.add(f"lambda* = argmax of {t.metric} (ties go to the lambda closest to 1):", "")
    rep.table(wide, "lambda* per domain and group", prov, fmt="{:.2f}")


def _prediction(rep: Report, cfg: GridConfig, registry: Any, prepared: Any, ctx: dict[str, Any]) -> None:
    if "temporal" not in ctx:
        raise MissingInputs("no temporal results (see Figure 5).")
    pred = predict_lambda(cfg, registry, prepared, results=ctx["temporal"], evaluate=False)
    feature = pred.features[0]
    t4, prov4 = tb.table4(pred)
    rep.add("**Table 4** (layout of MMGRid Table 4): statistics of the training data, the non-active users' "
            "lambda*, its leave-one-out prediction and the Eq. 11 blend "
            "lambda_hat* = (1 - p_active) lambda*_pred + p_active.", "")
    rep.table(t4, "Table 4", prov4)
    rep.table(tb.regression_summary(pred), "Regression", None, fmt="{:.4g}")
    if math.isfinite(pred.rho):
        rep.add(f"**Spearman's rho** between {feature} and the {pred.group.replace('_', '-')} users' lambda* over "
                f"{len(pred.table)} domains: **rho = {pred.rho:.3f}** (p = {pred.pvalue:.3g}): lambda* "
                f"**{pred.direction}** as {feature} rises"
                + (" (the direction of MMGRid Table 4)" if pred.direction == "falls" else
                   "; MMGRid Table 4 shows it falling")
                + (f"; weak evidence: not significant at the 0.05 level over {len(pred.table)} domains." if
                   not pred.pvalue < 0.05 else "."), "")
    else:
        rep.add(f"Spearman's rho is undefined here ({len(pred.table)} domain(s) or constant values).", "")
    for note in pred.notes:
        rep.add(f"_Note: {note}_", "")
    rep.figure(fg.regression_plot(pred.table, feature, rep.out / "lambda_regression.png", pred.loo, pred.rho),
               f"lambda* of {pred.group.replace('_', '-')} users against {feature}, with leave-one-out predictions")
    hat = temporal_results(registry, paradigm=pred.paradigm, variant=cfg.sweeps.temporal.variant, study="lambda_hat")
    t3, prov3 = tb.table3(ctx["temporal"], hat, sorted(pred.table["domain"]))
    rep.add("**Table 3** (layout of MMGRid Table 3): all users at lambda = 1 (the t2 checkpoint) and at the "
            "leave-one-out lambda_hat*, in %.", "")
    if hat.empty:
        rep.add("_The lambda_hat* row is empty: run `mmgrid predict-lambda CONFIG` to evaluate it._", "")
    else:
        lams = hat.drop_duplicates("domain").set_index("domain")["lambda"]
        rep.add("lambda_hat* used: " + ", ".join(f"{d} {v:.3f}" for d, v in lams.items()), "")
    rep.table(t3, "Table 3", prov3)


def _pareto(rep: Report, cfg: GridConfig, registry: Any) -> None:
    pts = pareto_points(cfg, registry)
    # the comparison is within a paradigm: keep the paradigms that have a regularized row
    regularized = set(pts.loc[pts["regularizer"] != "none", "paradigm"]) if not pts.empty else set()
    pts = pts[pts["paradigm"].isin(regularized)]
    if pts.empty or pts["regularizer"].nunique() < 2:
        raise MissingInputs("needs evaluated variants with at least two regularizers (none, l2_init, soup_to_go, "
                            "orbit) and text-retention results; the quick demo builds none.")
    rep.figure(fg.pareto_orbit(pts, rep.out / "orbit_pareto.png"),
               "Text retention (exp(base text loss - text loss) = base ppl / ppl) against Recall@10, per variant")
    show = pts.set_index(pts["variant"] + " / " + pts["paradigm"])[["regularizer", "text_retention", "recall@10"]]
    rep.table(show, "Orbit Pareto", {i: ids for i, ids in zip(show.index, pts["ids"])}, fmt="{:.4f}")


def pareto_points(cfg: GridConfig, registry: Any) -> pd.DataFrame:
    """Per variant x paradigm: mean over domains of text retention and test Recall@10 (all users)."""
    rows = []
    for v in cfg.variants:
        for p in v.paradigms or cfg.paradigms:
            ids = list(tb.final_ids(cfg, registry, p, v.name).values())
            if not ids:
                continue
            rec = checkpoint_metrics(registry, ids, split=cfg.eval.split, group="all")
            ret = checkpoint_metrics(registry, ids, split="lm_heldout", group="all")
            if rec.empty or ret.empty or "text_loss" not in ret.columns or "recall@10" not in rec.columns:
                continue
            base = ret["base_text_loss"] if "base_text_loss" in ret.columns else np.nan
            retention = np.exp(base - ret["text_loss"])
            rows.append({"variant": v.name, "regularizer": v.regularizer, "paradigm": p,
                         "text_retention": float(retention.mean()), "recall@10": float(rec["recall@10"].mean()),
                         "ids": ids})
    return pd.DataFrame(rows, columns=["variant", "regularizer", "paradigm", "text_retention", "recall@10", "ids"])
