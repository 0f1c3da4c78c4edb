"""Leave-one-out linear regression of lambda* on domain statistics (MMGRid section 5.2), on tables.

The paper fits a linear regression from the average interaction time gap to the
non-active users' lambda* on five domains and predicts the sixth (leave-one-out), then
blends the prediction with p_active by Eq. 11. The least-squares math has one home,
:mod:`mmgrid.stats.regression` (:func:`~mmgrid.stats.regression.fit_ols`,
:func:`~mmgrid.stats.regression.loo_predictions`); these functions apply it to a table with
one row a domain (checking its columns) and return tables; reading the registry lives elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from mmgrid.errors import ConfigError
from mmgrid.stats.regression import LinearFit, fit_ols, loo_predictions
from mmgrid.sweep.selection import blend_eq11

__all__ = ["LinearFit", "NewDomainAnswer", "fit_linear", "leave_one_out", "predict_new_domain"]


def _matrix(table: pd.DataFrame, features: Sequence[str], where: str) -> np.ndarray:
    missing = [f for f in features if f not in table.columns]
    if missing:
        raise ConfigError(
            f"{where}: unknown domain statistic(s) {missing}; available: {sorted(map(str, table.columns))}. "
            "Set sweeps.predict_lambda.features."
        )
    x = table[list(features)].to_numpy(dtype=float)
    if np.isnan(x).any():
        bad = table.index[np.isnan(x).any(axis=1)].tolist()
        raise ConfigError(f"{where}: NaN in features {list(features)} for rows {bad}.")
    return x


def fit_linear(table: pd.DataFrame, features: Sequence[str], target: str = "lambda_star") -> LinearFit:
    """Fit ``target ~ features`` by least squares (:func:`mmgrid.stats.regression.fit_ols`).

    Args:
        table: one row a domain; must hold the feature columns and ``target``.
        features: regressor columns (e.g. ``["avg_gap_days"]``).
        target: the column predicted.

    Returns:
        The fit, with what prediction intervals need.

    Raises:
        ConfigError: with fewer than ``len(features) + 1`` rows, or unknown columns.
    """
    features = list(features)
    x = _matrix(table, features, "lambda regression")
    n, p = x.shape
    if n < p + 1:
        raise ConfigError(
            f"lambda regression: {n} domain(s) cannot fit {p} feature(s) and an intercept; "
            f"need at least {p + 1} domains with a temporal sweep."
        )
    domains = [str(d) for d in table["domain"]] if "domain" in table.columns else []
    return fit_ols(x, table[target].to_numpy(dtype=float), features, domains)


def leave_one_out(
    table: pd.DataFrame,
    features: Sequence[str],
    target: str = "lambda_star",
    p_active: str = "p_active",
) -> pd.DataFrame:
    """Leave-one-out predictions of ``target`` and the Eq. 11 blend for every domain.

    For each row, fit on the other rows and predict the left-out one (MMGRid section 5.2:
    "train with five domains, evaluate on the left-out domain").

    Args:
        table: one row a domain with ``domain``, the features, ``target`` and ``p_active``.
        features: regressor columns.
        target: the non-active users' lambda* column.
        p_active: the share-of-active-users column used by Eq. 11.

    Returns:
        ``domain``, the features, ``lambda_star``, ``lambda_pred`` (LOO), ``p_active``,
        ``lambda_hat`` (Eq. 11 of the LOO prediction), ``abs_error``.

    Raises:
        ConfigError: with fewer than ``len(features) + 2`` domains.
    """
    features = list(features)
    n = len(table)
    if n < len(features) + 2:
        raise ConfigError(
            f"leave-one-out: {n} domain(s) leave too few to fit {len(features)} feature(s) and an intercept; "
            f"need at least {len(features) + 2} domains."
        )
    tab = table.reset_index(drop=True)
    preds = loo_predictions(_matrix(tab, features, "leave-one-out"), tab[target].to_numpy(dtype=float))
    out = tab[["domain", *features]].copy()
    out["lambda_star"] = tab[target].astype(float)
    out["lambda_pred"] = [float(v) for v in preds]
    out["p_active"] = tab[p_active].astype(float)
    out["lambda_hat"] = blend_eq11(out["lambda_pred"].to_numpy(), out["p_active"].to_numpy())
    out["abs_error"] = (out["lambda_pred"] - out["lambda_star"]).abs()
    return out


@dataclass
class NewDomainAnswer:
    """Which lambda to use for a domain that has only statistics."""

    lambda_pred: float  # predicted non-active lambda*
    lambda_hat: float  # Eq. 11 blend with p_active
    low: float  # prediction interval of lambda_hat at ``level``
    high: float
    se: float  # standard error of lambda_hat (prediction of a new observation)
    level: float
    n_domains: int


def predict_new_domain(fit: LinearFit, stats_row: dict[str, float], p_active: float, level: float = 0.9) -> NewDomainAnswer:
    """Predict lambda_hat* for a domain outside the fit, with its prediction interval.

    The Eq. 11 blend is linear in the prediction, so its interval is the prediction's
    interval scaled by ``1 - p_active``.

    Args:
        fit: the regression over the known domains.
        stats_row: the new domain's statistics (must hold ``fit.features``).
        p_active: the new domain's share of active users.
        level: coverage of the interval.

    Returns:
        The answer with point value, interval and standard error.
    """
    missing = [f for f in fit.features if f not in stats_row]
    if missing:
        raise ConfigError(f"predict-lambda: the new domain lacks statistic(s) {missing}; give them as name=value.")
    x = np.array([[float(stats_row[f]) for f in fit.features]])
    pred = float(fit.predict(x)[0])
    lo, hi = fit.interval(x, level)
    w = 1.0 - float(p_active)
    hat = float(blend_eq11(pred, p_active))
    se = float(fit.prediction_se(x)[0]) * w
    return NewDomainAnswer(pred, hat, float(blend_eq11(lo[0], p_active)), float(blend_eq11(hi[0], p_active)), se, level, fit.n)
