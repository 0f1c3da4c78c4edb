"""The report's tables (MMGRid Tables 2-4) as DataFrames with the registry ids behind each row.

Every builder returns ``(table, provenance)``: ``provenance`` maps a table row label to
the registry ids (checkpoint ids or recipe hashes) its cells were read from.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from mmgrid.config import GridConfig
from mmgrid.eval.table import baseline_cells, planned_rows
from mmgrid.runtime.plan import planned_ids
from mmgrid.stats import FAILS, HOLDS, INCONCLUSIVE, verdict
from mmgrid.sweep import evidence as ev
from mmgrid.sweep.results import checkpoint_metrics

if TYPE_CHECKING:  # pragma: no cover
    from mmgrid.registry.api import Registry
    from mmgrid.sweep.lambda_model import LambdaPrediction

# column order shared by the console table (mmgrid/eval/table.py) and report.md
METRICS = [("recall@10", "R@10"), ("ndcg@10", "N@10"), ("recall@20", "R@20"), ("ndcg@20", "N@20")]
PRIMARY = [("recall@10", "R@10"), ("ndcg@10", "N@10")]  # the metrics of the paired comparisons
REFERENCES = ("popular", "sasrec")  # Table 2's references: each paradigm is compared with them
Provenance = dict[str, list[str]]


def final_ids(cfg: GridConfig, registry: Registry, paradigm: str, variant: str = "default") -> dict[str, str]:
    """Domain -> id of the trained checkpoint of the last stage: the grid's planned one where it is
    stored (:func:`mmgrid.runtime.plan.planned_ids`), else the newest."""
    ck = registry.query(paradigm=paradigm, variant=variant, kind="trained", period=cfg.train.stages[-1])
    if ck.empty:
        return {}
    plan = planned_ids(cfg, registry)
    ck = planned_rows(ck, ["domain"], plan.id_set if plan is not None else None)
    return dict(zip(ck["domain"], ck["id"]))


def table2(cfg: GridConfig, registry: Registry, domains: list[str], scale: float = 100.0) -> tuple[pd.DataFrame, Provenance]:
    """MMGRid Table 2: rows paradigm (+ SASRec, MostPop), columns domain x R@10/R@20/N@10/N@20 (x ``scale``)."""
    rows = list(dict.fromkeys([*cfg.paradigms, "popular"]))
    cols = pd.MultiIndex.from_tuples([(d, short) for d in domains for _, short in METRICS])
    out = pd.DataFrame(index=rows, columns=cols, dtype=float)
    prov: Provenance = {}
    for p in rows:
        if p == "popular":
            ck = registry.query(paradigm="popular")
            if not ck.empty:
                ck = ck.sort_values("created").drop_duplicates("domain", keep="last")
            ids = dict(zip(ck["domain"], ck["id"])) if not ck.empty else {}
        else:
            ids = final_ids(cfg, registry, p)
        vals = checkpoint_metrics(registry, list(ids.values()), split=cfg.eval.split, group="all")
        for d in domains:
            cid = ids.get(d)
            if cid is None or cid not in vals.index:
                continue
            for m, short in METRICS:
                if m in vals.columns:
                    out.loc[p, (d, short)] = float(vals.loc[cid, m]) * scale
        prov[p] = [ids[d] for d in domains if d in ids]
    out = out.dropna(how="all")
    return out, {k: v for k, v in prov.items() if k in out.index}


def table2_ci(cfg: GridConfig, registry: Registry, domains: list[str]) -> tuple[pd.DataFrame, Provenance, ev.CheckpointValues]:
    """MMGRid Table 2 with intervals: cells ``mean [low, high]`` in %, over test users and training seeds.

    Rows: the grid's paradigms and ``popular``; columns domain x R@10 / N@10 / R@20 / N@20. Each
    cell pools the last-stage checkpoints of every training seed (the same users); most-popular
    has one checkpoint per domain. The cells are the console's (:func:`mmgrid.eval.table.baseline_cells`).

    Returns:
        (table of strings, provenance, the per-user values for the paired comparisons).
    """
    plan = planned_ids(cfg, registry)  # the grid's ids win over equal coords (an earlier identity)
    out, cv = baseline_cells(registry, cfg.paradigms, domains, period=cfg.train.stages[-1], split=cfg.eval.split,
                             planned=plan.id_set if plan is not None else None)
    prov: Provenance = {p: [i for d in domains for _, i in sorted(cv.ids.get(p, {}).get(d, {}).items())]
                        for p in out.index}
    return out, prov, cv


def has_intervals(table: pd.DataFrame) -> bool:
    """Whether any cell of a formatted table carries an interval."""
    return any(isinstance(v, str) and "[" in v for v in table.to_numpy().ravel())


def table2_comparisons(cfg: GridConfig, cv: ev.CheckpointValues, domains: list[str]) -> pd.DataFrame:
    """Each paradigm minus most-popular and minus SASRec, paired per user, per domain and metric.

    Columns: paradigm, reference, domain, metric, diff, ci_low, ci_high, p, p_holm (Holm over all
    comparisons of one metric), n_users, n_seeds.
    """
    rows = []
    for ref in REFERENCES:
        for p in cfg.paradigms:
            if p == ref:
                continue
            for d in domains:
                for m, _ in PRIMARY:
                    r = ev.paired_cells(cv, (p, d), (ref, d), m)
                    if r is not None:
                        rows.append({"paradigm": p, "reference": ref, "domain": d, "metric": m, **r})
    df = pd.DataFrame(rows)
    return ev.with_holm(df, by=["metric"]) if not df.empty else df


def comparison_table(comp: pd.DataFrame, domains: list[str], pretty: dict[str, str]) -> pd.DataFrame:
    """Rows ``paradigm - reference``, columns domains; cells ``+1.23 [0.40, 2.05] (p 0.004)`` in % points."""
    comp = comp.assign(row=[f"{pretty.get(a, a)} - {pretty.get(b, b)}" for a, b in zip(comp["paradigm"], comp["reference"])])
    out = pd.DataFrame(index=list(dict.fromkeys(comp["row"])), columns=domains, dtype=object)
    for r in comp.itertuples():
        out.loc[r.row, r.domain] = f"{ev.fmt_ci(r.diff, r.ci_low, r.ci_high, sign=True)} (p {ev.fmt_p(r.p_holm)})"
    return out


def table2_findings(cv: ev.CheckpointValues, domains: list[str], pretty: dict[str, str],
                    metric: str = "ndcg@10") -> list[dict[str, Any]]:
    """MMGRid section 4.2's Table 2 findings as verdicts (users of all domains pooled, seeds matched): the
    text-grounded paradigm underperforms, SemEmb beats SemID, and every GR paradigm beats most-popular.
    Each carries the ``intervals`` (fractions) its verdict was judged on."""
    out = []
    short = dict(METRICS).get(metric, metric)

    def line(a: str, b: str, direction: str) -> tuple[str, str, tuple[float, float]] | None:
        r = ev.pooled_pair(cv, a, b, domains, metric)
        if r is None:
            return None
        return (verdict(r["ci_low"], r["ci_high"], direction),
                f"{pretty.get(a, a)} - {pretty.get(b, b)} {short} {ev.fmt_ci(r['diff'], r['ci_low'], r['ci_high'], sign=True)}"
                f" pts, p {ev.fmt_p(r['p'])}, {r['n_users']} test examples x {r['n_seeds']} seed(s)",
                (float(r["ci_low"]), float(r["ci_high"])))

    for key, pairs in (("t2_text", [("text", "semid", "less"), ("text", "emb", "less")]),
                       ("t2_emb", [("emb", "semid", "greater")]),
                       ("t2_popular", [(p, "popular", "greater") for p in GR_PARADIGMS])):
        got = [x for x in (line(*ab) for ab in pairs) if x is not None]
        if got:
            out.append({"key": key, "verdict": _combine([v for v, _, _ in got]), "evidence": "; ".join(e for _, e, _ in got),
                        "intervals": [i for _, _, i in got]})
    return out


GR_PARADIGMS = ("text", "semid", "emb")  # the generative-recommendation paradigms of Table 2 (not SASRec, most-popular)


def _combine(verdicts: list[str]) -> str:
    """All hold: holds; any fails: does not hold; else inconclusive."""
    if verdicts and all(v == HOLDS for v in verdicts):
        return HOLDS
    if any(v == FAILS for v in verdicts):
        return FAILS
    return INCONCLUSIVE


def table3(temporal: pd.DataFrame, lambda_hat: pd.DataFrame, domains: list[str], scale: float = 100.0
           ) -> tuple[pd.DataFrame, Provenance]:
    """MMGRid Table 3: all users' metrics at lambda = 1 and at the predicted lambda_hat* per domain."""
    cols = pd.MultiIndex.from_tuples([(d, short) for d in domains for _, short in METRICS])
    out = pd.DataFrame(index=["lambda = 1", "lambda = lambda_hat*"], columns=cols, dtype=float)
    prov: Provenance = {"lambda = 1": [], "lambda = lambda_hat*": []}
    srcs = {"lambda = 1": temporal[np.isclose(temporal["lambda"].astype(float), 1.0)] if not temporal.empty else temporal,
            "lambda = lambda_hat*": lambda_hat}
    for label, df in srcs.items():
        if df is None or df.empty:
            continue
        df = df[df["group"] == "all"]
        for d in domains:
            sub = df[df["domain"] == d]
            for m, short in METRICS:
                hit = sub[sub["metric"] == m]
                if not hit.empty:
                    out.loc[label, (d, short)] = float(hit["value"].iloc[-1]) * scale
            prov[label] += list(dict.fromkeys(sub["recipe_hash"].dropna()))
    return out, prov


T3_ROWS = {"one": "lambda = 1", "hat": "lambda = lambda_hat*", "star": "lambda = lambda* (oracle)"}
T3_COMPARISONS = (("hat", "lambda_hat* - 1"), ("star", "lambda* - 1"))


def table3_ci(registry: Registry, pu: Any, t: Any, stars: pd.DataFrame, domains: list[str],
              hat_lambdas: dict[str, float] | None = None
              ) -> tuple[pd.DataFrame, Provenance, pd.DataFrame | None]:
    """MMGRid Table 3 with intervals and paired tests, from the per-user values of the temporal studies.

    Rows: all users at lambda = 1, at lambda_hat* (study ``lambda_hat``; the evaluated lambda nearest
    ``hat_lambdas``) and at the all-users lambda* (an oracle chosen on the same test users); columns
    domain x metric, cells ``mean [low, high]`` in %. The comparisons pair the same users and seeds:
    lambda_hat* - 1 and lambda* - 1 per domain (p per domain, Holm over the domains of each comparison and
    metric) and pooled over the domains' users (domain ``all domains``).

    Returns:
        (table, provenance, comparisons); an empty table when there are no per-user values.
    """
    cols = pd.MultiIndex.from_tuples([(d, short) for d in domains for _, short in METRICS])
    out = pd.DataFrame(index=list(T3_ROWS.values()), columns=cols, dtype=object)
    prov: Provenance = {v: [] for v in T3_ROWS.values()}
    comp: list[dict[str, Any]] = []
    star_all = {r.domain: float(r.lambda_star) for r in stars[stars["group"] == "all"].itertuples()}
    found = False
    for metric, short in METRICS:
        curves = ev.temporal_curves(registry, t.paradigm, t.variant, metric, pu=pu)
        hats = ev.temporal_curves(registry, t.paradigm, t.variant, metric, study="lambda_hat", pu=pu)
        pooled: dict[str, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {"hat": [], "star": []}
        for d in domains:
            c = curves.get((d, "all"))
            if c is None:
                continue
            h = hats.get((d, "all"))
            want = (hat_lambdas or {}).get(d)
            lam_hat = (float(h.lambdas[np.argmin(np.abs(h.lambdas - want))]) if want is not None
                       else float(h.lambdas[-1])) if h is not None else None
            points = {"one": (c, 1.0), "hat": (h, lam_hat), "star": (c, star_all.get(d))}
            for key, (cc, lam) in points.items():
                if cc is None or lam is None:
                    continue
                v = ev.at_lambda(cc, lam)
                if v is None:
                    continue
                found = True
                mean, lo, hi = ev.mean_ci(v[1], level=ev.LEVEL, n_resamples=ev.N_RESAMPLES, clusters=v[0])
                out.loc[T3_ROWS[key], (d, short)] = ev.fmt_ci(mean, lo, hi)
                if short == "R@10":
                    prov[T3_ROWS[key]].append(f"{d} at lambda {lam:.3f} (recipes of the temporal studies)")
            if (metric, short) not in PRIMARY:
                continue
            for key, label in T3_COMPARISONS:
                cc, lam = points[key]
                pair = ev.point_pair(cc, lam, c, 1.0) if cc is not None and lam is not None else None
                if pair is None:
                    continue
                pooled[key].append((pair[0], pair[1], pair[2].astype(np.int64) + domains.index(d) * 10**12))
                r = ev.paired_difference(pair[0], pair[1], level=ev.LEVEL, n_resamples=ev.N_RESAMPLES, clusters=pair[2])
                comp.append({"comparison": label, "domain": d, "metric": metric, "diff": r.diff, "ci_low": r.ci_low,
                             "ci_high": r.ci_high, "p": r.pvalue, "n_users": r.n_users, "n_seeds": r.n_seeds})
        for key, label in T3_COMPARISONS:
            ps = pooled[key]
            if ps and len({a.shape[0] for a, _, _ in ps}) == 1:
                r = ev.paired_difference(np.concatenate([a for a, _, _ in ps], axis=1),
                                         np.concatenate([b for _, b, _ in ps], axis=1), level=ev.LEVEL,
                                         n_resamples=ev.N_RESAMPLES, clusters=np.concatenate([c for _, _, c in ps]))
                comp.append({"comparison": label, "domain": "all domains", "metric": metric, "diff": r.diff,
                             "ci_low": r.ci_low, "ci_high": r.ci_high, "p": r.pvalue, "n_users": r.n_users,
                             "n_seeds": r.n_seeds})
    if not found:
        return pd.DataFrame(), {}, None
    df = pd.DataFrame(comp)
    if not df.empty:
        per = df[df["domain"] != "all domains"]
        df = pd.concat([ev.with_holm(per, by=["comparison", "metric"]),
                        df[df["domain"] == "all domains"].assign(p_holm=lambda x: x["p"])], ignore_index=True)
    return out.dropna(how="all"), {k: v for k, v in prov.items() if v}, df


def table3_comparison_table(comp: pd.DataFrame) -> pd.DataFrame:
    """Rows ``comparison (metric)``, columns domains (+ ``all domains``); cells ``diff [low, high] (p)``."""
    short = dict(METRICS)
    comp = comp.assign(row=[f"{c} ({short.get(m, m)})" for c, m in zip(comp["comparison"], comp["metric"])])
    cols = list(dict.fromkeys(comp["domain"]))
    cols = [c for c in cols if c != "all domains"] + (["all domains"] if "all domains" in cols else [])
    out = pd.DataFrame(index=list(dict.fromkeys(comp["row"])), columns=cols, dtype=object)
    for r in comp.itertuples():
        out.loc[r.row, r.domain] = f"{ev.fmt_ci(r.diff, r.ci_low, r.ci_high, sign=True)} (p {ev.fmt_p(r.p_holm)})"
    return out


def table3_findings(comp: pd.DataFrame, metric: str = "ndcg@10") -> list[dict[str, Any]]:
    """Table 3's finding: lambda_hat* beats lambda = 1 (users of every domain pooled)."""
    sub = comp[(comp["comparison"] == "lambda_hat* - 1") & (comp["metric"] == metric)]
    pooled = sub[sub["domain"] == "all domains"]
    if pooled.empty:
        return []
    r = pooled.iloc[0]
    per = sub[sub["domain"] != "all domains"]
    better = int(((per["ci_low"] > 0) & (per["p_holm"] < 0.05)).sum())
    worse = int(((per["ci_high"] < 0) & (per["p_holm"] < 0.05)).sum())
    return [{"key": "t3_hat", "verdict": verdict(r["ci_low"], r["ci_high"], "greater"),
             "intervals": [(float(r["ci_low"]), float(r["ci_high"]))],
             "evidence": f"{ev.fmt_ci(r['diff'], r['ci_low'], r['ci_high'], sign=True)} pts pooled over {len(per)} domains, "
                         f"p {ev.fmt_p(r['p'])}; Holm-significant: {better} better, {worse} worse"}]


def table4(pred: "LambdaPrediction", feature_labels: dict[str, str] | None = None,
           stars: pd.DataFrame | None = None) -> tuple[pd.DataFrame, Provenance]:
    """MMGRid Table 4 layout: domains as columns; users, p_active, lambda*, statistics, LOO prediction, Eq. 11.

    ``stars`` with ``ci_low``/``ci_high``/``on_edge`` (:func:`mmgrid.sweep.evidence.robust_stars`) adds
    the lambda* interval and edge rows.
    """
    labels = {"avg_gap_days": "Ave. interaction time gap (d)", **(feature_labels or {})}
    t = pred.table.set_index("domain")
    rows: dict[str, pd.Series] = {}
    for col, label in (("test_users", "# Users (test)"), ("active_users", "# Active users"),
                       ("non_active_users", "# Non-active users"), ("p_active", "Ratio of active users (p_active)")):
        if col in t.columns:
            rows[label] = t[col]
    rows[f"lambda* ({pred.group.replace('_', '-')} users)"] = t["lambda_star"]
    if stars is not None and "ci_low" in stars.columns:
        g = stars[stars["group"] == pred.group].set_index("domain").reindex(t.index)
        rows["lambda* 95% interval"] = pd.Series([f"[{a:.2f}, {b:.2f}]" if np.isfinite(a) and np.isfinite(b) else "-"
                                                  for a, b in zip(g["ci_low"], g["ci_high"])], index=t.index)
        rows["lambda* on the grid's edge"] = pd.Series(["yes" if bool(e) else "no" for e in g["on_edge"].fillna(False)],
                                                       index=t.index)
    for f in pred.features:
        rows[labels.get(f, f)] = t[f]
    if pred.loo is not None:
        loo = pred.loo.set_index("domain")
        rows["lambda* predicted (leave-one-out)"] = loo["lambda_pred"]
        rows["lambda_hat* (Eq. 11)"] = loo["lambda_hat"]
    out = pd.DataFrame(rows).T
    out.columns.name = None
    return out, {"all rows": ["prepared stats.parquet", *_star_sources(pred)]}


def _star_sources(pred: "LambdaPrediction") -> list[str]:
    return [f"temporal study: paradigm={pred.paradigm}, metric={pred.metric}"]


def regression_summary(pred: "LambdaPrediction") -> pd.DataFrame:
    """The fitted regression in one small table: coefficients, R^2, Spearman's rho, LOO error."""
    rows: dict[str, float] = {}
    if pred.fit is not None:
        rows["intercept"] = pred.fit.intercept
        for f, c in zip(pred.fit.features, pred.fit.coef):
            rows[f"slope on {f}"] = float(c)
        rows["R^2 (all domains)"] = pred.fit.r2
        rows["residual s.d."] = pred.fit.sigma
    if pred.loo is not None:
        rows["LOO mean |error|"] = float(pred.loo["abs_error"].mean())
    rows[f"Spearman rho ({pred.features[0]}, lambda*)"] = pred.rho
    rows["Spearman p (exact permutation)"] = pred.pvalue
    rows["domains"] = float(len(pred.table))
    return pd.DataFrame({"value": rows})


def cross_domain_table(rel: pd.DataFrame, errors: pd.DataFrame | None = None) -> tuple[pd.DataFrame, Provenance]:
    """Mean relative change (%) per paradigm x method x base (Figures 3-4 in one table).

    ``errors`` (:func:`mmgrid.sweep.evidence.joint_change_errors`) adds the 95% interval of the joint
    change at the best alpha.
    """
    if rel.empty:
        return pd.DataFrame(), {}
    g = rel.groupby(["paradigm", "method", "base_kind"])
    out = (g["rel_change"].mean() * 100).to_frame("mean % change")
    out["best alpha"] = g.apply(lambda s: s.groupby("alpha")["rel_change"].mean().idxmax() if s["alpha"].notna().any()
                                else np.nan, include_groups=False)
    if errors is not None and not errors.empty:
        e = errors.set_index(["paradigm", "method", "base_kind", "alpha"])
        cells = []
        for key, best in zip(out.index, out["best alpha"]):
            k = (*key, float(best)) if np.isfinite(best) else None
            if k is not None and k in e.index:
                r = e.loc[k]
                r = r.iloc[-1] if isinstance(r, pd.DataFrame) else r
                cells.append(f"{r['value']:+.2f} [{r['low']:+.2f}, {r['high']:+.2f}]")
            else:
                cells.append("-")
        out["% change at best alpha [95%]"] = cells
    out.index = [" / ".join(map(str, i)) for i in out.index]
    prov = {" / ".join(map(str, k)): sorted(set(v["recipe_hash"].dropna())) for k, v in g}
    return out, prov


def recipe_inputs(recipe_json: str | None) -> list[str]:
    """Input ids named by a recorded recipe."""
    try:
        return list(json.loads(recipe_json or "{}").get("inputs") or [])
    except ValueError:
        return []
