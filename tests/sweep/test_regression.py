"""Leave-one-out regression of lambda* on a hand-made table (MMGRid section 5.2)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from mmgrid.errors import ConfigError
from mmgrid.sweep.regression import fit_linear, leave_one_out, predict_new_domain


def _table(y=None):
    gap = [100.0, 200.0, 300.0, 400.0, 500.0]
    lam = y if y is not None else [1.3, 1.1, 0.9, 0.7, 0.5]  # exactly 1.5 - 0.002 * gap
    return pd.DataFrame(
        {"domain": list("ABCDE"), "avg_gap_days": gap, "lambda_star": lam, "p_active": [0.2, 0.4, 0.5, 0.3, 0.1]}
    )


def test_exact_line_is_recovered_leaving_any_domain_out():
    loo = leave_one_out(_table(), ["avg_gap_days"])
    np.testing.assert_allclose(loo["lambda_pred"], loo["lambda_star"], atol=1e-9)
    np.testing.assert_allclose(loo["lambda_hat"], (1 - loo["p_active"]) * loo["lambda_pred"] + loo["p_active"])


def test_loo_by_hand_on_noisy_points():
    y = [1.0, 1.2, 0.8, 0.6, 0.7]
    tab = _table(y)
    loo = leave_one_out(tab, ["avg_gap_days"]).set_index("domain")
    # leave A out: fit on B..E by hand with numpy.polyfit, predict at gap 100
    slope, icpt = np.polyfit([200, 300, 400, 500], y[1:], 1)
    assert math.isclose(loo.loc["A", "lambda_pred"], icpt + slope * 100, rel_tol=1e-9)
    assert math.isclose(loo.loc["A", "lambda_hat"], 0.8 * (icpt + slope * 100) + 0.2, rel_tol=1e-9)


def test_too_few_domains():
    with pytest.raises(ConfigError, match="at least 3"):
        leave_one_out(_table().iloc[:2], ["avg_gap_days"])


def test_unknown_feature_names_known_columns():
    with pytest.raises(ConfigError, match="avg_gap_days"):
        fit_linear(_table(), ["gap"])


def test_new_domain_interval_contains_point_and_matches_formula():
    y = [1.0, 1.2, 0.8, 0.6, 0.7]
    fit = fit_linear(_table(y), ["avg_gap_days"])
    ans = predict_new_domain(fit, {"avg_gap_days": 250.0}, p_active=0.4, level=0.9)
    slope, icpt = np.polyfit([100, 200, 300, 400, 500], y, 1)
    assert math.isclose(ans.lambda_pred, icpt + slope * 250, rel_tol=1e-9)
    assert math.isclose(ans.lambda_hat, 0.6 * ans.lambda_pred + 0.4, rel_tol=1e-9)
    assert ans.low < ans.lambda_hat < ans.high
    # textbook OLS prediction s.e.: s * sqrt(1 + 1/n + (x0 - xbar)^2 / Sxx), times (1 - p_active)
    x = np.array([100, 200, 300, 400, 500.0])
    resid = np.array(y) - (icpt + slope * x)
    s = math.sqrt(resid @ resid / 3)
    se = s * math.sqrt(1 + 1 / 5 + (250 - 300) ** 2 / ((x - 300) ** 2).sum())
    assert math.isclose(ans.se, 0.6 * se, rel_tol=1e-9)
