"""The interval over groups (mmgrid.stats.grouped): a hand-computed case, unequal groups against the sandwich
formula written out, and coverage of a planted difference where a shift shared by each group's users dominates
(where the bootstrap over users covers far less than its nominal 95%)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mmgrid.stats import grouped_difference, grouped_mean_ci, paired_difference


def test_the_hand_computed_case():
    # groups (1, 3), (2, 2), (6, 4): sums 4, 4, 10 over 2 columns each; mean 3; group means 2, 2, 5 with sample
    # variance ((-1)^2 + (-1)^2 + 2^2) / 2 = 3, SE sqrt(3 / 3) = 1; t_{2, 0.975} = 4.302653 (tables);
    # p = 2 P(t_2 > 3) = 2 (1/2 - 3 / (2 sqrt(11))) = 0.095466 (t_2's CDF is 1/2 + t / (2 sqrt(2 + t^2)))
    mean, lo, hi, p = grouped_mean_ci(np.array([1.0, 3.0, 2.0, 2.0, 6.0, 4.0]), ["a", "a", "b", "b", "c", "c"])
    assert mean == 3.0
    assert (lo, hi) == pytest.approx((3.0 - 4.302653, 3.0 + 4.302653), abs=1e-6)
    assert p == pytest.approx(1.0 - 3.0 / math.sqrt(11.0), abs=1e-9)
    # seeds are averaged per column first; a difference is the mean of the per-user differences
    two_seeds = np.array([[0.0, 2.0, 1.0, 3.0, 5.0, 5.0], [2.0, 4.0, 3.0, 1.0, 7.0, 3.0]])
    assert grouped_mean_ci(two_seeds, [0, 0, 1, 1, 2, 2])[:3] == pytest.approx((mean, lo, hi))
    r = grouped_difference(two_seeds + 1.0, np.ones(6), [0, 0, 1, 1, 2, 2])
    assert (r.diff, r.ci_low, r.ci_high, r.pvalue) == pytest.approx((3.0, lo, hi, p))
    assert (r.test, r.n_seeds, r.n_users) == ("groups_t", 2, 6)
    assert r.mean_a == pytest.approx(4.0) and r.mean_b == 1.0


def test_unequal_groups_follow_the_sandwich_formula():
    rng = np.random.default_rng(3)
    sizes = [3, 7, 12, 5]
    x = rng.normal(size=sum(sizes))
    g = np.repeat(np.arange(4), sizes)
    mean, lo, hi, _ = grouped_mean_ci(x, g, level=0.9)
    S = np.array([x[g == k].sum() for k in range(4)])
    n = np.array(sizes, dtype=float)
    m = S.sum() / n.sum()
    se = math.sqrt(4 / 3 * ((S - m * n) ** 2).sum()) / n.sum()
    assert mean == pytest.approx(x.mean())
    assert (lo, hi) == pytest.approx((m - 2.353363 * se, m + 2.353363 * se), rel=1e-6)  # t_{3, 0.95}


def test_one_group_has_no_interval_and_constant_groups_a_point():
    assert all(math.isnan(v) for v in grouped_mean_ci(np.ones(5), np.zeros(5))[1:])
    assert grouped_mean_ci(np.full(4, 0.5), [0, 0, 1, 1]) == (0.5, 0.5, 0.5, 0.0)
    with pytest.raises(ValueError, match="NaN"):
        grouped_mean_ci(np.array([1.0, np.nan]), [0, 1])
    with pytest.raises(ValueError, match="same users"):
        grouped_difference(np.ones(3), np.ones(4), [0, 1, 2])


def test_coverage_of_a_planted_difference_where_window_shifts_dominate():
    """8 windows of 40 users; each window's difference is shifted by N(0, 0.03^2) for all its users, the users
    add N(0, 0.02^2) each: SD of the pooled mean = sqrt(0.03^2 / 8 + 0.02^2 / 320) ~ 0.0107, of which the users
    explain 0.0011. The interval over groups covers the planted 0.01 about 95% of the time; the bootstrap over
    users, blind to the shifts, covers it far less."""
    rng = np.random.default_rng(11)
    G, n, planted, reps = 8, 40, 0.01, 1000
    groups = np.repeat(np.arange(G), n)
    hits = 0
    for _ in range(reps):
        d = planted + np.repeat(rng.normal(0, 0.03, G), n) + rng.normal(0, 0.02, G * n)
        _, lo, hi, _ = grouped_mean_ci(d, groups)
        hits += lo <= planted <= hi
    rate = hits / reps
    assert abs(rate - 0.95) < 3 * math.sqrt(0.95 * 0.05 / reps)  # within 3 Monte Carlo SEs (2.1%)
    users = 0
    for _ in range(100):
        d = planted + np.repeat(rng.normal(0, 0.03, G), n) + rng.normal(0, 0.02, G * n)
        r = paired_difference(d, np.zeros_like(d), n_resamples=300, n_flips=10)
        users += r.ci_low <= planted <= r.ci_high
    assert users / 100 < 0.4


def test_a_difference_that_cancels_to_round_off_is_no_difference():
    # each group's values sum to 0 up to round-off (a symmetric spread): the mean is 0, not a tiny positive
    spread = np.tile(np.linspace(-0.001, 0.001, 20), 4)
    assert grouped_mean_ci(spread, np.repeat(np.arange(4), 20)) == (0.0, 0.0, 0.0, 1.0)


def test_a_group_where_both_sides_are_the_same_model_is_a_known_zero():
    # group 0: A == B on every user (the strategy deployed latest's model there); groups 1-3 differ by 1, 2, 3.
    # mean = (0 + 2 + 4 + 6) / 8 = 1.5; the free groups' own mean 2, residual sums -2, 0, 2:
    # V = 3 / 2 * 8 / 8^2 = 0.1875, SE 0.4330, t with 2 degrees of freedom (4.302653)
    b = np.array([0.3, 0.4, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    a = b + np.array([0.0, 0.0, 1.0, 1.0, 2.0, 2.0, 3.0, 3.0])
    cells = [0, 0, 1, 1, 2, 2, 3, 3]
    r = grouped_difference(a, b, cells)
    se = math.sqrt(0.1875)
    assert r.diff == pytest.approx(1.5)
    assert (r.ci_low, r.ci_high) == pytest.approx((1.5 - 4.302653 * se, 1.5 + 4.302653 * se), abs=1e-6)
    # as a plain mean over the 4 groups (group means 0, 1, 2, 3): SE sqrt((5 / 3) / 4), t_3 = 3.182446
    _, lo, hi, _ = grouped_mean_ci(a - b, cells)
    assert (lo, hi) == pytest.approx((1.5 - 3.182446 * math.sqrt(5 / 12), 1.5 + 3.182446 * math.sqrt(5 / 12)),
                                     abs=1e-6)
    # every group fixed: a difference of 0 with nothing to vary
    same = grouped_difference(b, b, cells)
    assert (same.diff, same.ci_low, same.ci_high, same.pvalue) == (0.0, 0.0, 0.0, 1.0)
