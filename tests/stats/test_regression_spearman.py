"""The one home of least squares (mmgrid.stats.regression) and of Spearman's rho
(mmgrid.stats.association.rank_correlation), against independent implementations:
scikit-learn's LinearRegression and scipy.stats.spearmanr."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps
from sklearn.linear_model import LinearRegression

from mmgrid.stats import StatsError
from mmgrid.stats.association import rank_correlation, spearman_rho
from mmgrid.stats.regression import fit_ols, loo_predictions, ols

finite = st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False)


@settings(max_examples=60, deadline=None)
@given(st.integers(3, 8).flatmap(lambda n: st.tuples(st.lists(finite, min_size=n, max_size=n),
                                                     st.lists(finite, min_size=n, max_size=n))))
def test_ols_equals_sklearn(xy):
    x, y = np.asarray(xy[0]), np.asarray(xy[1])
    if np.ptp(x) < 1e-3:
        return  # a (nearly) constant regressor: no line to compare
    intercept, coef = ols(x, y)
    ref = LinearRegression().fit(x[:, None], y)
    assert intercept == pytest.approx(float(ref.intercept_), rel=1e-9, abs=1e-9)
    assert coef[0] == pytest.approx(float(ref.coef_[0]), rel=1e-9, abs=1e-12)


def test_ols_recovers_an_exact_plane_and_the_fit_reports_r2_one():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(7, 2))
    y = 0.5 - 2.0 * x[:, 0] + 3.0 * x[:, 1]
    fit = fit_ols(x, y, ["a", "b"])
    assert fit.intercept == pytest.approx(0.5) and fit.coef == pytest.approx([-2.0, 3.0])
    assert fit.r2 == pytest.approx(1.0) and fit.sigma == pytest.approx(0.0, abs=1e-12)


def test_loo_predictions_equal_sklearn_refits():
    rng = np.random.default_rng(1)
    x, y = rng.uniform(10, 500, size=6), rng.uniform(0.3, 1.5, size=6)
    got = loo_predictions(x, y)
    for i in range(6):
        keep = np.arange(6) != i
        ref = LinearRegression().fit(x[keep, None], y[keep]).predict(x[[i], None])[0]
        assert got[i] == pytest.approx(ref, rel=1e-12)
    with pytest.raises(StatsError, match="at least 3"):
        loo_predictions(x[:2], y[:2])


@settings(max_examples=80, deadline=None)
@given(st.integers(3, 9).flatmap(lambda n: st.tuples(st.lists(st.integers(-5, 5), min_size=n, max_size=n),
                                                     st.lists(st.integers(-5, 5), min_size=n, max_size=n))))
def test_spearman_equals_scipy_with_ties(xy):
    x, y = np.asarray(xy[0], float), np.asarray(xy[1], float)
    got = spearman_rho(x, y)
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        assert math.isnan(got)
        return
    assert got == pytest.approx(float(sps.spearmanr(x, y).statistic), rel=1e-12, abs=1e-12)


def test_rank_correlation_is_vectorised_row_by_row():
    rng = np.random.default_rng(2)
    x, reps = rng.normal(size=5), rng.normal(size=(20, 5))
    got = rank_correlation(np.broadcast_to(x, reps.shape), reps, axis=-1)
    ref = [sps.spearmanr(x, r).statistic for r in reps]
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)
    assert spearman_rho([1, 2, 3, 4, 5], [5, 4, 3, 2, 1]) == pytest.approx(-1.0)
    assert math.isnan(spearman_rho([1, 2], [2, 1]))
