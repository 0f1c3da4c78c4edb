"""Pure helpers of the temporal study: the lambda grid, lambda* of recorded means and the Eq. 11 blend.

MMGRid section 5: theta(lambda) = theta_t1 + lambda * (theta_t2 - theta_t1)
(Eq. 9-10); lambda* is the lambda with the best test metric for a domain and user group;
Eq. 11 blends the non-active users' predicted lambda* with the active users' lambda = 1
(:func:`blend_eq11`, its one home).

lambda*'s rule (the argmax, ties within 1e-9 to the lambda closest to 1, then the smaller) has
one home, :func:`mmgrid.stats.lambda_star.argmax_lambda` with :data:`TIE_DECIMALS`; the
interval of lambda* from per-user values is :func:`mmgrid.stats.lambda_star.robust_lambda_star`.
:func:`select_lambda_star` applies the rule to one curve of recorded means (NaN points
dropped); the study-level entry point, which picks the per-user version where the registry
has per-user values, is :func:`mmgrid.sweep.lambda_model.study_stars`.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np
import pandas as pd

from mmgrid.errors import ConfigError
from mmgrid.stats.lambda_star import TIE_DECIMALS, argmax_lambda

__all__ = ["TIE_DECIMALS", "blend_eq11", "lambda_grid", "lambda_stars", "select_lambda_star"]


def lambda_grid(start: float, stop: float, step: float) -> list[float]:
    """Evenly spaced lambdas from ``start`` to ``stop`` inclusive, rounded to 1e-9.

    Args:
        start: first lambda.
        stop: last lambda (included when it lies on the grid).
        step: spacing, > 0.

    Returns:
        The grid, e.g. ``lambda_grid(0, 1.5, 0.05)`` has 31 points.

    Raises:
        ConfigError: when ``step`` is not positive or ``stop < start``.
    """
    if step <= 0:
        raise ConfigError(f"sweeps.temporal.step: {step} is not positive; use e.g. 0.05.")
    if stop < start:
        raise ConfigError(f"sweeps.temporal: stop {stop} is below start {start}; swap them.")
    n = int(np.floor((stop - start) / step + 1e-6)) + 1
    return [round(start + i * step, TIE_DECIMALS) for i in range(n)]


def select_lambda_star(lambdas: Sequence[float], values: Sequence[float], prefer: float = 1.0) -> float:
    """The lambda with the largest metric; ties go to the lambda closest to ``prefer``
    (:func:`mmgrid.stats.lambda_star.argmax_lambda` on the non-NaN points).

    MMGRid section 5.2 marks the best lambda per domain and group (Figure 5). Metrics equal
    after rounding to 1e-9 tie; among ties the one closest to 1 wins (the plain p2
    checkpoint is the natural default), then the smaller lambda.

    Args:
        lambdas: the swept lambdas.
        values: the metric (e.g. NDCG@10) at each lambda; NaN entries are ignored.
        prefer: tie-break target (1.0 = the t2 checkpoint).

    Returns:
        lambda*.

    Raises:
        ConfigError: when the inputs are empty, of different lengths, or all NaN.
    """
    lam = np.asarray(lambdas, dtype=float)
    val = np.asarray(values, dtype=float)
    if lam.shape != val.shape or lam.size == 0:
        raise ConfigError(f"lambda*: need one metric per lambda, got {lam.size} lambdas and {val.size} values.")
    ok = ~np.isnan(val)
    if not ok.any():
        raise ConfigError("lambda*: every metric is NaN; the sweep evaluated no users.")
    return float(argmax_lambda(lam[ok], val[ok], prefer))


def lambda_stars(
    results: pd.DataFrame,
    metric: str = "ndcg@10",
    by: Iterable[str] = ("domain", "group"),
) -> pd.DataFrame:
    """lambda* for each (domain, group) of a long results table.

    Args:
        results: rows with columns ``lambda``, ``metric``, ``value`` and the ``by`` columns.
        metric: the metric maximised.
        by: grouping columns.

    Returns:
        One row per group: the ``by`` columns, ``lambda_star`` and ``best`` (the metric there).
    """
    by = list(by)
    sub = results[results["metric"] == metric]
    if sub.empty:
        raise ConfigError(f"lambda*: no results for metric {metric!r}; known: {sorted(set(results['metric']))}.")
    rows = []
    for key, g in sub.groupby(by, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        g = g.groupby("lambda", as_index=False)["value"].mean()
        star = select_lambda_star(g["lambda"].to_numpy(), g["value"].to_numpy())
        best = float(g.loc[np.isclose(g["lambda"], star), "value"].iloc[0])
        rows.append({**dict(zip(by, key)), "lambda_star": star, "best": best})
    return pd.DataFrame(rows)


def blend_eq11(lambda_non_active: float | np.ndarray, p_active: float | np.ndarray) -> float | np.ndarray:
    """MMGRid Eq. 11: lambda_hat* = (1 - p_active) * lambda*_non_active + p_active * 1.

    Args:
        lambda_non_active: (predicted) lambda* of the non-active users.
        p_active: share of test users active in the last training period, in [0, 1].

    Returns:
        lambda_hat*, of the same shape as the inputs.

    Raises:
        ConfigError: when ``p_active`` lies outside [0, 1].
    """
    p = np.asarray(p_active, dtype=float)
    if np.any((p < 0) | (p > 1)) or np.any(np.isnan(p)):
        raise ConfigError(f"Eq. 11: p_active={p_active!r} must lie in [0, 1] (a share of users).")
    out = (1.0 - p) * np.asarray(lambda_non_active, dtype=float) + p * 1.0
    return float(out) if np.ndim(out) == 0 else out
