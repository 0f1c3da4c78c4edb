"""Power, MDE, sample sizes and Monte Carlo standard errors against known truth.

Oracles: closed forms, Cohen's (1988) table for the paired t-test, scipy.stats.norm / nct computed
independently here, and simulations whose true coverage / type-I rate is known, judged within their
own Monte Carlo standard errors.
"""

import math

import numpy as np
import pytest
from scipy import stats as sps

from mmgrid.stats import StatsError, mean_ci, paired_difference
from mmgrid.stats.power import (mcse_bias, mcse_rate, mde, mde_design, mde_from_interval, mde_paired, n_for_effect,
                                plan_design, power_normal, se_from_interval, t_power, within_mcse, z_sum)
from mmgrid.stats.verdict import mde_note


def test_z_sum_is_the_textbook_2_80():
    assert z_sum(0.05, 0.8) == pytest.approx(sps.norm.ppf(0.975) + sps.norm.ppf(0.8), rel=1e-9)
    assert z_sum(0.05, 0.8) == pytest.approx(2.8016, abs=1e-4)


def test_mde_approx_and_exact_against_scipy_power():
    se = 0.37
    approx, exact = mde(se), mde(se, exact=True)
    assert approx == pytest.approx(2.8016 * se, rel=1e-4)
    # scipy, independently: power of a two-sided z-test at the exact MDE is 0.8
    z = sps.norm.ppf(0.975)
    pw = sps.norm.cdf(exact / se - z) + sps.norm.cdf(-exact / se - z)
    assert pw == pytest.approx(0.8, abs=1e-9)
    assert power_normal(exact, se) == pytest.approx(pw, rel=1e-9)
    # the far tail adds < 1e-3 se at 80% power, so the exact MDE is a hair below the approximation
    assert 0 < approx - exact < 1e-3 * se
    assert math.isnan(mde(0.0)) and math.isnan(mde(float("nan")))


def test_power_at_zero_effect_is_alpha():
    assert power_normal(0.0, 1.0, 0.05) == pytest.approx(0.05, rel=1e-9)


def test_se_from_a_normal_interval_round_trips():
    se = 0.02
    lo, hi = 0.1 - sps.norm.ppf(0.975) * se, 0.1 + sps.norm.ppf(0.975) * se
    assert se_from_interval(lo, hi) == pytest.approx(se, rel=1e-9)
    assert mde_from_interval(lo, hi) == pytest.approx(mde(se), rel=1e-9)
    assert math.isnan(se_from_interval(float("nan"), 1.0))


def test_n_for_effect_matches_cohens_table_and_the_closed_form():
    # Cohen (1988) Table 2.4.1 / G*Power: paired t, d = 0.5, alpha 0.05 two-sided, power 0.8 -> n = 34
    assert n_for_effect(0.5, 1.0, test="t") == 34
    # d = 0.2 -> 199 (t), closed form z: ceil((2.8016 / 0.2)^2) = 197
    assert n_for_effect(0.2, 1.0, test="t") == 199
    assert n_for_effect(0.2, 1.0, test="z") == math.ceil((z_sum() / 0.2) ** 2) == 197
    # the t answer is the smallest n with power >= 0.8 (scipy's nct as oracle)
    n = n_for_effect(0.35, 1.3, test="t")
    assert t_power(0.35 / 1.3, n) >= 0.8 > t_power(0.35 / 1.3, n - 1)
    with pytest.raises(StatsError):
        n_for_effect(0.0, 1.0)


def test_plan_design_reaches_power_and_says_when_seeds_forbid_it():
    plan = plan_design(0.01, sd_user=0.2, sd_seed=0.004, seeds=(1, 3, 10))
    assert plan[0].n_users is None  # one seed: seed variance 1.6e-5 > allowed (0.01 / 2.8)^2 = 1.27e-5
    for p in plan[1:]:
        assert p.n_users is not None
        assert mde_design(p.n_users, p.n_seeds, 0.2, 0.004) <= 0.01 + 1e-12
        assert mde_design(p.n_users - 1, p.n_seeds, 0.2, 0.004) > 0.01  # the smallest such n
    assert plan[2].n_users < plan[1].n_users  # more seeds, fewer users
    # without seed variance it is the one-stage formula
    assert plan_design(0.5, 1.0, 0.0, seeds=(1,))[0].n_users == n_for_effect(0.5, 1.0)


def test_mde_paired_from_per_user_differences():
    rng = np.random.default_rng(0)
    d = rng.normal(0, 2.0, 400)
    assert mde_paired(d) == pytest.approx(z_sum() * d.std(ddof=1) / 20, rel=1e-9)
    # seeds averaged first; clusters average a user's rows
    two = np.vstack([d, d])
    assert mde_paired(two) == pytest.approx(mde_paired(d), rel=1e-12)
    users = np.repeat(np.arange(200), 2)
    per = d.reshape(200, 2).mean(axis=1)
    assert mde_paired(d, clusters=users) == pytest.approx(z_sum() * per.std(ddof=1) / math.sqrt(200), rel=1e-9)


def test_mcse_of_a_rate_matches_the_spread_of_simulated_rates():
    rng = np.random.default_rng(1)
    p, n = 0.3, 50
    rates = rng.binomial(n, p, 4000) / n
    r = mcse_rate(15, 50)
    assert r.rate == pytest.approx(0.3) and r.mcse == pytest.approx(math.sqrt(0.3 * 0.7 / 50))
    assert rates.std() == pytest.approx(r.mcse, rel=0.05)
    assert mcse_rate(np.array([True, False, True, True])).hits == 3
    with pytest.raises(StatsError):
        mcse_rate(5, 3)


def test_mcse_of_a_bias_matches_the_spread_of_simulated_biases():
    rng = np.random.default_rng(2)
    b = mcse_bias(rng.normal(1.1, 0.5, 200), 1.0)
    assert b.bias == pytest.approx(0.1, abs=3 * b.mcse)
    assert b.mcse == pytest.approx(0.5 / math.sqrt(200), rel=0.15)
    assert b.emp_se == pytest.approx(0.5, rel=0.15)


def test_coverage_of_a_simulated_95_interval_is_95_within_mcse():
    """Known truth: bootstrap intervals (mmgrid.stats.mean_ci) of the mean of N(0.2, 1) samples of 200 users."""
    rng = np.random.default_rng(3)
    reps, truth = 400, 0.2
    hit = []
    for i in range(reps):
        x = rng.normal(truth, 1.0, 200)
        _, lo, hi = mean_ci(x, n_resamples=400, seed=i)
        hit.append(lo <= truth <= hi)
    cov = mcse_rate(np.array(hit))
    # 95% +- 3 MCSE (MCSE at the nominal rate: sqrt(.95 .05 / 400) = 1.1%)
    assert abs(cov.rate - 0.95) <= 3 * math.sqrt(0.95 * 0.05 / reps), cov.text(1)


def test_type_one_rate_of_the_paired_test_on_a_null_is_alpha_within_mcse():
    """Known truth: A and B are draws of the same distribution, so P(interval excludes 0) = 5%."""
    rng = np.random.default_rng(4)
    reps = 400
    rejects = []
    for i in range(reps):
        a = rng.normal(0.3, 0.2, 150)
        b = rng.normal(0.3, 0.2, 150)
        r = paired_difference(a, b, n_resamples=400, seed=i, n_flips=500)
        rejects.append(not (r.ci_low <= 0 <= r.ci_high))
    rate = mcse_rate(np.array(rejects))
    assert within_mcse(rate, 0.05, k=3), rate.text(1)
    assert rate.rate >= 0.05 - 3 * math.sqrt(0.05 * 0.95 / reps)


def test_power_formula_predicts_the_simulated_rejection_rate():
    """At the MDE a z-test rejects 80% of the time (simulated, judged within 3 MCSE)."""
    rng = np.random.default_rng(5)
    n, sd, reps = 100, 1.0, 1000
    effect = mde(sd / math.sqrt(n))
    x = rng.normal(effect, sd, (reps, n))
    z = x.mean(axis=1) / (sd / math.sqrt(n))
    rate = mcse_rate(np.abs(z) > sps.norm.ppf(0.975))
    assert abs(rate.rate - 0.8) <= 3 * math.sqrt(0.8 * 0.2 / reps)


def test_mde_note_wording():
    se = 0.01
    lo, hi = -1.96 * se, 1.96 * se
    text = mde_note(lo, hi, reported=0.05, what="lambda_hat* - 1 (N@10)", unit=" pts", scale=100)
    assert text.startswith("inconclusive: this run detects |lambda_hat* - 1 (N@10)| >= 2.80 pts at 80% power")
    assert "reports 5.00 pts, above it" in text
    small = mde_note(lo, hi, reported=0.001, scale=100, unit=" pts")
    assert "below it" in small
    # MMGRid Table 3's mean gain (2.17e-5 NDCG@10 = 0.00217 points) must not print as 0.00
    tiny = mde_note(lo, hi, reported=0.0000217, scale=100, unit=" pts")
    assert "reports 0.0022 pts, below it" in tiny
    assert mde_note(float("nan"), 1.0) == "inconclusive (no interval: nothing to size)"
