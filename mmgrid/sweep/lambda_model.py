"""lambda* prediction (``mmgrid predict-lambda``): MMGRid section 5.2, Eq. 11, Tables 3-4.

From the temporal study's results, lambda* per domain and user group; a leave-one-out
linear regression (scikit-learn) from domain statistics (default: the average
interaction time gap, ``avg_gap_days``) to the non-active users' lambda*; each left-out
prediction blended with p_active by Eq. 11 into lambda_hat*. For a new domain that has
only statistics, :func:`answer_new_domain` says which lambda to use with the fitted
model's prediction interval.
"""

from __future__ import annotations

import math

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from mmgrid.config import GridConfig
from mmgrid.errors import ConfigError
from mmgrid.sweep.regression import LinearFit, NewDomainAnswer, fit_linear, leave_one_out, predict_new_domain
from mmgrid.stats import spearman_with_interval
from mmgrid.sweep import evidence as ev
from mmgrid.sweep.selection import lambda_stars
from mmgrid.sweep.temporal import COLUMNS, DomainSweep, run_cells, sweep_domain, temporal_results

if TYPE_CHECKING:  # pragma: no cover
    from mmgrid.registry.api import Registry
    from mmgrid.data.dataset import PreparedDataset


@dataclass
class LambdaPrediction:
    """Everything the prediction found (the report's Tables 3-4 and Figure 5 read it)."""

    paradigm: str
    metric: str
    group: str
    features: list[str]
    stars: pd.DataFrame  # domain, group, lambda_star, best (every group)
    table: pd.DataFrame  # one row a domain: statistics + lambda_star of ``group``
    loo: pd.DataFrame | None  # leave-one-out predictions and Eq. 11 (None with too few domains)
    fit: LinearFit | None  # fitted on every domain (None with too few)
    rho: float  # Spearman's rho between features[0] and lambda*
    pvalue: float
    notes: list[str] = field(default_factory=list)
    evaluated: pd.DataFrame | None = None  # evaluations at lambda_hat* (Table 3), when run
    curves: dict = field(default_factory=dict)  # per-user lambda curves behind ``stars`` (intervals); {} without
    smooth: int = 1  # the smoothing window lambda* was taken with

    @property
    def direction(self) -> str:
        """'falls', 'rises' or 'undetermined': how lambda* moves as features[0] rises."""
        if not np.isfinite(self.rho) or self.rho == 0:
            return "undetermined"
        return "falls" if self.rho < 0 else "rises"

    def lambda_hat(self) -> dict[str, float]:
        """Domain -> the leave-one-out lambda_hat* (Eq. 11)."""
        if self.loo is None:
            return {}
        return dict(zip(self.loo["domain"], self.loo["lambda_hat"].astype(float)))


# The range a statistic given by hand (``predict-lambda --stats NAME=VALUE``) must lie in: shares in [0, 1],
# counts and day spans >= 0 and below a bound no real domain reaches (a century of days, 10^12 of anything).
SHARE_STATS = ("p_active",)
MAX_STAT = 1e12


def check_new_domain_stats(stats: dict[str, float], features: list[str] | None, command: str = "predict-lambda") -> None:
    """Check a new domain's statistics given by hand: each value finite and in range; with ``features`` (the
    fit's regressors) also each name one the fit uses (``features``, plus ``p_active`` for Eq. 11's blend)
    and every needed one given. Called once before the grid is opened (``features`` None) and once after.

    Raises:
        ConfigError: naming the statistic, its value, what is accepted and the fix.
    """
    for name, v in stats.items():
        lo, hi = (0.0, 1.0) if name in SHARE_STATS else (0.0, MAX_STAT)
        if not math.isfinite(v) or not lo <= v <= hi:
            what = "a share in [0, 1]" if name in SHARE_STATS else f"a finite number in [0, {hi:g}]"
            raise ConfigError(f"{command} --stats {name}={v!r}: must be {what}; give the new domain's measured value "
                              "(Table 4 of `mmgrid predict-lambda` lists those of the known domains).")
    if features is None:
        return
    known = list(dict.fromkeys([*features, "p_active"]))
    unknown = [k for k in stats if k not in known]
    if unknown:
        raise ConfigError(f"{command} --stats: unknown statistic(s) {unknown}; the fit uses {known} "
                          "(sweeps.predict_lambda.features, plus p_active for Eq. 11); give each as NAME=NUMBER.")
    missing = [k for k in known if k not in stats]
    if stats and missing:
        raise ConfigError(f"{command} --stats: the new domain lacks {missing}; give every one of {known} as NAME=NUMBER.")


def stats_table(prepared: "PreparedDataset") -> pd.DataFrame:
    """The prepared dataset's domain statistics as pandas, with active/non-active counts."""
    st = prepared.stats()
    df = st.to_pandas() if hasattr(st, "to_pandas") else pd.DataFrame(st)
    if "test_users" in df.columns and "p_active" in df.columns:
        df["active_users"] = (df["test_users"] * df["p_active"]).round().astype("Int64")
        df["non_active_users"] = df["test_users"] - df["active_users"]
    return df


def predict_lambda(cfg: GridConfig, registry: Registry, prepared: "PreparedDataset",
                   results: pd.DataFrame | None = None, evaluate: bool = True,
                   evaluator_factory: Any = None) -> LambdaPrediction:
    """lambda* per domain and group, the leave-one-out regression and the Eq. 11 blend.

    Args:
        cfg: the grid (``sweeps.temporal`` for paradigm/metric, ``sweeps.predict_lambda``).
        registry: an open registry holding the temporal study's evaluations.
        prepared: the prepared dataset (its statistics are the regressors).
        results: use these long temporal results instead of reading the registry.
        evaluate: also evaluate (and store, with lineage) each domain's model at its
            leave-one-out lambda_hat* for Table 3.
        evaluator_factory: override the evaluator (tests).

    Returns:
        A :class:`LambdaPrediction`.

    Raises:
        ConfigError: when there are no temporal results, or the group or a feature is unknown.
    """
    t, pl_cfg = cfg.sweeps.temporal, cfg.sweeps.predict_lambda
    res = results if results is not None else temporal_results(registry, paradigm=t.paradigm, variant=t.variant,
                                                                seed="all")
    if res.empty:
        raise ConfigError("predict-lambda: the registry has no temporal results; run `mmgrid sweep temporal CONFIG` first.")
    curves = {} if results is not None else ev.temporal_curves(registry, t.paradigm, t.variant, t.metric)
    stars = study_stars(res, t.metric, curves, t.smooth)
    pred = from_stars(stars, stats_table(prepared), t.paradigm, t.metric, pl_cfg.group, list(pl_cfg.features))
    pred.curves, pred.smooth = curves, t.smooth
    if evaluate and pred.loo is not None:
        pred.evaluated = evaluate_lambda_hat(cfg, registry, prepared, pred, evaluator_factory)
    return pred


def study_stars(results: pd.DataFrame, metric: str, curves: dict | None = None, smooth: int = 1) -> pd.DataFrame:
    """lambda* per (domain, group) as the report states it (one source for the report, the console,
    the lambda_hat* models and the grid's extension).

    With per-user values (``curves``, :func:`mmgrid.sweep.evidence.temporal_curves`): the argmax of the
    seed-averaged curve smoothed over ``smooth`` points, with its bootstrap interval and edge flag
    (:func:`mmgrid.sweep.evidence.robust_stars`). Without: the argmax of the stored group means
    averaged over every seed's records (``results`` read with ``seed="all"``); no interval.
    """
    if curves:
        return ev.robust_stars(curves, smooth)
    return lambda_stars(results, metric)


def association(pred: LambdaPrediction):
    """Spearman's rho between the first feature and lambda* over the domains, with the report's 95%
    interval (users resampled within each domain and seeds, lambda* recomputed per resample) and the
    exact permutation p (:func:`mmgrid.stats.spearman_with_interval`); no interval without per-user values."""
    feature = pred.features[0]
    domains = [str(d) for d in pred.table["domain"]]
    reps = ev.star_replicates(pred.curves, domains, pred.group, pred.smooth) if pred.curves else None
    return spearman_with_interval(pred.table[feature].to_numpy(float), pred.table["lambda_star"].to_numpy(float), reps)


def from_stars(stars: pd.DataFrame, stats: pd.DataFrame, paradigm: str, metric: str, group: str,
               features: list[str]) -> LambdaPrediction:
    """The regression part of :func:`predict_lambda` on ready lambda* and statistics tables."""
    if not features:
        raise ConfigError("sweeps.predict_lambda.features: empty; name at least one domain statistic, e.g. "
                          "[avg_gap_days] (the paper's regressor).")
    unknown = [f for f in features if f not in stats.columns]
    if unknown:
        known = [c for c in stats.columns if c != "domain"]
        raise ConfigError(f"sweeps.predict_lambda.features: {unknown} are not domain statistics; known: {known}.")
    if group not in set(stars["group"]):
        raise ConfigError(f"sweeps.predict_lambda.group: {group!r} not among {sorted(set(stars['group']))}.")
    target = stars[stars["group"] == group][["domain", "lambda_star"]]
    table = stats.merge(target, on="domain", how="inner").sort_values("domain").reset_index(drop=True)
    notes: list[str] = []
    loo = fit = None
    try:
        fit = fit_linear(table, features)
        loo = leave_one_out(table, features)
    except ConfigError as exc:
        if "unknown domain statistic" in str(exc):
            raise
        notes.append(str(exc))
    rho = pval = float("nan")
    if len(table):  # rho and the exact permutation p over every pairing (the report's)
        sp = spearman_with_interval(table[features[0]].to_numpy(float), table["lambda_star"].to_numpy(float))
        rho, pval = sp.rho, sp.pvalue
    return LambdaPrediction(paradigm, metric, group, features, stars, table, loo, fit, rho, pval, notes)


def answer_new_domain(pred: LambdaPrediction, stats_row: dict[str, float], level: float = 0.9) -> NewDomainAnswer:
    """Which lambda to use for a domain that has only statistics (needs ``p_active`` and the features)."""
    if pred.fit is None:
        raise ConfigError(f"predict-lambda: no regression was fitted ({'; '.join(pred.notes)}).")
    if "p_active" not in stats_row:
        raise ConfigError("predict-lambda: give the new domain's p_active (share of active users) for Eq. 11.")
    return predict_new_domain(pred.fit, stats_row, float(stats_row["p_active"]), level)


def evaluate_lambda_hat(cfg: GridConfig, registry: Registry, prepared: "PreparedDataset", pred: LambdaPrediction,
                        evaluator_factory: Any = None, store: bool = True) -> pd.DataFrame:
    """Evaluate each domain at its leave-one-out lambda_hat* (Table 3's second row), on every training
    seed's replicate (as lambda = 1 and lambda*, so that Table 3 pairs the same users and seeds).

    The lambda_hat* model is stored as a merged checkpoint with lineage (``store``);
    its evaluations carry ``study="lambda_hat"``.
    """
    rows: list[dict] = []
    for domain, lam in pred.lambda_hat().items():
        for seed in cfg.train.seed_list:
            rows += sweep_domain(cfg, registry, prepared,
                                 DomainSweep(domain, [float(lam)], seed, study="lambda_hat", store=store),
                                 evaluator_factory)
    return pd.DataFrame(rows, columns=COLUMNS)


def extension_points(lambdas: list[float], star: float, step: float, n: int, lo: float, hi: float) -> list[float]:
    """Up to ``n`` grid points beyond the edge where ``star`` sits (none when it is inside the grid).

    Args:
        lambdas: the evaluated grid.
        star: lambda* on it.
        step: spacing of the new points.
        n: points to add.
        lo, hi: the extended grid's bounds (``sweeps.temporal.extend_min`` / ``extend_max``).
    """
    lams = sorted(float(x) for x in lambdas)
    if not lams or n <= 0:
        return []
    if np.isclose(star, lams[-1]):
        pts = [lams[-1] + k * step for k in range(1, n + 1)]
        return [round(x, 9) for x in pts if x <= hi + 1e-9]
    if np.isclose(star, lams[0]):
        pts = [lams[0] - k * step for k in range(1, n + 1)]
        return sorted(round(x, 9) for x in pts if x >= lo - 1e-9)
    return []


def extend_temporal(cfg: GridConfig, registry: Registry, prepared: "PreparedDataset", evaluator_factory: Any = None,
                    max_rounds: int = 20, executor: Any = None) -> pd.DataFrame:
    """Extend each domain's lambda grid while its lambda* sits on an edge (``sweeps.temporal.extend_steps``).

    A domain whose lambda* (seed-averaged, unsmoothed, any user group) is the grid's first or last point
    gets ``extend_steps`` more points beyond that edge, evaluated on every training seed's replicate;
    repeated until no lambda* sits on an edge or the bounds ``extend_min`` / ``extend_max`` are reached.
    With an ``executor``, each round's (domain, seed) cells run as jobs (as in :func:`run_temporal`).

    Returns:
        The rows of the new evaluations (:data:`mmgrid.sweep.temporal.COLUMNS`); empty when off.
    """
    t = cfg.sweeps.temporal
    rows: list[dict] = []
    if t.extend_steps <= 0:
        return pd.DataFrame(rows, columns=COLUMNS)
    seeds = cfg.train.seed_list
    for _ in range(max_rounds):
        res = temporal_results(registry, paradigm=t.paradigm, variant=t.variant, seed="all")
        if res.empty:
            break
        stars = lambda_stars(res, t.metric)
        todo: dict[str, list[float]] = {}
        for d, g in stars.groupby("domain"):
            lams = sorted(res.loc[res["domain"] == d, "lambda"].astype(float).unique())
            new = sorted({x for s in g["lambda_star"] for x in
                          extension_points(lams, float(s), t.step, t.extend_steps, t.extend_min, t.extend_max)} - set(lams))
            if new:
                todo[str(d)] = new
        if not todo:
            break
        cells = [(s, d) for d in todo for s in seeds]
        rows += run_cells(cfg, registry, prepared, cells, executor, evaluator_factory, lambdas=todo,
                          desc="temporal sweep: extending past an edge")
    return pd.DataFrame(rows, columns=COLUMNS)
