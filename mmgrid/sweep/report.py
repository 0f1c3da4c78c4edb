"""``mmgrid report``: DIR/report.md with PNG figures and Markdown tables, from the registry.

Sections (each degrades to a note when its inputs are missing): Table 2 (baselines),
Figure 2 and pairwise task-vector diagnostics, Figures 3-4 (cross-domain), Figure 5
(temporal lambda curves with lambda* per group), Tables 3-4 and the regression (lambda*
prediction, Spearman's rho), the Orbit Pareto plot, and an appendix naming the registry
ids behind every table row.
"""

from __future__ import annotations

import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import pandas as pd

from mmgrid.config import GridConfig
from mmgrid.runtime.progress import progress as progress_bar
from mmgrid.eval.table import PRETTY as TABLE_NAMES
from mmgrid.stats import verdict
from mmgrid.sweep import evidence as ev
from mmgrid.sweep import figures as fg
from mmgrid.sweep import tables as tb
from mmgrid.sweep.crossdomain import cross_domain_results, relative_change
from mmgrid.sweep.diagnose import pairwise_diagnostics, task_vector_norms
from mmgrid.sweep.report_temporal import README_FIGURE, MissingInputs, _prediction, _temporal  # noqa: F401
from mmgrid.sweep.results import checkpoint_metrics

if TYPE_CHECKING:  # pragma: no cover
    from mmgrid.data.dataset import PreparedDataset



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


def _section(rep: Report, title: str, fn: Callable[[], None], bar: Any = None) -> None:
    """Run one section; on missing inputs or an error, say so in the report instead of crashing."""
    rep.add(f"## {title}", "")
    if bar is not None:
        bar.set_postfix(section=title.split(":")[0])
    try:
        fn()
    except MissingInputs as exc:
        rep.add(f"_Not available: {exc}_", "")
    except Exception as exc:  # noqa: BLE001 - a report section must never take the report down
        print(f"mmgrid report: section {title!r} failed:\n{traceback.format_exc()}", file=sys.stderr)
        rep.add(f"_This section could not be produced: {type(exc).__name__}: {exc}_", "")
    finally:
        if bar is not None:
            bar.update(1)


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
            f"Domains: {', '.join(domains)}. Metrics in % unless noted; test window `{cfg.eval.split}`.", "",
            f"Every metric is a mean over test users and training seeds ({_seeds_text(cfg)}) with its 95% "
            "interval in brackets: a percentile bootstrap that resamples users and, independently, seeds "
            "(docs/studies.md, *Statistics*). Paired comparisons give the mean per-user difference with its "
            "interval and a two-sided sign-flip randomization p; corrected p-values are Holm's.", "")
    ctx: dict[str, Any] = {"findings": [], "cfg": cfg}
    rep.add("## Findings", "")
    findings_at = len(rep.parts)
    sections = [("Table 2: baselines (last-stage checkpoints, all users)",
                 lambda: _table2(rep, cfg, registry, domains, ctx))]
    if diagnostics:
        sections.append(("Figure 2: task-vector magnitude and domain conflict",
                         lambda: _diagnostics(rep, cfg, registry, prepared)))
    sections += [("Figures 3 and 4: cross-domain merging", lambda: _cross_domain(rep, cfg, registry, ctx)),
                 ("Figure 5: temporal lambda sweeps", lambda: _temporal(rep, cfg, registry, ctx)),
                 ("Tables 3 and 4: predicting lambda* from domain statistics",
                  lambda: _prediction(rep, cfg, registry, prepared, ctx)),
                 ("Orbit: text retention against Recall@10", lambda: _pareto(rep, cfg, registry))]
    with progress_bar(total=len(sections), desc="report", unit="section", leave=True, min_interval=0.0) as bar:
        for title, fn in sections:
            _section(rep, title, fn, bar)
    rep.parts[findings_at:findings_at] = _findings_lines(ctx)
    rep.add("## Appendix: provenance", "",
            "Each row's numbers were read from registry evaluations of these checkpoint ids or merge-recipe "
            "hashes (`mmgrid query`, `reg.results(recipe_hash=...)`, `reg.lineage(id)`).", "")
    rep.add(*(p + "\n" for p in rep.provenance))
    path = out / "report.md"
    path.write_text("\n".join(rep.parts))
    return path


# --------------------------------------------------------------------------- sections


def _seeds_text(cfg: GridConfig) -> str:
    seeds = getattr(cfg.train, "seed_list", None) or [cfg.train.seed]
    return f"training seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}"


def _table2(rep: Report, cfg: GridConfig, registry: Any, domains: list[str], ctx: dict[str, Any]) -> None:
    t2, prov, cv = tb.table2_ci(cfg, registry, domains)
    if t2.empty:
        raise MissingInputs("no evaluated last-stage checkpoints; run `mmgrid build` and `mmgrid eval`.")
    t2.index = [PRETTY.get(i, i) for i in t2.index]
    prov = {PRETTY.get(k, k): v for k, v in prov.items()}
    rep.add("Rows: paradigms (SASRec and most-popular as references); R = Recall, N = NDCG, in %, "
            "mean [95% interval] over test users and seeds.", "")
    rep.table(t2, "Table 2", prov)
    if not tb.has_intervals(t2):
        rep.add("_No per-user values in this registry: the cells are recorded means without intervals "
                "(re-run `mmgrid eval` to record them)._", "")
    comp = tb.table2_comparisons(cfg, cv, domains)
    ctx["table2_cmp"] = comp
    if comp.empty:
        return
    for metric, short in tb.PRIMARY:
        sub = comp[comp["metric"] == metric]
        if sub.empty:
            continue
        wide = tb.comparison_table(sub, domains, PRETTY)
        rep.add(f"Paired per user, {short} (in % points): paradigm minus reference, mean [95% interval], "
                "Holm-corrected p over the table's comparisons in parentheses.", "")
        rep.table(wide, f"Table 2 comparisons ({short})")
    ctx["findings"] += tb.table2_findings(cv, domains, PRETTY)


PRETTY = TABLE_NAMES  # one set of names for the console and the report


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


def _cross_domain(rep: Report, cfg: GridConfig, registry: Any, ctx: dict[str, Any]) -> None:
    df = cross_domain_results(registry)
    if df.empty:
        raise MissingInputs("no cross-domain results; run `mmgrid sweep cross-domain CONFIG`.")
    metric = cfg.sweeps.cross_domain.metric
    rel = relative_change(df, metric=metric)
    if rel.empty:
        raise MissingInputs("cross-domain results hold no merged models with a baseline.")
    cells, pu = ev.cross_domain_cells(registry, metric)
    seeds = sorted({int(x) for x in cells["seed"].dropna()}) if "seed" in cells.columns else []
    all_seeds = list(getattr(cfg.train, "seed_list", [cfg.train.seed]))
    if seeds and len(seeds) < len(all_seeds):
        rep.add(f"**This study ran on training seed {', '.join(map(str, seeds))} only** (of {len(all_seeds)}: "
                f"{', '.join(map(str, all_seeds))}), to keep the budget: its intervals resample users only.", "")
    ctx["cross_seeds"] = seeds
    rel["alpha"] = pd.to_numeric(rel["alpha"], errors="coerce")
    heat = rel[(rel["base_kind"].isin(["original", "none"])) & (rel["alpha"].isna() | np.isclose(rel["alpha"], 0.5))]
    if not heat.empty:
        rep.figure(fg.figure3_heatmaps(heat, rep.out / "figure3_heatmaps.png"),
                   f"Figure 3: % change of {metric.upper()} on the row domain after merging with the column domain "
                   "(original base, alpha = 0.5) against its own t2 checkpoint")
    errors = ev.joint_change_errors(cells, pu, metric)
    if rel["alpha"].notna().any():
        rep.figure(fg.figure4_alpha(rel, rep.out / "figure4_alpha.png", errors),
                   "Figure 4: joint % change (mean over both domains and all pairs) against alpha, per base; "
                   "error bars: 95% bootstrap over users")
    t, prov = tb.cross_domain_table(rel, errors)
    rep.add(f"Mean % change of {metric.upper()} (all users) over pairs, evaluated domains and alphas "
            "[95% interval over users]:", "")
    rep.table(t, "Cross-domain summary", prov, fmt="{:+.2f}")
    order = ev.with_holm(ev.base_orderings(cells, pu, metric))
    ctx["bases"] = order
    if not order.empty:
        show = order.set_index(order["paradigm"] + " / " + order["method"] + ": " + order["better"] + " - "
                               + order["worse"])
        show = pd.DataFrame({f"{metric.upper()} difference (% points)": [ev.fmt_ci(r.diff, r.ci_low, r.ci_high, sign=True)
                                                                         for r in order.itertuples()],
                             "p (Holm)": [ev.fmt_p(v) for v in order["p_holm"]],
                             "examples / cells": [f"{r.n_users} / {r.n_cells}" for r in order.itertuples()]},
                            index=show.index)
        rep.add("Base orderings of MMGRid Fig. 4, paired per user over every (pair, evaluated domain, alpha) "
                "evaluated with both bases:", "")
        rep.table(show, "Base orderings")
        for key, better, worse in (("f4_hist", "historical", "original"), ("f4_neutral", "neutral", "historical"),
                                   ("f4_neutral", "neutral", "original")):
            sub = order[(order["better"] == better) & (order["worse"] == worse)]
            if any(f["key"] == key for f in ctx["findings"]):
                continue  # neutral - original stands in only where no historical base was run
            if not sub.empty:
                ctx["findings"].append({"key": key, "verdict": tb._combine(
                    [verdict(r.ci_low, r.ci_high, "greater") for r in sub.itertuples()]),
                    "evidence": "; ".join(f"{r.paradigm}/{r.method} {better} - {worse} "
                                          f"{ev.fmt_ci(r.diff, r.ci_low, r.ci_high, sign=True)} pts, p {ev.fmt_p(r.p_holm)}"
                                          for r in sub.itertuples())})


FINDINGS = [
    ("t2_text", "Table 2", "the text-grounded paradigm (BIGRec) underperforms the other GR paradigms (NDCG@10)"),
    ("t2_emb", "Table 2", "SemEmb (HLLM) outperforms SemID (LC-Rec) (NDCG@10)"),
    ("f4_hist", "Figure 4", "a historical checkpoint as base beats the original base"),
    ("f4_neutral", "Figure 4", "a neutral (averaged) base beats the historical base (the original where no historical ran)"),
    ("f5_not1", "Figure 5", "lambda = 1 is not the best lambda in every domain (all users)"),
    ("f5_varies", "Figure 5", "the best lambda differs between domains (all users)"),
    ("t4_rho", "Table 4", "the non-active users' lambda* falls as the average interaction time gap rises"),
    ("t4_loo", "Table 4", "the leave-one-out prediction is closer to lambda* than the default lambda = 1"),
    ("t3_hat", "Table 3", "lambda_hat* (Eq. 11) beats lambda = 1 for all users (NDCG@10)"),
    ("world", "synthetic world", "each domain's non-active lambda* interval contains the world's own value"),
]


def _findings_lines(ctx: dict[str, Any]) -> list[str]:
    """One verdict line per paper finding, in the order of :data:`FINDINGS` (missing inputs said so)."""
    got = {f["key"]: f for f in ctx.get("findings", [])}
    lines = ["Each of the papers' findings, judged from a 95% interval of its effect: **holds** (the interval "
             "lies on the claimed side), **does not hold** (on the other side) or **inconclusive** (it "
             "straddles no effect). Evidence in parentheses; the sections below give the tables.", ""]
    for key, where, claim in FINDINGS:
        f = got.get(key)
        if f is None:
            lines.append(f"- *not evaluated* at 95%: {where}: {claim} (its inputs are missing; see the section)")
        else:
            lines.append(f"- **{f['verdict']}** at 95%: {where}: {claim} ({f['evidence']})")
    if ctx.get("cross_seeds"):
        lines.append(f"- _The cross-domain study (Figure 4) ran on training seed(s) "
                     f"{', '.join(map(str, ctx['cross_seeds']))} only._")
    return [*lines, ""]


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
