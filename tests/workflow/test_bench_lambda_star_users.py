"""bench/lambda_star_users.py: the lambda* interval's user part against the lambda* of all the users."""

from __future__ import annotations

import numpy as np

from tests.workflow.conftest import load_bench


def _bench():
    return load_bench("lambda_star_users")


def test_alike_users_are_always_covered_and_the_truth_is_the_argmax() -> None:
    """Users with one curve: every subset's interval is the argmax itself, so every subset covers it."""
    lam = np.linspace(0, 1.5, 7)
    curve = -((lam - 0.5) ** 2)
    values = np.broadcast_to(curve[None, :, None], (2, 7, 50)).copy()
    full, hits = _bench().subsample_coverage(lam, values, 0.25, 10)
    assert full == 0.5 and hits == 10


def test_noisy_users_about_a_clear_peak_are_covered_near_the_nominal_rate() -> None:
    """A peaked curve (lambda* 0.75) under per-user noise: the full sample finds 0.75, and the subsets' 95%
    intervals cover it in most trials (a coverage near 0 or 1 by construction would not test the interval)."""
    rng = np.random.default_rng(3)
    lam = np.linspace(0, 1.5, 7)
    curve = 1.0 - 0.4 * (lam - 0.75) ** 2
    values = curve[None, :, None] + rng.normal(0, 1.0, (3, 1, 2000)) + rng.normal(0, 0.3, (3, 7, 2000))
    full, hits = _bench().subsample_coverage(lam, values, 0.25, 30, n_resamples=300)
    assert full == 0.75
    assert 24 <= hits <= 30
