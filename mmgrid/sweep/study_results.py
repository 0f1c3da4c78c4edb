"""The studies' results as typed records, computed once before anything is rendered.

``report.md`` (:mod:`mmgrid.render.report`), ``report.html`` (:mod:`mmgrid.render.report_html`) and the
``analysis/`` scripts render these records; none of them reads the registry or fits anything
itself. :func:`compute_study_results` runs each section's computation in order, passing the
results a section needs explicitly (the prediction takes the temporal study's lambda*), and
records per section one of: its result, the inputs it misses (:class:`MissingInputs`), or, with
``keep_going``, the error it failed with. Without ``keep_going`` a failing section raises
:class:`ReportSectionError` before anything is written.
"""

from __future__ import annotations

import math
import sys
import traceback
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import pandas as pd

from mmgrid.config import GridConfig
from mmgrid.errors import MmgridError
from mmgrid.eval.table import PRETTY, seed_ids
from mmgrid.runtime.plan import planned_ids
from mmgrid.stats import HOLDS, INCONCLUSIVE, contains, loo_error_vs_default, verdict
from mmgrid.sweep import continual as cm
from mmgrid.sweep import evidence as ev
from mmgrid.sweep import tables as tb
from mmgrid.sweep.crossdomain import cross_domain_results, relative_change
from mmgrid.sweep.diagnose import pairwise_diagnostics, task_vector_norms
from mmgrid.sweep.lambda_model import association, from_stars, stats_table, study_stars
from mmgrid.sweep.results import checkpoint_metrics
from mmgrid.sweep.study_records import (CONTINUAL_HOW, FINDINGS, FORMULA_LABEL, GLOSSARY,  # noqa: F401
                                        POPULATION_LABEL, SECTION_TITLES, BaselineResults, ContinualResults,
                                        CrossDomainResults, DiagnosticsResults,
                                        Finding, MissingInputs, ParetoResults, PredictionResults, ReportSectionError,
                                        Section, StudyResults, TemporalResults, with_mde, with_population)
from mmgrid.sweep.temporal import temporal_results

if TYPE_CHECKING:  # pragma: no cover
    from mmgrid.registry.api import Registry
    from mmgrid.data.dataset import PreparedDataset

# --------------------------------------------------------------------------- orchestration


def compute_study_results(cfg: GridConfig, registry: Registry, prepared: "PreparedDataset", diagnostics: bool = True,
                          keep_going: bool = False, on_section: Callable[[str], object] | None = None) -> StudyResults:
    """Compute every section's typed result from the registry.

    Args:
        cfg: the grid.
        registry: an open registry.
        prepared: the prepared dataset (domain statistics, task-vector diagnostics).
        diagnostics: compute Figure 2 and the pairwise diagnostics (loads every trained checkpoint).
        keep_going: record a failing section's error and go on; else raise :class:`ReportSectionError`.
        on_section: called with each section's title after it ran (progress).

    Returns:
        The sections in report order.
    """
    domains = list(prepared.domains)
    out = StudyResults(cfg, domains, registry_root=str(getattr(registry, "root", "")),
                       fingerprint=str(getattr(prepared, "fingerprint", "?")))
    pop = world_population_values(cfg)  # read once: every section's population values come from it
    steps: list[tuple[str, Callable[[], Any]]] = [("table2", lambda: baselines(cfg, registry, domains, pop))]
    if diagnostics:
        steps.append(("diagnostics", lambda: diagnostics_results(cfg, registry, prepared)))
    steps += [("cross_domain", lambda: cross_domain(cfg, registry)),
              ("temporal", lambda: temporal(cfg, registry, pop)),
              ("prediction", lambda: prediction(cfg, registry, prepared, out.sections["temporal"], pop)),
              ("pareto", lambda: pareto(cfg, registry))]
    for key, fn in steps:
        out.sections[key] = run_section(key, SECTION_TITLES[key], fn, keep_going)
        if on_section is not None:
            on_section(SECTION_TITLES[key])
    return out


def run_section(key: str, title: str, fn: Callable[[], Any], keep_going: bool) -> Section:
    """Run one section's computation: its result, its missing inputs, or (keep_going) its error."""
    try:
        return Section(key, title, result=fn())
    except MissingInputs as exc:
        return Section(key, title, missing=str(exc))
    except Exception as exc:  # noqa: BLE001 - named below: the section, the error and its traceback
        print(f"mmgrid report: section {title!r} failed:\n{traceback.format_exc()}", file=sys.stderr)
        if not keep_going:
            raise ReportSectionError(title, exc) from exc
        return Section(key, title, error=f"{type(exc).__name__}: {exc}")


def world_population_values(cfg: GridConfig) -> dict[str, Any]:
    """The population values of the grid's world and budget (``<data.root>/population.json``, written by
    ``mmgrid calibrate CONFIG --population``; :func:`mmgrid.sweep.calibration.population.read_world_population`),
    or {} where none is cached for this world and budget (or the grid is not one the calibration study can
    describe)."""
    # lazy: the calibration package (the replicate's grid, the executor's job) only when a report is computed
    from mmgrid.sweep.calibration.population import read_world_population

    if cfg.world is None:
        return {}  # not a synthetic world: no population to draw from
    try:
        return read_world_population(cfg) or {}
    except MmgridError as exc:  # e.g. a grid whose calibrate section is invalid: no population values, said so
        print(f"mmgrid report: no population values ({exc})", file=sys.stderr)
        return {}


def _pop_num(pop: dict[str, Any], key: str) -> float | None:
    v = pop.get(key)
    try:
        v = float(v)  # type: ignore[arg-type]  # a missing value (None) is caught below
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _pop_source(pop: dict[str, Any]) -> str:
    return f"{pop.get('worlds', '?')} world(s), {float(pop.get('user_scale') or 1):g}x the users"


def _seeds(cfg: GridConfig) -> list[int]:
    return list(getattr(cfg.train, "seed_list", None) or [cfg.train.seed])


# --------------------------------------------------------------------------- Table 2


def baselines(cfg: GridConfig, registry: Registry, domains: list[str], pop: dict[str, Any] | None = None) -> BaselineResults:
    """Table 2 with intervals, the paired comparisons with the references and the three findings (each
    inconclusive one with its MDE note; "beats most-popular" with its population value where ``pop`` has one)."""
    t2, prov, cv = tb.table2_ci(cfg, registry, domains)
    if t2.empty:
        raise MissingInputs("no evaluated last-stage checkpoints; run `mmgrid build` and `mmgrid eval`.")
    t2.index = [PRETTY.get(i, i) for i in t2.index]
    prov = {PRETTY.get(k, k): v for k, v in prov.items()}
    comp = tb.table2_comparisons(cfg, cv, domains)
    wide: dict[str, pd.DataFrame] = {}
    findings: list[Finding] = []
    if not comp.empty:
        for metric, short in tb.PRIMARY:
            sub = comp[comp["metric"] == metric]
            if not sub.empty:
                wide[short] = tb.comparison_table(sub, domains, PRETTY)
        findings = [with_mde(Finding(f["key"], f["verdict"], f["evidence"], "table2"), f["intervals"], 100.0, " pts",
                             "difference")
                    for f in tb.table2_findings(cv, domains, PRETTY)]
        findings = [with_population(f, _t2_population(cfg, pop or {})) if f.key == "t2_popular" else f
                    for f in findings]
    return BaselineResults(t2, prov, tb.has_intervals(t2), comp, wide, findings)


def _t2_population(cfg: GridConfig, pop: dict[str, Any]) -> str:
    """The population value of paradigm - most-popular (NDCG@10, users pooled) per calibrated paradigm."""
    each = {p: v for p, v in (pop.get("t2_each") or {}).items() if isinstance(v, dict) and v.get("value") is not None}
    if not each and _pop_num(pop, "t2_popular") is not None:
        each = {cfg.sweeps.temporal.paradigm: {"value": pop["t2_popular"], "se": pop.get("t2_popular_se")}}
    parts = []
    for p, v in each.items():
        se = _pop_num(v, "se")
        parts.append(f"{PRETTY.get(p, p)} - most-popular N@10 {float(v['value']) * 100:+.2f} pts"
                     + (f" (SE {se * 100:.2f})" if se is not None else ""))
    return ("; ".join(parts) + f" ({_pop_source(pop)})") if parts else ""


# --------------------------------------------------------------------------- Figure 2


def diagnostics_results(cfg: GridConfig, registry: Registry, prepared: PreparedDataset) -> DiagnosticsResults:
    """Task-vector L1 norms per paradigm, domain and period, and the pairwise conflict between domains."""
    paradigms = [p for p in cfg.paradigms if not registry.query(paradigm=p, kind="trained").empty]
    if not paradigms:
        raise MissingInputs("no trained checkpoints in the registry.")
    norms = task_vector_norms(cfg, registry, prepared, paradigms)
    t = norms.pivot_table(index=["paradigm", "domain"], columns="period", values="l1", aggfunc="last")
    t = t.reindex(columns=[p for p in cfg.train.stages if p in t.columns])
    t.index = [f"{p} / {d}" for p, d in t.index]
    prov: tb.Provenance = {f"{r.paradigm} / {r.domain}": [] for r in norms.itertuples()}
    for r in norms.itertuples():
        prov[f"{r.paradigm} / {r.domain}"] += [r.id, r.base_id]
    pairs = pairwise_diagnostics(cfg, registry, prepared, paradigms)
    return DiagnosticsResults(norms, t, {k: list(dict.fromkeys(v)) for k, v in prov.items()}, pairs)


# --------------------------------------------------------------------------- Figures 3-4


def cross_domain(cfg: GridConfig, registry: Registry) -> CrossDomainResults:
    """The cross-domain study: relative changes, joint-change intervals, summary and base orderings."""
    df = cross_domain_results(registry)
    if df.empty:
        raise MissingInputs("no cross-domain results; run `mmgrid sweep cross-domain CONFIG`.")
    metric = cfg.sweeps.cross_domain.metric
    rel = relative_change(df, metric=metric)
    if rel.empty:
        raise MissingInputs("cross-domain results hold no merged models with a baseline.")
    cells, pu = ev.cross_domain_cells(registry, metric)
    seeds = sorted({int(x) for x in cells["seed"].dropna()}) if "seed" in cells.columns else []
    rel["alpha"] = pd.to_numeric(rel["alpha"], errors="coerce")
    heat = rel[(rel["base_kind"].isin(["original", "none"])) & (rel["alpha"].isna() | np.isclose(rel["alpha"], 0.5))]
    errors = ev.joint_change_errors(cells, pu, metric)
    summary, prov = tb.cross_domain_table(rel, errors)
    order = ev.with_holm(ev.base_orderings(cells, pu, metric))
    findings: list[Finding] = []
    if not order.empty:
        for key, better, worse in (("f4_hist", "historical", "original"), ("f4_neutral", "neutral", "historical"),
                                   ("f4_neutral", "neutral", "original")):
            sub = order[(order["better"] == better) & (order["worse"] == worse)]
            if any(f.key == key for f in findings) or sub.empty:
                continue  # neutral - original stands in only where no historical base was run
            f = Finding(key, tb._combine([verdict(r.ci_low, r.ci_high, "greater") for r in sub.itertuples()]),
                        "; ".join(f"{r.paradigm}/{r.method} {better} - {worse} "
                                  f"{ev.fmt_ci(r.diff, r.ci_low, r.ci_high, sign=True)} pts, p {ev.fmt_p(r.p_holm)}"
                                  for r in sub.itertuples()), "cross_domain")
            findings.append(with_mde(f, [(r.ci_low, r.ci_high) for r in sub.itertuples()], 100.0, " pts", "difference"))
    return CrossDomainResults(metric, rel, heat, errors, summary, prov, order, _merged_cells(rel, cells), seeds,
                              _seeds(cfg), findings)


def _merged_cells(rel: pd.DataFrame, cells: pd.DataFrame) -> pd.DataFrame:
    """Each merged model's value on each evaluated domain (in %, with its recorded 95% interval) beside the
    domain's own t2 checkpoint and the relative change."""
    ci = cells.dropna(subset=["recipe_hash"]).drop_duplicates(["recipe_hash", "eval_domain"], keep="last")
    ci = ci.set_index(["recipe_hash", "eval_domain"])[["ci_low", "ci_high"]]
    out = rel.join(ci, on=["recipe_hash", "eval_domain"])
    return pd.DataFrame({"paradigm": out["paradigm"], "pair": out["pair"], "method": out["method"],
                         "base": out["base_kind"], "alpha": out["alpha"], "evaluated on": out["eval_domain"],
                         "merged (%)": out["value"] * 100, "low": out["ci_low"] * 100, "high": out["ci_high"] * 100,
                         "own t2 (%)": out["baseline"] * 100, "% change": out["rel_change"] * 100,
                         "recipe": out["recipe_hash"]}).reset_index(drop=True)


# --------------------------------------------------------------------------- Figure 5


def lam_text(v: float, lo: float, hi: float, edge: Any = False) -> str:
    """``0.75 [0.50, 1.00] (edge)``: lambda* with its interval and edge flag; '-' when undefined."""
    if v is None or not math.isfinite(v):
        return "-"
    text = f"{v:.2f}" + (f" [{lo:.2f}, {hi:.2f}]" if math.isfinite(lo) and math.isfinite(hi) else "")
    return text + (" (edge)" if bool(edge) else "")


def temporal(cfg: GridConfig, registry: Registry, pop: dict[str, Any] | None = None) -> TemporalResults:
    """The temporal study: curves with bands, lambda* per (domain, group) and the findings of Figure 5.

    ``pop``: the world's population values (:func:`world_population_values`; None: read them here)."""
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
        stars = stars.copy()
        for c in ("ci_low", "ci_high", "edge_share"):
            stars[c] = np.nan
        lams = np.sort(res["lambda"].astype(float).unique())
        stars["on_edge"] = np.isclose(stars["lambda_star"], lams[0]) | np.isclose(stars["lambda_star"], lams[-1])
        band = None
    cells = stars.assign(cell=[lam_text(r.lambda_star, r.ci_low, r.ci_high, r.on_edge) for r in stars.itertuples()])
    wide = cells.pivot(index="domain", columns="group", values="cell")
    wide = wide.reindex(columns=[g for g in ("all", "active", "non_active") if g in wide.columns])
    prov = {d: list(dict.fromkeys(res.loc[res["domain"] == d, "recipe_hash"])) for d in wide.index}
    seeds = sorted({s for c in curves.values() for s in c.seeds}) if curves else []
    edge = [(r.domain, r.group) for r in stars[stars["on_edge"].astype(bool)].itertuples()]
    pop = world_population_values(cfg) if pop is None else pop
    findings, world, truth, source = _temporal_findings(cfg, stars, pop)
    return TemporalResults(t.paradigm, t.metric, t.smooth, res, stars, curves, band, seeds, wide, prov, edge, world,
                           truth, findings, pu, source)


def world_lambdas(cfg: GridConfig, pop: dict[str, Any]) -> tuple[dict[str, float], str]:
    """The world's own non-active lambda* per domain and where it comes from: the population value
    (``pop["lambda_star"]``) where computed for this world and budget, else the labelled fallback formula
    :func:`mmgrid.sweep.evidence.analytic_lambdas` (the category mix alone)."""
    popd = {str(d): float(g["non_active"]) for d, g in (pop.get("lambda_star") or {}).items()
            if isinstance(g, dict) and g.get("non_active") is not None}
    if popd:
        return popd, POPULATION_LABEL.format(worlds=pop.get("worlds", "?"), scale=float(pop.get("user_scale") or 1))
    truth = ev.analytic_lambdas(cfg.data.root)
    return truth, (FORMULA_LABEL if truth else "")


def _width_pairs(rows: pd.DataFrame) -> list[tuple[float, float]]:
    """For "the best lambda differs": the interval of each pair's difference a normal approximation implies,
    width sqrt(w_a^2 + w_b^2) (independent domains), centred on 0 (only its width is used)."""
    w = (rows["ci_high"] - rows["ci_low"]).to_numpy(float)
    out = []
    for i in range(len(w)):
        for j in range(i + 1, len(w)):
            h = math.hypot(w[i], w[j]) / 2
            out.append((-h, h))
    return out


def _temporal_findings(cfg: GridConfig, stars: pd.DataFrame, pop: dict[str, Any]
                       ) -> tuple[list[Finding], pd.DataFrame | None, dict, str]:
    out: list[Finding] = []
    al = stars[stars["group"] == "all"]
    if not al.empty and al["ci_low"].notna().any():
        # a claim about *some* domain: judged on each domain's interval at the family level (Bonferroni over the
        # domains), so that it errs at most 5% of the time where every domain's lambda* is 1
        off = al[(al["fw_low"] > 1.0) | (al["fw_high"] < 1.0)]
        lvl = float(al["fw_level"].iloc[0])
        f = Finding("f5_not1", HOLDS if len(off) else INCONCLUSIVE,
                    f"{len(off)} of {len(al)} domains' lambda* interval (all users; {lvl:.1%} each, Bonferroni over "
                    f"the {len(al)} domains) excludes 1"
                    + (": " + ", ".join(f"{r.domain} {lam_text(r.lambda_star, r.fw_low, r.fw_high)}"
                                        for r in off.itertuples()) if len(off) else ""), "temporal")
        f = with_mde(f, list(zip(al["fw_low"], al["fw_high"])), what="lambda* - 1")
        out.append(with_population(f, _f5_population(pop)))
        disjoint = [(a.domain, b.domain) for a in al.itertuples() for b in al.itertuples()
                    if a.domain < b.domain and (a.ci_high < b.ci_low or b.ci_high < a.ci_low)]
        f = Finding("f5_varies", HOLDS if disjoint else INCONCLUSIVE,
                    f"{len(disjoint)} pair(s) of domains with disjoint lambda* intervals (all users)"
                    + (f", e.g. {disjoint[0][0]} vs {disjoint[0][1]}" if disjoint else ""), "temporal")
        f = with_mde(f, _width_pairs(al.dropna(subset=["ci_low", "ci_high"])), what="difference of two domains' lambda*")
        out.append(with_population(f, _f5_varies_population(pop)))
    truth, source = world_lambdas(cfg, pop)
    na = stars[(stars["group"] == "non_active") & stars["domain"].isin(list(truth))]
    world = None
    if truth and not na.empty and na["ci_low"].notna().any():
        rows, verdicts = {}, []
        for r in na.itertuples():
            value = truth[r.domain]
            outside = value > r.grid_high + 1e-9 or value < r.grid_low - 1e-9 if hasattr(r, "grid_high") else False
            v = INCONCLUSIVE if outside and r.on_edge else contains(r.ci_low, r.ci_high, value)
            verdicts.append(v)
            rows[r.domain] = {("population lambda*" if source.startswith("population") else "formula lambda"): f"{value:.2f}",
                              "lambda* non-active": lam_text(r.lambda_star, r.ci_low, r.ci_high, r.on_edge),
                              "contains it": v + (" (beyond the grid)" if outside else "")}
        world = pd.DataFrame(rows).T
        n_in = sum(v == HOLDS for v in verdicts)
        f = Finding("world", tb._combine(verdicts), f"{n_in} of {len(verdicts)} domains' intervals contain it ("
                    + ("the population value" if source.startswith("population") else
                       "the formula for the category mix alone; no population value computed") + ")", "temporal")
        out.append(with_mde(f, list(zip(na["ci_low"], na["ci_high"])), what="lambda* - world's value"))
    return out, world, truth, source


def _f5_population(pop: dict[str, Any]) -> str:
    v = _pop_num(pop, "f5_not1")
    if v is None:
        return ""
    per = {d: g.get("all") for d, g in (pop.get("lambda_star") or {}).items() if isinstance(g, dict)}
    each = ", ".join(f"{d} {float(x):.2f}" for d, x in sorted(per.items()) if x is not None)
    return f"max |lambda* - 1| (all users) = {v:.2f}" + (f"; lambda*: {each}" if each else "") + f" ({_pop_source(pop)})"


def _f5_varies_population(pop: dict[str, Any]) -> str:
    """The population value of "the best lambda differs between domains": the range of the population all-users
    lambda* over domains (the largest pairwise difference)."""
    per = [float(g["all"]) for g in (pop.get("lambda_star") or {}).values()
           if isinstance(g, dict) and g.get("all") is not None]
    if len(per) < 2:
        return ""
    return f"max |lambda*_a - lambda*_b| (all users) = {max(per) - min(per):.2f} ({_pop_source(pop)})"


# --------------------------------------------------------------------------- Tables 3-4


def prediction(cfg: GridConfig, registry: Registry, prepared: PreparedDataset, temporal_section: Section,
               pop: dict[str, Any] | None = None) -> PredictionResults:
    """The lambda* regression fitted on the temporal study's lambda* (no second fit), Table 4 and Table 3;
    rho's finding with its population value where ``pop`` has one."""
    if temporal_section.error is not None:
        raise MissingInputs("the temporal section failed (see Figure 5).")
    tr: TemporalResults | None = temporal_section.result
    if tr is None:
        raise MissingInputs("no temporal results (see Figure 5).")
    t, pl = cfg.sweeps.temporal, cfg.sweeps.predict_lambda
    pred = from_stars(tr.stars[["domain", "group", "lambda_star"]], stats_table(prepared), t.paradigm, t.metric,
                      pl.group, list(pl.features))
    pred.curves, pred.smooth = tr.curves or {}, t.smooth
    feature = pred.features[0]
    domains = [str(d) for d in pred.table["domain"]]
    reps = ev.star_replicates(tr.curves, domains, pred.group, t.smooth) if tr.curves else None
    t4, prov4 = tb.table4(pred, stars=tr.stars)
    findings: list[Finding] = []
    sp = lo = None
    if len(pred.table) >= 3:
        x, y = pred.table[feature].to_numpy(float), pred.table["lambda_star"].to_numpy(float)
        sp = association(pred)  # the same numbers `mmgrid predict-lambda` prints
        if math.isfinite(sp.rho):
            ci = f" [{sp.ci_low:.2f}, {sp.ci_high:.2f}]" if math.isfinite(sp.ci_low) else " (no interval: no per-user values)"
            f = Finding("t4_rho", verdict(sp.ci_low, sp.ci_high, "less"),
                        f"rho({feature}, lambda*) = {sp.rho:.2f}{ci}, exact p {sp.pvalue:.3g}, {sp.n} domains", "prediction")
            rho = _pop_num(pop or {}, "t4_rho")
            f = with_population(f, f"rho = {rho:+.2f} ({_pop_source(pop or {})})" if rho is not None else "")
            findings.append(with_mde(f, [(sp.ci_low, sp.ci_high)], what="rho"))
        else:
            sp = None
        if pred.loo is not None:
            lo = loo_error_vs_default(x, y, reps, default=1.0)
            ci = f" [{lo.ci_low:+.3f}, {lo.ci_high:+.3f}]" if math.isfinite(lo.ci_low) else ""
            findings.append(with_mde(Finding("t4_loo", verdict(lo.ci_low, lo.ci_high, "less"),
                                             f"MAE(LOO) - MAE(lambda = 1) = {lo.diff:+.3f}{ci}", "prediction"),
                                     [(lo.ci_low, lo.ci_high)], what="MAE difference"))
    ci_cols = tr.stars[tr.stars["group"] == pred.group][[c for c in ("domain", "ci_low", "ci_high") if c in tr.stars.columns]]
    plot_table = pred.table.merge(ci_cols, on="domain", how="left") if "ci_low" in ci_cols.columns else pred.table
    hat = temporal_results(registry, paradigm=pred.paradigm, variant=t.variant, study="lambda_hat")
    used = {} if hat.empty else {str(d): float(v) for d, v in hat.drop_duplicates("domain").set_index("domain")["lambda"].items()}
    t3, prov3, comp = tb.table3_ci(registry, tr.pu, t, tr.stars, sorted(domains), pred.lambda_hat())
    if t3.empty:
        t3, prov3 = tb.table3(tr.results, hat, sorted(domains))
    if comp is not None and not comp.empty:
        findings += [with_mde(Finding(f["key"], f["verdict"], f["evidence"], "prediction"), f["intervals"], 100.0, " pts",
                              "difference") for f in tb.table3_findings(comp)]
    cont = continual_results(cfg, registry)
    findings += continual_findings(cont)
    return PredictionResults(pred, feature, t4, prov4, tb.regression_summary(pred), sp, lo, plot_table, used,
                             t3, prov3, comp, findings, cont)


def continual_results(cfg: GridConfig, registry: Registry) -> ContinualResults:
    """Table 3's continual-merging rows: the study read back from the registry (:func:`mmgrid.sweep.continual.
    continual_study`, on ``sweeps.temporal``'s paradigm, variant and metric), per user group its means and
    differences to lambda = 1 in %, the recipe hashes behind each row, and the pooled all-users rows; with
    :data:`CONTINUAL_HOW` in ``how`` when nothing is recorded."""
    t = cfg.sweeps.temporal
    study = cm.continual_study(registry, t.paradigm, t.variant, t.metric)
    if study.empty:
        return ContinualResults(t.metric, study, {}, {}, [], _seeds(cfg), how=CONTINUAL_HOW)
    groups = {g: cm.tables(study, g) for g in ("all", "active", "non_active") if g in set(study.rows["group"])}
    prov = {cm.LABELS.get(k, k): v for k, v in study.provenance.items()}
    rows = study.rows[(study.rows["domain"] == "all") & (study.rows["group"] == "all")]
    pooled = pd.DataFrame({"strategy": [cm.LABELS.get(x, x) for x in rows["strategy"]],
                           **{c: rows[c].to_numpy(float) * 100 for c in ("mean", "ci_low", "ci_high", "diff",
                                                                        "diff_low", "diff_high")},
                           "p_holm": rows["p_holm"].to_numpy(float)})
    order = {lab: i for i, lab in enumerate(cm.LABELS.values())}
    pooled = pooled.sort_values("strategy", key=lambda c: c.map(lambda x: order.get(x, len(order)))).reset_index(drop=True)
    return ContinualResults(t.metric, study, groups, prov, list(study.seeds), _seeds(cfg), pooled=pooled)


def continual_findings(r: ContinualResults) -> list[Finding]:
    """The finding "lambda scaling beats the best continual-merging baseline" (none when nothing is recorded):
    the study's verdict with its numbers in % points and, when inconclusive, its MDE note."""
    if r.empty:
        return []
    st, c = r.study, r.study.comparison
    if not c:
        return [with_mde(Finding("t3_continual", st.verdict, st.evidence, "prediction"), [])]
    short, label = dict(tb.METRICS).get(r.metric, r.metric), cm.LABELS
    caveat = ("; lambda_hat* is not recorded (`mmgrid predict-lambda RUN` records it on 3 or more domains, then "
              "`mmgrid sweep continual RUN`), so lambda*, chosen on this test window, stands in: an optimistic reading "
              "of lambda scaling" if c["oracle"] else "")
    ev_text = (f"{short}, all users of {c['n_domains']} domain(s) pooled, {c['n_seeds']} seed(s): "
               f"{label.get(c['strategy'], c['strategy'])} {c['mean_a'] * 100:.2f} vs the best continual merge, "
               f"{label.get(c['baseline'], c['baseline'])}, {c['mean_b'] * 100:.2f}; difference "
               f"{ev.fmt_ci(c['diff'], c['ci_low'], c['ci_high'], sign=True)} pts, p {ev.fmt_p(c['p'])}{caveat}")
    return [with_mde(Finding("t3_continual", st.verdict, ev_text, "prediction"), [(c["ci_low"], c["ci_high"])],
                     100.0, " pts", "difference")]


# --------------------------------------------------------------------------- Orbit


def pareto(cfg: GridConfig, registry: Registry) -> ParetoResults:
    """The Orbit Pareto points of the paradigms that have a regularized variant."""
    pts = pareto_points(cfg, registry)
    regularized = set(pts.loc[pts["regularizer"] != "none", "paradigm"]) if not pts.empty else set()
    pts = pts[pts["paradigm"].isin(regularized)]
    if pts.empty or pts["regularizer"].nunique() < 2:
        raise MissingInputs("needs evaluated variants with at least two regularizers (none, l2_init, soup_to_go, "
                            "orbit) and text-retention results; the quick demo builds none.")
    return ParetoResults(pts.reset_index(drop=True))


PARETO_COLUMNS = ["variant", "regularizer", "paradigm", "text_retention", "text_retention_low", "text_retention_high",
                  "recall@10", "recall@10_low", "recall@10_high", "ids"]


def _mean_interval(means: np.ndarray, lows: np.ndarray, highs: np.ndarray) -> tuple[float, float, float]:
    """Mean over domains with a 95% interval from the domains' own intervals (independent domains, normal
    approximation: s.e. of the mean = sqrt(sum s.e._d^2) / n, s.e._d = half-width_d / 1.96)."""
    m = float(np.mean(means))
    ok = np.isfinite(lows) & np.isfinite(highs)
    if not ok.all():
        return m, float("nan"), float("nan")
    se = math.sqrt(float(np.sum(((highs - lows) / (2 * 1.959964)) ** 2))) / len(means)
    return m, m - 1.959964 * se, m + 1.959964 * se


def pareto_points(cfg: GridConfig, registry: Registry) -> pd.DataFrame:
    """Per variant x paradigm: the mean over domains of text retention and test Recall@10 (all users, in %),
    each with a 95% interval combined from the domains' own (:func:`_mean_interval`), on the first
    training seed's checkpoints (the replicate whose text retention is measured)."""
    rows = []
    for v in cfg.variants:
        for p in v.paradigms or cfg.paradigms:
            ids = _retention_ids(cfg, registry, p, v.name)
            if not ids:
                continue
            rec = checkpoint_metrics(registry, ids, split=cfg.eval.split, group="all")
            ret = checkpoint_metrics(registry, ids, split="lm_heldout", group="all")
            if rec.empty or ret.empty or "text_loss" not in ret.columns or "recall@10" not in rec.columns:
                continue
            base = ret["base_text_loss"].to_numpy(float) if "base_text_loss" in ret.columns else np.nan
            loss = ret["text_loss"].to_numpy(float)
            lo_l, hi_l = _ci_columns(registry, list(ret.index), "lm_heldout", "text_loss")
            # retention exp(base - loss) falls as the loss rises: the loss's high end is retention's low end
            t = _mean_interval(np.exp(base - loss), np.exp(base - hi_l), np.exp(base - lo_l))
            lo_r, hi_r = _ci_columns(registry, list(rec.index), cfg.eval.split, "recall@10")
            r = _mean_interval(rec["recall@10"].to_numpy(float) * 100, lo_r * 100, hi_r * 100)
            rows.append({"variant": v.name, "regularizer": v.regularizer, "paradigm": p, "text_retention": t[0],
                         "text_retention_low": t[1], "text_retention_high": t[2], "recall@10": r[0],
                         "recall@10_low": r[1], "recall@10_high": r[2], "ids": ids})
    return pd.DataFrame(rows, columns=PARETO_COLUMNS)


def _retention_ids(cfg: GridConfig, registry: Registry, paradigm: str, variant: str) -> list[str]:
    """Per domain, the last-stage checkpoint of the grid's first training seed (text retention is measured
    on that replicate only, ``mmgrid.eval.grid.evaluate_final``), else of the lowest seed there is."""
    out = []
    plan = planned_ids(cfg, registry)  # the grid's ids win over equal coords (an earlier identity)
    planned = plan.id_set if plan is not None else None
    for by_seed in seed_ids(registry, paradigm, cfg.train.stages[-1], variant, planned).values():
        out.append(by_seed.get(cfg.train.seed, next(iter(by_seed.values()))))
    return out


def _ci_columns(registry: Registry, ids: list[str], split: str, metric: str) -> tuple[np.ndarray, np.ndarray]:
    """The recorded 95% interval of ``metric`` for each id's newest own evaluation, in ``ids`` order (NaN where none)."""
    res = registry.results(id=list(ids), split=split, group="all", metric=metric)
    nan = np.full(len(ids), np.nan)
    if res.empty or not {"ci_low", "ci_high"} <= set(res.columns):
        return nan, nan.copy()
    if "study" in res.columns:
        res = res[res["study"].isna()]
    res = res.sort_values("created").drop_duplicates("id", keep="last").set_index("id").reindex(ids)
    return res["ci_low"].to_numpy(float), res["ci_high"].to_numpy(float)
