"""Spearman's rho (exact p, interval), the leave-one-out error and verdicts against hand truth."""

import itertools

import numpy as np
import pytest

from mmgrid.stats import (FAILS, HOLDS, INCONCLUSIVE, StatsError, contains, loo_error_vs_default, loo_predictions,
                          spearman_exact_p, spearman_with_interval, verdict)


def _rho_by_formula(x_rank, y_rank):
    d = np.asarray(x_rank, float) - np.asarray(y_rank, float)
    n = len(d)
    return 1.0 - 6.0 * (d @ d) / (n * (n * n - 1))


@pytest.mark.parametrize("y", [[2, 1, 4, 3, 5], [5, 3, 4, 1, 2], [1, 2, 3, 4, 5]])
def test_spearman_exact_p_equals_hand_enumeration_of_120_pairings(y):
    x = [10.0, 20.0, 30.0, 40.0, 50.0]  # ranks 1..5; y holds ranks without ties
    obs = abs(_rho_by_formula([1, 2, 3, 4, 5], y))
    perms = [abs(_rho_by_formula([1, 2, 3, 4, 5], p)) for p in itertools.permutations(y)]
    assert len(perms) == 120
    hand = sum(r >= obs - 1e-12 for r in perms) / 120
    assert spearman_exact_p(x, y) == pytest.approx(hand, rel=1e-12)


def test_perfect_monotone_five_points_has_p_two_of_120():
    assert spearman_exact_p([1, 2, 3, 4, 5], [0.1, 0.2, 0.3, 0.4, 0.5]) == pytest.approx(2 / 120)


def test_spearman_interval_from_replicates():
    x = np.array([1.0, 2, 3, 4, 5])
    y = np.array([1.5, 1.2, 0.9, 0.4, 0.1])
    same = spearman_with_interval(x, y, np.tile(y, (50, 1)))
    assert same.rho == pytest.approx(-1.0) and same.ci_low == pytest.approx(-1.0) and same.ci_high == pytest.approx(-1.0)
    # half the replicates reverse the order: the interval spans both signs
    mixed = np.vstack([np.tile(y, (50, 1)), np.tile(y[::-1], (50, 1))])
    r = spearman_with_interval(x, y, mixed)
    assert r.ci_low == pytest.approx(-1.0) and r.ci_high == pytest.approx(1.0) and r.n_resamples_used == 100
    # a constant replicate has no rho and is left out
    r2 = spearman_with_interval(x, y, np.vstack([np.ones(5), y]))
    assert r2.n_resamples_used == 1


def test_loo_predictions_match_a_refit_without_each_point():
    x = np.array([3.0, 10.0, 25.0, 40.0, 80.0])
    y = np.array([1.4, 1.2, 0.5, 0.9, 0.2])
    for i, pred in enumerate(loo_predictions(x, y)):
        keep = np.arange(5) != i
        slope, intercept = np.polyfit(x[keep], y[keep], 1)
        assert pred == pytest.approx(slope * x[i] + intercept, rel=1e-9)
    with pytest.raises(StatsError, match="at least 3"):
        loo_predictions([1.0, 2.0], [1.0, 2.0])


def test_loo_error_against_the_default_on_an_exact_line():
    x = np.array([0.0, 1.0, 2.0, 3.0])
    y = 1.0 + 0.1 * x  # lambda* 1.0, 1.1, 1.2, 1.3: the line predicts exactly
    r = loo_error_vs_default(x, y, np.tile(y, (20, 1)))
    assert r.mae_loo == pytest.approx(0.0, abs=1e-12)
    assert r.mae_default == pytest.approx(0.15)  # mean of 0, .1, .2, .3
    assert r.diff == pytest.approx(-0.15) and r.ci_low == pytest.approx(-0.15) and r.ci_high == pytest.approx(-0.15)
    assert verdict(r.ci_low, r.ci_high, "less") == HOLDS


def test_verdicts():
    assert verdict(0.1, 0.3) == HOLDS
    assert verdict(-0.3, -0.1) == FAILS
    assert verdict(-0.1, 0.3) == INCONCLUSIVE
    assert verdict(-0.3, -0.1, "less") == HOLDS
    assert verdict(0.0, 0.2) == INCONCLUSIVE  # touching the null is not beyond it
    assert verdict(float("nan"), 1.0) == INCONCLUSIVE
    assert verdict(1.1, 1.4, null=1.0) == HOLDS
    assert contains(0.0, 0.4, 0.25) == HOLDS and contains(0.5, 0.9, 0.25) == FAILS
    with pytest.raises(StatsError, match="direction"):
        verdict(0.0, 1.0, "up")


def test_vectorised_rank_correlation_matches_scipy_with_ties():
    from scipy import stats as sps

    from mmgrid.stats.association import rank_correlation

    rng = np.random.default_rng(2)
    x = np.array([3.0, 1.0, 4.0, 1.0, 5.0, 9.0])
    ys = rng.integers(0, 4, size=(30, 6)).astype(float)  # many ties
    got = rank_correlation(np.broadcast_to(x, ys.shape), ys)
    for row, r in zip(ys, got):
        want = sps.spearmanr(x, row).statistic if np.ptp(row) > 0 else np.nan
        assert (np.isnan(r) and np.isnan(want)) or r == pytest.approx(want, rel=1e-9)
