"""Paired comparisons and multiple-testing corrections against hand-computed truth."""

import itertools

import numpy as np
import pytest
from scipy import stats as sps

from mmgrid.stats import StatsError, benjamini_hochberg, holm, paired_difference


def test_sign_flip_p_equals_hand_enumeration_of_all_16_flips():
    d = np.array([1.0, 2.0, -0.5, 3.0])
    obs = abs(d.mean())
    flips = [abs((d * np.array(s)).mean()) for s in itertools.product([1, -1], repeat=4)]
    hand = sum(f >= obs - 1e-12 for f in flips) / 16  # 6.5, 5.5, -5.5, -6.5 of the sums: 4 / 16
    assert hand == 0.25
    res = paired_difference(d, np.zeros(4), test="randomization", n_flips=1000)
    assert res.pvalue == pytest.approx(hand, rel=1e-12)
    assert res.diff == pytest.approx(1.375, rel=1e-12)


def test_paired_t_uses_per_user_differences_averaged_over_seeds():
    rng = np.random.default_rng(3)
    a, b = rng.random((2, 50)), rng.random((2, 50))
    res = paired_difference(a, b, test="t")
    assert res.pvalue == pytest.approx(sps.ttest_rel(a.mean(0), b.mean(0)).pvalue, rel=1e-9)
    assert res.n_seeds == 2 and res.n_users == 50
    assert res.mean_a - res.mean_b == pytest.approx(res.diff, rel=1e-9)


def test_a_single_replicate_side_is_compared_with_every_seed():
    a = np.array([[1.0, 2.0, 3.0], [3.0, 4.0, 5.0]])
    b = np.array([1.0, 1.0, 1.0])
    res = paired_difference(a, b, n_resamples=200)
    assert res.diff == pytest.approx(2.0)  # ((0+1+2) + (2+3+4)) / 6
    assert res.n_seeds == 2
    with pytest.raises(StatsError, match="same users"):
        paired_difference(np.ones(3), np.ones(4))
    with pytest.raises(StatsError, match="seeds"):
        paired_difference(np.ones((2, 3)), np.ones((3, 3)))
    with pytest.raises(StatsError, match="test"):
        paired_difference(np.ones(3), np.ones(3), test="wilcoxon")


def test_identical_systems_give_p_one_and_a_zero_interval():
    x = np.random.default_rng(0).random((3, 40))
    res = paired_difference(x, x.copy())
    assert res.pvalue == 1.0 and res.diff == res.ci_low == res.ci_high == 0.0


def test_difference_interval_covers_the_true_difference_near_nominal():
    rng = np.random.default_rng(11)
    trials, covered, rejected_null = 200, 0, 0
    for t in range(trials):
        user = rng.random(300)  # a shared per-user difficulty: pairing removes it
        a = (rng.random(300) < 0.2 + 0.5 * user).astype(float)
        b = (rng.random(300) < 0.2 + 0.5 * user).astype(float)  # same distribution: true difference 0
        res = paired_difference(a, b, n_resamples=600, seed=t)
        covered += res.ci_low <= 0.0 <= res.ci_high
        rejected_null += res.pvalue < 0.05
    # binomial s.d. of a 0.95 coverage over 200 trials is 0.015: allow 3 s.d.
    assert abs(covered / trials - 0.95) < 0.05
    assert rejected_null / trials < 0.1  # the test's type-I error stays near 0.05


def test_holm_on_a_hand_case():
    # sorted: 0.005 (x4), 0.01 (x3), 0.03 (x2), 0.04 (x1) -> 0.02, 0.03, 0.06, max(0.04, 0.06)
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    out = holm([0.2, np.nan, 0.6])  # NaN is no test: m = 2
    assert out[0] == pytest.approx(0.4) and np.isnan(out[1]) and out[2] == pytest.approx(0.6)
    assert holm([0.9, 0.8]) == pytest.approx([1.0, 1.0])  # capped at 1
    with pytest.raises(StatsError, match=r"\[0, 1\]"):
        holm([1.5])


def test_benjamini_hochberg_on_a_hand_case():
    # m p_(i) / i: 0.02, 0.02, 0.04, 0.04; running minimum from the top keeps them
    assert benjamini_hochberg([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.02, 0.04, 0.04, 0.02])
    assert benjamini_hochberg([0.01, 0.02, 0.5]) == pytest.approx([0.03, 0.03, 0.5])


def test_sign_flip_agrees_with_scipy_permutation_test():
    from mmgrid.stats.paired import sign_flip_p

    rng = np.random.default_rng(8)
    d = rng.normal(0.1, 1.0, 400)
    ours = sign_flip_p(d, n_resamples=4000, seed=1)
    ref = sps.permutation_test((d,), np.mean, permutation_type="samples", vectorized=True, n_resamples=4000,
                               rng=np.random.default_rng(2)).pvalue
    # two Monte-Carlo estimates of the same p: within 4 binomial s.d. of each other
    sd = np.sqrt(ref * (1 - ref) / 4000)
    assert abs(ours - ref) < 4 * sd + 0.005
    assert sign_flip_p(np.full(50, 0.3), n_resamples=999) == pytest.approx(1 / 1000)  # no flip reaches it but itself


def test_clustered_sign_flip_flips_whole_users():
    # user 1 has differences [1, 1], user 2 [2]: flips of user sums (2, 2): |mean| >= 4/3 only for (+,+) and (-,-)
    res = paired_difference(np.array([1.0, 1.0, 2.0]), np.zeros(3), clusters=np.array([1, 1, 2]), n_flips=100)
    assert res.diff == pytest.approx(4 / 3) and res.pvalue == pytest.approx(0.5)
