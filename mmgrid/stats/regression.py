"""Ordinary least squares with an intercept, and its leave-one-out predictions: the one home of
the lambda* regression's math (MMGRid section 5.2).

MMGRid fits a line from a domain statistic (the average interaction time gap) to the non-active
users' lambda* on five domains and predicts the sixth. :func:`ols` is that fit, computed the way
scikit-learn's ``LinearRegression`` computes it (centre x and y, ``scipy.linalg.lstsq`` with
``cond=1e-6`` on the centred x, intercept = mean(y) - mean(x) . coef), so the two agree to the
last bit (tests use scikit-learn as the oracle) without its per-call validation cost, which the
bootstrap pays thousands of times. :class:`LinearFit` adds what a prediction interval needs;
:func:`loo_predictions` refits without each point in turn. ``mmgrid.sweep.regression`` applies
them to tables of domain statistics; ``mmgrid.stats.association`` to bootstrap replicates.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy import linalg
from scipy import stats as sps

from mmgrid.stats.errors import StatsError

# scipy.linalg.lstsq's cutoff for small singular values, as LinearRegression(tol=1e-6) passes it
LSTSQ_COND = 1e-6


def _design(x) -> np.ndarray:
    xm = np.asarray(x, dtype=np.float64)
    return xm[:, None] if xm.ndim == 1 else xm


def ols(x, y) -> tuple[float, np.ndarray]:
    """Least-squares ``y ~ intercept + x . coef`` (the line of MMGRid 5.2's lambda* regression).

    Args:
        x: ``[n]`` or ``[n, p]`` regressors.
        y: ``[n]`` targets.

    Returns:
        ``(intercept, coef [p])``.
    """
    xm, yv = _design(x), np.asarray(y, dtype=np.float64)
    x_off, y_off = xm.mean(axis=0), yv.mean()
    coef, *_ = linalg.lstsq(xm - x_off, yv - y_off, cond=LSTSQ_COND)
    return float(y_off - x_off @ coef), coef


@dataclass
class LinearFit:
    """An ordinary-least-squares fit ``y = intercept + coef . x`` with what its uncertainty needs."""

    features: list[str]
    coef: np.ndarray
    intercept: float
    n: int
    r2: float
    sigma: float  # residual standard deviation, RSS / (n - p - 1); NaN when n <= p + 1
    xtx_inv: np.ndarray  # inverse of [1, X]^T [1, X]
    domains: list[str] = field(default_factory=list)

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Point predictions for rows of ``x`` ([m, p])."""
        return self.intercept + np.atleast_2d(x) @ self.coef

    def prediction_se(self, x: np.ndarray) -> np.ndarray:
        """Standard error of a *new* observation at ``x``: sigma * sqrt(1 + x0' (X'X)^-1 x0)."""
        x1 = np.hstack([np.ones((np.atleast_2d(x).shape[0], 1)), np.atleast_2d(x)])
        lever = np.einsum("ij,jk,ik->i", x1, self.xtx_inv, x1)
        return self.sigma * np.sqrt(1.0 + lever)

    def interval(self, x: np.ndarray, level: float = 0.9) -> tuple[np.ndarray, np.ndarray]:
        """Two-sided Student-t prediction interval at ``level`` (NaN when sigma is unknown)."""
        dof = self.n - len(self.features) - 1
        if dof <= 0:
            nan = np.full(np.atleast_2d(x).shape[0], np.nan)
            return nan, nan
        half = sps.t.ppf(0.5 + level / 2, dof) * self.prediction_se(x)
        mid = self.predict(x)
        return mid - half, mid + half


def fit_ols(x, y, features: list[str], domains: list[str] | None = None) -> LinearFit:
    """:func:`ols` with R^2, the residual standard deviation and (X'X)^-1 for prediction intervals.

    Args:
        x: ``[n, p]`` regressors (the columns named by ``features``).
        y: ``[n]`` targets.
        features: the regressors' names.
        domains: the rows' names (kept on the fit).

    Raises:
        StatsError: with fewer than p + 1 rows.
    """
    xm, yv = _design(x), np.asarray(y, dtype=np.float64)
    n, p = xm.shape
    if n < p + 1:
        raise StatsError(f"least squares: {n} point(s) cannot fit {p} feature(s) and an intercept")
    intercept, coef = ols(xm, yv)
    resid = yv - (xm @ coef + intercept)
    dof = n - p - 1
    sigma = float(np.sqrt(resid @ resid / dof)) if dof > 0 else float("nan")
    ss_tot = float(((yv - yv.mean()) ** 2).sum())
    r2 = 1.0 - float(resid @ resid) / ss_tot if ss_tot > 0 else float("nan")
    x1 = np.hstack([np.ones((n, 1)), xm])
    return LinearFit(list(features), np.asarray(coef, float), intercept, n, r2, sigma, np.linalg.pinv(x1.T @ x1),
                     list(domains or []))


def loo_predictions(x, y) -> np.ndarray:
    """Leave-one-out predictions of ``y`` from ``x`` (``[n]`` or ``[n, p]``): for each point,
    :func:`ols` on the others, evaluated at it (MMGRid 5.2: "train with five domains, evaluate
    on the left-out domain").

    Raises:
        StatsError: with fewer than p + 2 points.
    """
    xm, yv = _design(x), np.asarray(y, dtype=np.float64)
    n, p = xm.shape
    if n < p + 2:
        raise StatsError(f"leave-one-out needs at least {p + 2} points for {p} feature(s), got {n}")
    out = np.empty(n)
    for i in range(n):
        keep = np.arange(n) != i
        intercept, coef = ols(xm[keep], yv[keep])
        out[i] = (intercept + xm[i:i + 1] @ coef)[0]
    return out
