"""mean_ci against known truth: coverage on a known distribution, degenerate cases."""

import numpy as np
import pytest

from mmgrid.stats import mean_ci
from mmgrid.stats.bootstrap import cluster_index


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



def test_resampled_cluster_means_are_the_means_of_the_drawn_users_rows():
    """Per-cluster sums give, for every draw, the mean over all rows of the drawn users (a user drawn
    twice counts twice): checked against building each bootstrap sample by hand, and against the
    per-column weights form the statistics used before."""
    from mmgrid.stats.bootstrap import cluster_sums, resample_counts, resampled_means

    rng = np.random.default_rng(5)
    users = np.array([0, 0, 1, 2, 2, 2, 3])  # unequal numbers of test examples per user
    values = rng.random((2, users.size))
    inv, n_c = cluster_index(users, users.size)
    counts = resample_counts(rng, 50, n_c)
    got = resampled_means(*cluster_sums(values, inv, n_c), counts)  # [2, 50]
    for b in range(50):
        rows = np.concatenate([np.flatnonzero(users == u) for u in range(n_c) for _ in range(counts[b, u])])
        assert got[:, b] == pytest.approx(values[:, rows].mean(axis=1), rel=1e-12)
    weights = counts[:, inv] / counts[:, inv].sum(axis=1, keepdims=True)  # each column weighted by its user's draws
    assert got == pytest.approx(values @ weights.T, rel=1e-12)


def test_percentile_interval_and_band_by_hand():
    """The (1 - level) / 2 and (1 + level) / 2 quantiles: of 0..100 at level 0.5, 25 and 75."""
    from mmgrid.stats.bootstrap import percentile_band, percentile_interval

    v = np.arange(101, dtype=float)
    assert percentile_interval(v, 0.5) == (25.0, 75.0)
    lo, hi = percentile_band(np.stack([v, v + 100]), 0.5, axis=1)  # pointwise over curves
    assert lo.tolist() == [25.0, 125.0] and hi.tolist() == [75.0, 175.0]
    # NaNs are always dropped; infinite replicates only with finite=True (the default)
    w = np.concatenate([v, [np.nan, np.inf]])
    assert percentile_interval(w, 0.5) == (25.0, 75.0)
    assert percentile_interval(w, 0.5, finite=False) == (25.25, 75.75)  # 102 replicates: 0..100 and inf
    assert np.isnan(percentile_interval(np.array([np.nan, np.inf]))).all()
