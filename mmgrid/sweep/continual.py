"""Lambda scaling against continual merging (``study="temporal_continual"``): which way of
combining a domain's checkpoints, as they arrived, serves the future window best?

For each domain and training seed the sequence is theta_0 -> theta_t1 -> theta_t2, theta_0
being the checkpoint t1 was fine-tuned from (the grid's pretrain stage; the paradigm's start
model when t1 is the first stage). Strategies, each a merge recipe evaluated in memory on the
test window (all / active / non-active users) with its per-user values recorded:

* ``lambda=1``: theta_t2 itself (MMGRid Eq. 10 at lambda = 1): the reference of every test;
* ``lambda*``: Eq. 10 at the temporal sweep's robust lambda* of the domain (all users; chosen
  on the test window itself, so an oracle: the verdict uses it only where lambda_hat* is not
  recorded, and says so), when the sweep was run;
* ``lambda_hat*``: Eq. 10 at the leave-one-out prediction of Eq. 11 (``mmgrid predict-lambda``),
  when it was run;
* continual merges over [theta_t1, theta_t2] with base theta_0: ``magmax`` (MagMax),
  ``opcm`` (OPCM), ``dop`` (DOP), and the plain baselines ``task_arithmetic`` (weights 1/2 each:
  the task vectors of sequential fine-tunes nest, so weights 1 would count tau_t1 twice) and
  ``ties`` (density 0.2, MMGRid's X).

Each strategy is compared with ``lambda=1`` on the same users: the mean difference, its bootstrap
interval (whole users, seeds kept) and a sign-flip randomization p (:func:`mmgrid.stats.paired_difference`),
Holm-corrected over all comparisons of a user group (:func:`mmgrid.stats.holm`). The verdict
pools every domain's users: "lambda scaling beats the best continual-merging baseline" compares
lambda_hat* with the continual merge of the highest pooled mean (chosen on the same data, which
favours the baseline: a conservative test of the claim).

Recorded like every study: one record per (strategy, group) with its recipe (inputs, base,
method, parameters, method version, eval settings; a re-run with the same recipe is a cache
hit), the replicate's seed, and ``extra.per_user``. Runs here or as one executor job per
(seed, domain) (:func:`evaluate_domain_job`), on every training seed or a subset
(:func:`evaluate_continual`'s ``seeds``; ``mmgrid demo`` runs it after the lambda* prediction).
The report reads it back (:func:`continual_study`) as Table 3's continual-merging rows
(:func:`tables`, in % per user group) and the finding "lambda scaling beats the best
continual-merging baseline" (:mod:`mmgrid.sweep.study_results`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from mmgrid.config import GridConfig, grid_from_dict
from mmgrid.data.dataset import load_prepared
from mmgrid.errors import ConfigError
from mmgrid.eval.ranking import record_evaluation
from mmgrid.eval.table import LEVEL, N_RESAMPLES, PerUser, align, fmt_ci, fmt_p, newest_rows, seed_number
from mmgrid.exec.base import Job
from mmgrid.merge.api import merge
from mmgrid.merge.methods import identity
from mmgrid.registry import Registry
from mmgrid.registry.errors import UnknownCheckpointError
from mmgrid.registry.names import hash_json
from mmgrid.runtime.gather import gather
from mmgrid.runtime.plan import planned_ids
from mmgrid.runtime.progress import progress as progress_bar
from mmgrid.stats import holm, mean_ci, paired_difference
from mmgrid.stats.verdict import INCONCLUSIVE, verdict, verdict_line
from mmgrid.sweep.evidence import robust_stars, temporal_curves
from mmgrid.sweep.evaluation import EvaluatorFactory, default_evaluator_factory, eval_key
from mmgrid.sweep.merged_eval import MergedEvaluators
from mmgrid.sweep.results import recorded
from mmgrid.sweep.temporal import periods, seeded_id, temporal_results

if TYPE_CHECKING:  # pragma: no cover
    from mmgrid.data.dataset import PreparedDataset
    from mmgrid.exec.base import Executor

STUDY = "temporal_continual"
REFERENCE = "lambda=1"
LAMBDA_STRATEGIES = ("lambda=1", "lambda*", "lambda_hat*")
#: the continual merges and plain baselines over [theta_t1, theta_t2] on theta_0: name -> (method, params)
CONTINUAL: dict[str, tuple[str, dict[str, Any]]] = {
    "magmax": ("magmax", {}),
    "opcm": ("opcm", {}),
    "dop": ("dop", {}),
    "task_arithmetic": ("task_arithmetic", {"weights": [0.5, 0.5]}),
    "ties": ("ties", {"density": 0.2}),
}
CLAIM = "lambda scaling beats the best continual-merging baseline"


def sequence_ids(cfg: GridConfig, registry: Registry, domain: str, seed: int) -> tuple[str, str, str]:
    """(theta_0, theta_t1, theta_t2) ids of one domain and seed: t1's parent, t1, t2."""
    t = cfg.sweeps.temporal
    t1, t2 = periods(cfg)
    coords = {"paradigm": t.paradigm, "domain": domain, "variant": t.variant, "kind": "trained"}
    plan = planned_ids(cfg, registry)  # the grid's ids: equal coords (an older identity) never make it ambiguous
    p1 = seeded_id(registry, {**coords, "period": t1}, seed, plan)
    p2 = seeded_id(registry, {**coords, "period": t2}, seed, plan)
    parents = {p.role: p.id for p in registry.get(p1).parents}
    p0 = parents.get("previous_stage") or parents.get("init")
    if p0 is None:
        raise UnknownCheckpointError(f"checkpoint {p1[:12]} ({domain}, {t1}, seed {seed}) has no parent it was "
                                     "fine-tuned from; the continual merges need the sequence's base theta_0")
    return p0, p1, p2


def lambdas_of(cfg: GridConfig, registry: Registry) -> dict[str, dict[str, float]]:
    """strategy -> domain -> lambda for ``lambda*`` (robust, all users) and ``lambda_hat*``, where recorded."""
    t = cfg.sweeps.temporal
    out: dict[str, dict[str, float]] = {"lambda*": {}, "lambda_hat*": {}}
    curves = {k: c for k, c in temporal_curves(registry, t.paradigm, t.variant, t.metric).items() if k[1] == "all"}
    if curves:
        stars = robust_stars(curves)
        out["lambda*"] = {r["domain"]: float(r["lambda_star"]) for r in stars.to_dict("records")
                          if math.isfinite(float(r["lambda_star"]))}
    hat = temporal_results(registry, paradigm=t.paradigm, variant=t.variant, study="lambda_hat")
    if not hat.empty:
        out["lambda_hat*"] = {d: float(g["lambda"].iloc[-1]) for d, g in hat.groupby("domain")}
    return out


def strategies(lams: dict[str, dict[str, float]], domain: str) -> dict[str, tuple[str, dict[str, Any], bool]]:
    """name -> (method, params, uses_base) of one domain."""
    out: dict[str, tuple[str, dict[str, Any], bool]] = {REFERENCE: ("temporal", {"lam": 1.0}, False)}
    for name in ("lambda*", "lambda_hat*"):
        if domain in lams.get(name, {}):
            out[name] = ("temporal", {"lam": round(float(lams[name][domain]), 9)}, False)
    out.update({k: (m, dict(p), True) for k, (m, p) in CONTINUAL.items()})
    return out


def recipe(p0: str, p1: str, p2: str, name: str, method: str, params: dict[str, Any], uses_base: bool,
           evaluation: dict[str, Any]) -> dict[str, Any]:
    """One strategy's recipe (its hash is the cache key; the method version is part of it)."""
    return {"strategy": name, **identity(method), "inputs": [p1, p2], "roles": ["t1", "t2"],
            "base": p0 if uses_base else None, "params": params, "eval": evaluation}


def evaluate_domain(cfg: GridConfig, registry: Registry, prepared: "PreparedDataset", domain: str, seed: int,
                    evaluator_factory: EvaluatorFactory | None = None, lams: dict[str, dict[str, float]] | None = None,
                    redo: bool = False) -> int:
    """Evaluate every strategy of one (domain, seed) not yet recorded; return how many were evaluated."""
    t = cfg.sweeps.temporal
    p0, p1, p2 = sequence_ids(cfg, registry, domain, seed)
    ev = eval_key(cfg)
    todo = strategies(lams if lams is not None else lambdas_of(cfg, registry), domain)
    recs = {k: recipe(p0, p1, p2, k, m, p, b, ev) for k, (m, p, b) in todo.items()}
    hashes = {k: hash_json(r) for k, r in recs.items()}
    done = set() if redo else recorded(registry, list(hashes.values()), STUDY)
    evals = MergedEvaluators(cfg, registry, prepared, evaluator_factory or default_evaluator_factory)
    meta = registry.get(p2).meta or {}
    n = 0
    for name, (method, params, uses_base) in todo.items():
        if hashes[name] in done:
            continue
        state = merge(method, [p1, p2], base=p0 if uses_base else None, registry=registry, **params)
        res = evals.evaluate_state(t.paradigm, domain, p2, state, {"added_rows": meta.get("added_rows")})
        extra = {"study": STUDY, "strategy": name, "paradigm": t.paradigm, "variant": t.variant, "domain": domain,
                 "eval_domain": domain, "method": method, "seed": seed,
                 "lambda": params.get("lam") if method == "temporal" else None}
        record_evaluation(registry, None, cfg.eval.split, res, recipe=recs[name], extra=extra)
        n += 1
    return n


def evaluate_domain_job(grid: dict[str, Any], domain: str, seed: int,
                        lams: dict[str, dict[str, float]] | None = None) -> int:
    """Executor entry point (JSON in, JSON out): one (domain, seed) of the study in a worker."""
    cfg = grid_from_dict(grid)
    reg = Registry.open(cfg.registry_root, index=False)
    return evaluate_domain(cfg, reg, load_prepared(cfg.prepared_dir), domain, seed, lams=lams)


def evaluate_continual(cfg: GridConfig, registry: Registry, prepared: "PreparedDataset", executor: "Executor | None" = None,
                       evaluator_factory: EvaluatorFactory | None = None, redo: bool = False,
                       seeds: list[int] | None = None) -> int:
    """Evaluate every strategy not yet recorded on every configured domain (``sweeps.temporal.domains`` or
    all) and training seed (``seeds``: a subset of ``train.seeds``; None: all), here or one executor job per
    (seed, domain); return how many (seed, domain) cells were run (a cached cell evaluates nothing)."""
    domains = list(cfg.sweeps.temporal.domains or prepared.domains)
    unknown = [d for d in domains if d not in prepared.domains]
    if unknown:
        raise ConfigError(f"sweeps.temporal.domains: {unknown} not in the prepared dataset ({prepared.domains}).")
    cells = [(seed, d) for seed in run_seeds(cfg, seeds) for d in domains]
    lams = lambdas_of(cfg, registry)
    if executor is None or evaluator_factory is not None:
        for seed, d in progress_bar(cells, desc="continual merges", unit="domain", leave=True):
            evaluate_domain(cfg, registry, prepared, d, seed, evaluator_factory, lams, redo)
    else:
        grid = cfg.to_dict()
        futs = [executor.submit(Job("mmgrid.sweep.continual:evaluate_domain_job",
                                    {"grid": grid, "domain": d, "seed": seed, "lams": lams},
                                    name=f"continual:{d}:seed={seed}")) for seed, d in cells]
        list(gather(futs, registry, "continual merges", unit="domain"))
    return len(cells)


def run_seeds(cfg: GridConfig, seeds: list[int] | None) -> list[int]:
    """The training seeds to run: ``seeds`` (each one of ``train.seeds``, else a named error), None: all."""
    have = list(cfg.train.seed_list)
    if seeds is None:
        return have
    bad = [s for s in seeds if s not in have]
    if bad or not seeds:
        raise ConfigError(f"continual merging: seeds {list(seeds)} must be a non-empty subset of the grid's training "
                          f"seeds {have} (train.seeds); give e.g. [{have[0]}] or leave them out for all.")
    return list(seeds)


def run_continual(cfg: GridConfig, registry: Registry, prepared: "PreparedDataset", executor: "Executor | None" = None,
                  evaluator_factory: EvaluatorFactory | None = None, redo: bool = False,
                  seeds: list[int] | None = None) -> "ContinualStudy":
    """Evaluate every strategy on every configured domain and training seed (:func:`evaluate_continual`)
    and return :func:`continual_study`."""
    evaluate_continual(cfg, registry, prepared, executor, evaluator_factory, redo, seeds)
    t = cfg.sweeps.temporal
    return continual_study(registry, t.paradigm, t.variant, t.metric)


# --------------------------------------------------------------------------- the result


@dataclass
class ContinualStudy:
    """The study's typed result.

    Attributes:
        metric: the metric compared (``sweeps.temporal.metric``, e.g. ndcg@10).
        rows: one row per (domain, group, strategy): mean, ci_low, ci_high (over users, seeds
            kept), diff / diff_low / diff_high (strategy - lambda=1 on the same users), p, p_holm
            (within the group), n_users, n_seeds; plus domain "all" rows pooling every domain.
        best_baseline: the continual merge with the highest pooled mean (all users).
        verdict: holds / does not hold / inconclusive for :data:`CLAIM` (lambda_hat* vs best_baseline;
            lambda*, flagged as an oracle, where lambda_hat* was not recorded).
        evidence: the pooled difference behind the verdict, as text.
        lambdas: strategy -> domain -> the lambda evaluated (lambda*, lambda_hat*).
        comparison: the numbers behind the verdict (empty where it could not be judged): ``strategy``
            (lambda_hat* or lambda*), ``baseline``, ``mean_a`` / ``mean_b`` (their pooled means), ``diff``,
            ``ci_low``, ``ci_high``, ``p``, ``n_domains``, ``n_seeds``, ``oracle`` (lambda* stood in).
        provenance: strategy -> the recipe hashes of the records read (``reg.results(recipe_hash=...)``).
        seeds: the training seeds whose records were read.
    """

    metric: str
    rows: pd.DataFrame
    best_baseline: str | None = None
    verdict: str = INCONCLUSIVE
    evidence: str = "no evaluations"
    lambdas: dict[str, dict[str, float]] = field(default_factory=dict)
    comparison: dict[str, Any] = field(default_factory=dict)
    provenance: dict[str, list[str]] = field(default_factory=dict)
    seeds: list[int] = field(default_factory=list)
    recorded_metrics: list[str] = field(default_factory=list)  # where nothing was read: the metrics that are recorded

    def verdict_line(self) -> str:
        return verdict_line(CLAIM, self.verdict, self.evidence, LEVEL)

    @property
    def empty(self) -> bool:
        return self.rows.empty


def _values(registry: Registry, metric: str, paradigm: str, variant: str) -> tuple[dict[tuple[str, str, str], tuple],
                                                                             dict[str, list[str]], dict]:
    """(domain, group, strategy) -> (users, values [n_seeds, n_columns], seeds) from the newest records,
    strategy -> the recipe hashes read, and strategy -> domain -> the lambda evaluated."""
    df = registry.results(study=STUDY, metric=metric)
    if df.empty:
        return {}, {}, {}
    for col, want in (("paradigm", paradigm), ("variant", variant)):
        if col in df.columns:
            df = df[df[col] == want]
    df = df.copy()
    df["seed_k"] = [seed_number(v) for v in df["seed"]] if "seed" in df.columns else -1
    df = newest_rows(df, ["domain", "group", "strategy", "seed_k"])
    pu = PerUser(registry)
    out = {}
    for key, g in df.groupby(["domain", "group", "strategy"], sort=True):
        m = pu.matrix(g.sort_values("seed_k"), metric)
        if m is not None:
            out[key] = (m[0], m[1], list(g.sort_values("seed_k")["seed_k"]))
    lams: dict[str, dict[str, float]] = {}
    if "lambda" in df.columns:  # the lambda each lambda strategy was evaluated at (first seed's record)
        sub = df[df["strategy"].isin(["lambda*", "lambda_hat*"]) & (df["group"] == "all")].sort_values("seed_k")
        for r in sub.drop_duplicates(["strategy", "domain"]).to_dict("records"):
            if r.get("lambda") is not None and math.isfinite(float(r["lambda"])):
                lams.setdefault(str(r["strategy"]), {})[str(r["domain"])] = float(r["lambda"])
    prov: dict[str, list[str]] = {}
    if "recipe_hash" in df.columns:
        for strat, g in df.groupby("strategy", sort=True):
            prov[str(strat)] = list(dict.fromkeys(str(h) for h in g["recipe_hash"].dropna()))
    return out, prov, lams


def _pair(a: tuple, b: tuple) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Seed- and user-matched values of two strategies: (users, va, vb)."""
    ua, va, sa = a
    ub, vb, sb = b
    seeds = [s for s in sa if s in sb]
    if not seeds:
        return None
    va = va[[sa.index(s) for s in seeds]]
    vb = vb[[sb.index(s) for s in seeds]]
    ia, ib = align(ua, ub)
    if ia.size == 0:
        return None
    return ua[ia], va[:, ia], vb[:, ib]


def continual_study(registry: Registry, paradigm: str, variant: str, metric: str = "ndcg@10") -> ContinualStudy:
    """Read the study back from the registry and compare every strategy with lambda = 1."""
    vals, prov, lams = _values(registry, metric, paradigm, variant)
    rows = []
    for (domain, group, strat), v in sorted(vals.items()):
        ref = vals.get((domain, group, REFERENCE))
        pair = _pair(v, ref) if ref is not None else None
        mean = float(v[1].mean())
        row = {"domain": domain, "group": group, "strategy": strat, "mean": mean, "ci_low": math.nan,
               "ci_high": math.nan, "diff": math.nan, "diff_low": math.nan, "diff_high": math.nan, "p": math.nan,
               "n_users": int(v[1].shape[1]), "n_seeds": int(v[1].shape[0])}
        if pair is not None:
            users, va, vb = pair
            _, lo, hi = mean_ci(va, level=LEVEL, n_resamples=N_RESAMPLES, clusters=users)
            row.update(ci_low=lo, ci_high=hi, **_vs_reference(strat, va, vb, users))
        rows.append(row)
    for group, strat in sorted({(g, s) for (_, g, s) in vals}):  # every domain's users pooled
        st = _stack(vals, group, strat, REFERENCE)
        if st is None:
            continue
        users, a, b = st
        mean, lo, hi = mean_ci(a, level=LEVEL, n_resamples=N_RESAMPLES, clusters=users)
        rows.append({"domain": "all", "group": group, "strategy": strat, "mean": mean, "ci_low": lo, "ci_high": hi,
                     **_vs_reference(strat, a, b, users), "n_users": int(a.shape[1]), "n_seeds": int(a.shape[0])})
    df = pd.DataFrame(rows, columns=["domain", "group", "strategy", "mean", "ci_low", "ci_high", "diff", "diff_low",
                                     "diff_high", "p", "n_users", "n_seeds"])
    df["p_holm"] = np.nan
    if df.empty:
        rec = registry.results(study=STUDY)
        return ContinualStudy(metric, df, recorded_metrics=sorted(set(rec["metric"])) if not rec.empty else [])
    for _, g in df[df["p"].notna()].groupby("group"):
        df.loc[g.index, "p_holm"] = holm(g["p"].to_numpy(dtype=float))
    seeds = sorted({int(s) for v in vals.values() for s in v[2]})
    study = ContinualStudy(metric, df, lambdas=lams, provenance=prov, seeds=seeds)
    _verdict(study, vals)
    return study


def _vs_reference(strat: str, a: np.ndarray, b: np.ndarray, users: np.ndarray) -> dict[str, float]:
    """diff, diff_low, diff_high and p of ``a - b`` (b: lambda = 1 on the same users); lambda = 1 itself: 0, no p
    (no resampling: each call draws from its own seeded generator, so skipping it changes no other number)."""
    if strat == REFERENCE:
        return {"diff": 0.0, "diff_low": 0.0, "diff_high": 0.0, "p": math.nan}
    r = paired_difference(a, b, level=LEVEL, n_resamples=N_RESAMPLES, clusters=users)
    return {"diff": r.diff, "diff_low": r.ci_low, "diff_high": r.ci_high, "p": r.pvalue}


def _stack(vals: dict, group: str, strat: str, other: str) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Both strategies' values over every domain both have, users of each domain kept apart (clusters)."""
    parts = []
    for (d, g, s), v in vals.items():
        if g != group or s != strat or (d, g, other) not in vals:
            continue
        pair = _pair(v, vals[(d, g, other)])
        if pair is not None:
            parts.append((d, pair))
    if not parts or len({p[1][1].shape[0] for p in parts}) != 1:
        return None
    dom_ids = {d: i for i, d in enumerate(sorted(d for d, _ in parts))}
    users = np.concatenate([p[0].astype(np.int64) + dom_ids[d] * 10**9 for d, p in parts])
    return users, np.concatenate([p[1] for _, p in parts], 1), np.concatenate([p[2] for _, p in parts], 1)


def _verdict(study: ContinualStudy, vals: dict) -> None:
    means = {}
    for strat in CONTINUAL:
        cols = [v[1].mean(0) for (d, g, s), v in vals.items() if g == "all" and s == strat]
        if cols:
            means[strat] = float(np.concatenate(cols).mean())
    if not means:
        study.evidence = "no continual merge evaluated"
        return
    best = max(means, key=means.__getitem__)
    study.best_baseline = best
    have = {s for (_, _, s) in vals}
    lam = next((x for x in ("lambda_hat*", "lambda*") if x in have), None)
    if lam is None:
        study.evidence = (f"best continual merge {best}; neither lambda_hat* nor lambda* evaluated (run `mmgrid sweep "
                          "temporal` and `mmgrid predict-lambda` before this study)")
        return
    caveat = ("" if lam == "lambda_hat*" else "; lambda_hat* not recorded, so lambda* stands in: it is chosen on "
              "this test window, an optimistic reading of lambda scaling")
    st = _stack(vals, "all", lam, best)
    if st is None:
        study.evidence = f"lambda_hat* and {best} share no domains, seeds and users"
        return
    users, a, b = st
    r = paired_difference(a, b, level=LEVEL, n_resamples=N_RESAMPLES, clusters=users)
    study.verdict = verdict(r.ci_low, r.ci_high, "greater")
    study.comparison = {"strategy": lam, "baseline": best, "mean_a": float(r.mean_a), "mean_b": float(r.mean_b),
                        "diff": float(r.diff), "ci_low": float(r.ci_low), "ci_high": float(r.ci_high),
                        "p": float(r.pvalue), "n_domains": len({int(u) // 10**9 for u in users}),
                        "n_seeds": int(r.n_seeds), "oracle": lam != "lambda_hat*"}
    study.evidence = (f"{study.metric}, all users of {len({u // 10**9 for u in users})} domains: {lam} "
                      f"{r.mean_a:.4f} vs {best} {r.mean_b:.4f}, difference {r.diff:+.4f} "
                      f"[{r.ci_low:+.4f}, {r.ci_high:+.4f}], p = {r.pvalue:.3g}, {r.n_seeds} seed(s){caveat}")


#: the report's row labels of the strategies, in the report's order
LABELS = {"lambda=1": "lambda = 1 (theta_t2)", "lambda*": "lambda* (oracle)", "lambda_hat*": "lambda_hat* (Eq. 11)",
          "magmax": "MagMax", "opcm": "OPCM", "dop": "DOP", "task_arithmetic": "task arithmetic (1/2 each)",
          "ties": "TIES (density 0.2)"}
POOLED = "all domains"


def tables(study: ContinualStudy, group: str, scale: float = 100.0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One user group's rows as the report shows them (values times ``scale``: % for the report).

    Returns:
        (means, differences): rows the strategies (:data:`LABELS`, in order), columns the domains and
        :data:`POOLED` (every domain's users); ``mean [low, high]``, and ``diff [low, high] (p Holm)`` of the
        strategy minus lambda = 1 on the same users ("reference" in lambda = 1's row). Empty frames
        when the group has no rows.
    """
    df = study.rows[study.rows["group"] == group] if not study.rows.empty else study.rows
    if df.empty:
        return pd.DataFrame(), pd.DataFrame()
    doms = sorted(d for d in df["domain"].unique() if d != "all")
    cols = doms + ([POOLED] if (df["domain"] == "all").any() else [])
    order = [s for s in LABELS if s in set(df["strategy"])] + sorted(set(df["strategy"]) - set(LABELS))
    index = [LABELS.get(s, s) for s in order]
    means = pd.DataFrame("-", index=index, columns=cols, dtype=object)
    diffs = pd.DataFrame("-", index=index, columns=cols, dtype=object)
    for r in df.to_dict("records"):
        row, col = LABELS.get(r["strategy"], r["strategy"]), POOLED if r["domain"] == "all" else r["domain"]
        means.loc[row, col] = fmt_ci(r["mean"], r["ci_low"], r["ci_high"], scale)
        if r["strategy"] == REFERENCE:
            diffs.loc[row, col] = "reference"
        elif math.isfinite(r["diff"]):
            diffs.loc[row, col] = (fmt_ci(r["diff"], r["diff_low"], r["diff_high"], scale, sign=True)
                                   + f" (p {fmt_p(r['p_holm'])})")
    return means, diffs


__all__ = ["CLAIM", "CONTINUAL", "ContinualStudy", "LABELS", "POOLED", "STUDY", "continual_study",
           "evaluate_continual", "evaluate_domain", "evaluate_domain_job", "run_continual", "tables"]
