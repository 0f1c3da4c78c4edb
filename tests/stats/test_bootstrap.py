"""mean_ci against known truth: coverage on a known distribution, degenerate cases."""

import numpy as np
import pytest

from mmgrid.stats import mean_ci


def test_coverage_of_a_bernoulli_mean_is_near_nominal():
    rng = np.random.default_rng(7)
    p, trials = 0.1, 300
    covered = 0
    for t in range(trials):
        x = (rng.random(400) < p).astype(float)
        _, lo, hi = mean_ci(x, n_resamples=800, seed=t)
        covered += lo <= p <= hi
    # binomial sd of the coverage estimate at 0.95 with 300 trials is 0.0126: allow 3.5 sd
    assert abs(covered / trials - 0.95) < 0.045


def test_seed_variation_widens_the_interval():
    rng = np.random.default_rng(0)
    users = rng.random(500)
    same = np.stack([users, users, users])
    shifted = same + np.array([[-0.2], [0.0], [0.2]])
    _, lo1, hi1 = mean_ci(same)
    _, lo2, hi2 = mean_ci(shifted)
    assert (hi2 - lo2) > 3 * (hi1 - lo1)


def test_degenerate_inputs():
    assert np.isnan(mean_ci(np.array([]))[0])
    assert mean_ci(np.array([0.3])) == (0.3, 0.3, 0.3)
    m, lo, hi = mean_ci(np.full(50, 0.25))
    assert m == lo == hi == pytest.approx(0.25)
    with pytest.raises(ValueError, match="NaN"):
        mean_ci(np.array([0.1, np.nan]))
