"""Claims about lambda* across domains: Spearman's rho and the leave-one-out prediction.

Both take the point lambda* per domain and its bootstrap replicates ``[n_resamples, n_domains]``
(users resampled within each domain, seeds shared, lambda* recomputed per replicate:
:func:`mmgrid.stats.lambda_star.domains_lambda_star_replicates`). The interval therefore says how
much the statistic moves with the test users and training seeds, not with the choice of domains
(with five domains a bootstrap over domains is meaningless).

* Spearman's rho (:func:`rank_correlation`, the one implementation: Pearson's r of average ranks) with a percentile interval from
  the replicates and an exact two-sided permutation p: the share of the n! pairings of the
  covariate with lambda* whose |rho| is at least the observed |rho| (scipy.stats.permutation_test
  with ``permutation_type="pairings"``; all n! when n! <= ``max_exact``, else random pairings).
* The leave-one-out regression (MMGRid section 5.2; :func:`mmgrid.stats.regression.loo_predictions`):
  for each domain an ordinary-least-squares line fitted on the others predicts its lambda*; its error is the mean |prediction - lambda*|, and
  the claim "the prediction beats the default lambda = 1" is the difference
  ``MAE(LOO) - MAE(lambda = 1)`` (negative = the prediction is better), with its interval.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from mmgrid.stats.bootstrap import DEFAULT_LEVEL, percentile_interval
from mmgrid.stats.regression import loo_predictions


def spearman_rho(x, y) -> float:
    """Spearman's rho of two ``[n]`` samples (:func:`rank_correlation`); NaN with fewer than 3 points
    or a constant side."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if x.size < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")
    return float(rank_correlation(x, y))


def rank_correlation(x, y, axis: int = -1) -> np.ndarray:
    """Spearman's rho (Spearman 1904), the one implementation: Pearson's r of the ranks (ties get their average
    rank, scipy.stats.rankdata) along ``axis``, vectorised over the other axes; NaN where a side is
    constant. Equals scipy.stats.spearmanr (the tests' oracle) to rounding."""
    rx = sps.rankdata(np.asarray(x, float), axis=axis)
    ry = sps.rankdata(np.asarray(y, float), axis=axis)
    rx = rx - rx.mean(axis=axis, keepdims=True)
    ry = ry - ry.mean(axis=axis, keepdims=True)
    den = np.sqrt((rx * rx).sum(axis=axis) * (ry * ry).sum(axis=axis))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (rx * ry).sum(axis=axis) / np.where(den > 0, den, 1.0), np.nan)


def spearman_exact_p(x, y, max_exact: int = 40320, n_resamples: int = 20000, seed: int = 0) -> float:
    """Two-sided permutation p of Spearman's rho: share of pairings with |rho| >= the observed |rho|.

    Exact (all n! pairings, the observed one included) when n! <= ``max_exact``; otherwise
    ``n_resamples`` random pairings.
    """
    x, y = np.asarray(x, float), np.asarray(y, float)
    if math.isnan(spearman_rho(x, y)):
        return float("nan")

    def stat(xx, yy, axis=-1):
        return np.abs(np.nan_to_num(rank_correlation(xx, yy, axis), nan=0.0))

    n = x.size
    n_perm = np.inf if math.factorial(n) <= max_exact else n_resamples
    res = sps.permutation_test((x, y), stat, permutation_type="pairings", n_resamples=n_perm,
                               vectorized=True, alternative="greater", rng=np.random.default_rng(seed))
    return float(res.pvalue)


@dataclass(frozen=True)
class SpearmanResult:
    rho: float
    ci_low: float
    ci_high: float
    pvalue: float  # exact permutation p of the point rho
    n: int
    n_resamples_used: int  # replicates where rho was defined


def spearman_with_interval(x, y, replicates: np.ndarray | None = None, level: float = DEFAULT_LEVEL) -> SpearmanResult:
    """rho(x, y) with its exact permutation p and a percentile interval over lambda* replicates.

    Args:
        x: the per-domain covariate (e.g. the average interaction time gap), ``[n]``.
        y: the point lambda* per domain, ``[n]``.
        replicates: ``[n_resamples, n]`` bootstrap lambda* (None: no interval).
        level: coverage.
    """
    x, y = np.asarray(x, float), np.asarray(y, float)
    rho = spearman_rho(x, y)
    p = spearman_exact_p(x, y)
    lo = hi = float("nan")
    used = 0
    if replicates is not None and len(replicates):
        reps = np.asarray(replicates, float)
        r = rank_correlation(np.broadcast_to(x, reps.shape), reps, axis=-1) if x.size >= 3 else np.full(len(reps), np.nan)
        used = int(np.isfinite(r).sum())
        lo, hi = percentile_interval(r, level)
    return SpearmanResult(rho, lo, hi, p, int(x.size), used)


@dataclass(frozen=True)
class LooResult:
    mae_loo: float  # mean |LOO prediction - lambda*|
    mae_default: float  # mean |default - lambda*|
    diff: float  # mae_loo - mae_default (negative: the prediction beats the default)
    ci_low: float
    ci_high: float
    default: float
    predictions: np.ndarray


def loo_error_vs_default(x, y, replicates: np.ndarray | None = None, default: float = 1.0,
                         level: float = DEFAULT_LEVEL) -> LooResult:
    """Leave-one-out prediction error against always using ``default``, with a replicate interval."""
    y = np.asarray(y, float)

    def gap(yy: np.ndarray) -> tuple[float, float]:
        pred = loo_predictions(x, yy)
        return float(np.mean(np.abs(pred - yy))), float(np.mean(np.abs(default - yy)))

    pred = loo_predictions(x, y)
    mae_loo, mae_def = gap(y)
    lo = hi = float("nan")
    if replicates is not None and len(replicates):
        d = np.array([np.subtract(*gap(row)) for row in np.asarray(replicates, float)])
        lo, hi = percentile_interval(d, level)
    return LooResult(mae_loo, mae_def, mae_loo - mae_def, lo, hi, float(default), pred)
