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


def test_cluster_bootstrap_draws_whole_users():
    # 40 users with 5 identical examples each: the example-level draw thinks it has 200 independent
    # values; drawing users gives the interval of 40 values, about sqrt(5) times wider
    rng = np.random.default_rng(1)
    per_user = rng.random(40)
    rows = np.repeat(per_user, 5)
    users = np.repeat(np.arange(40), 5)
    m1, lo1, hi1 = mean_ci(rows)
    m2, lo2, hi2 = mean_ci(rows, clusters=users)
    m3, lo3, hi3 = mean_ci(per_user)
    assert m1 == m2 == pytest.approx(m3)
    assert (hi2 - lo2) == pytest.approx(hi3 - lo3, rel=0.15)
    assert (hi2 - lo2) > 1.8 * (hi1 - lo1)


def test_cluster_bootstrap_of_unequal_users_is_the_row_mean_of_the_drawn_users():
    # two users: A with rows [0, 0, 0] and B with [1]: draws {A,A}, {A,B}, {B,B} give 0, 1/4, 1
    vals, users = np.array([0.0, 0.0, 0.0, 1.0]), np.array([7, 7, 7, 9])
    m, lo, hi = mean_ci(vals, clusters=users, n_resamples=4000, level=0.5)
    assert m == pytest.approx(0.25)
    assert lo == pytest.approx(0.0) or lo == pytest.approx(0.25)
    assert hi in (pytest.approx(0.25), pytest.approx(1.0))


def test_cached_cluster_weights_never_serve_another_layout():
    """The weights of one cluster layout are reused by the next metric of the same users; a second
    layout of the same length (same hash bucket or not) gets its own, and each interval equals the one
    computed with an empty cache."""
    from mmgrid.stats import bootstrap

    rng = np.random.default_rng(3)
    a, b = rng.integers(0, 20, 60), rng.permutation(np.repeat(np.arange(30), 2))
    values = [rng.random(60) for _ in range(3)]
    calls = [(v, c) for v in values for c in (a, b, a)]
    cached = [bootstrap.mean_ci(v, n_resamples=300, clusters=c) for v, c in calls]
    fresh = []
    for v, c in calls:
        bootstrap._WEIGHTS.clear()
        fresh.append(bootstrap.mean_ci(v, n_resamples=300, clusters=c))
    assert cached == fresh
    assert cached[0] != cached[1]  # the two layouts do give different intervals
