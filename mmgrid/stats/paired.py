"""Paired comparison of two systems evaluated on the same users (and training seeds).

Ihemelandu & Ekstrand (SIGIR 2023, arXiv 2305.02461) find that with hundreds to thousands of
users the paired t-test, the bootstrap and the randomization (sign-flip) test keep their error
rates while the Wilcoxon and sign tests do not; they also ask for effect sizes. So a comparison
here reports the effect (mean per-user difference A - B), its percentile-bootstrap interval over
users and seeds (:func:`mmgrid.stats.mean_ci` on the differences) and a two-sided p from either

* ``"randomization"`` (default): the sign-flip test on the per-user differences averaged over
  seeds: p is the share of sign assignments whose |mean| reaches the observed |mean|; all 2^n
  assignments when 2^n_users <= n_resamples (exact), else ``n_resamples`` random ones plus the
  observed (p = (hits + 1) / (n_resamples + 1), never 0). This is what
  scipy.stats.permutation_test does with ``permutation_type="samples"`` on one sample; it is
  written out here as one matrix product because the report runs a hundred of these (scipy's
  loop took ~0.2 s each for 1000 users); tests/stats checks it against scipy and a hand count), or
* ``"t"``: the paired t-test on the same per-user differences (scipy.stats.ttest_1samp).

The test's unit is the user: seeds are averaged first (with two or three seeds a test across
seeds has no power); the interval resamples both users and seeds.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from mmgrid.stats.bootstrap import DEFAULT_LEVEL, DEFAULT_RESAMPLES, as_matrix, cluster_index, mean_ci
from mmgrid.stats.errors import StatsError

TESTS = ("randomization", "t")


@dataclass(frozen=True)
class PairedResult:
    """A - B over the same users: effect, interval, p."""

    diff: float  # mean over seeds and users of A - B
    ci_low: float
    ci_high: float
    pvalue: float  # two-sided
    test: str
    n_users: int
    n_seeds: int
    mean_a: float
    mean_b: float


DEFAULT_FLIPS = 10_000  # random sign assignments: p >= 1 / 10001, small enough to survive a Holm factor of ~50


def paired_matrices(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Both sides of a paired comparison as (seeds x users) matrices of one shape: the same users, and equal
    seeds or one side with one seed (broadcast to the other's).

    Raises:
        StatsError: different users, or different seed counts neither of which is one.
    """
    x, y = as_matrix(a), as_matrix(b)
    if x.shape[1] != y.shape[1]:
        raise StatsError(f"paired comparison needs the same users on both sides: {x.shape[1]} vs {y.shape[1]} users")
    if x.shape[0] != y.shape[0] and 1 not in (x.shape[0], y.shape[0]):
        raise StatsError(f"paired comparison: {x.shape[0]} vs {y.shape[0]} seeds; give equal seeds or one side with one")
    n_seeds = max(x.shape[0], y.shape[0])
    return np.broadcast_to(x, (n_seeds, x.shape[1])), np.broadcast_to(y, (n_seeds, y.shape[1]))


def paired_difference(a: np.ndarray, b: np.ndarray, test: str = "randomization", level: float = DEFAULT_LEVEL,
                      n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0, n_flips: int = DEFAULT_FLIPS,
                      clusters=None) -> PairedResult:
    """Mean difference A - B of per-user values, its bootstrap interval and a paired test's p.

    Args:
        a, b: ``[n_users]`` or ``[n_seeds, n_users]``, columns the same users in the same order.
            A system with one replicate (e.g. most-popular, which has no training seed) is
            compared with every seed of the other: a ``[1, n_users]`` side is broadcast.
        test: ``"randomization"`` (sign flip) or ``"t"`` (paired t).
        level: coverage of the interval.
        n_resamples: bootstrap replicates of the interval.
        seed: the generator's seed.
        n_flips: random sign assignments of the randomization test.
        clusters: the user of each column when a column is one test example: the interval draws
            whole users and the sign flips act on each user's summed differences (a user is the
            unit of both); the t-test then uses each user's mean difference.

    Returns:
        A :class:`PairedResult`. With no users every number is NaN; when every difference is
        zero the p is 1.

    Raises:
        ValueError: on unknown ``test``, mismatched users or seeds, or NaN values.
    """
    if test not in TESTS:
        raise StatsError(f"paired test {test!r} is not one of {TESTS}")
    x, y = paired_matrices(a, b)
    n_seeds = x.shape[0]
    n_users = x.shape[1]
    if n_users == 0:
        nan = float("nan")
        return PairedResult(nan, nan, nan, nan, test, 0, n_seeds, nan, nan)
    d = x - y
    diff, lo, hi = mean_ci(d, level=level, n_resamples=n_resamples, seed=seed, clusters=clusters)
    per_user = d.mean(axis=0)
    scale = 1.0
    if clusters is not None:
        inv, n_c = cluster_index(clusters, n_users)
        sizes = np.bincount(inv, minlength=n_c).astype(np.float64)
        sums = np.bincount(inv, weights=per_user, minlength=n_c)
        # sign flips on user sums: mean(signs * sums) * n_c / n_rows is the flipped mean of the rows
        per_user = sums / sizes if test == "t" else sums
        scale = n_c / n_users
    if not np.any(per_user != 0):
        p = 1.0
    elif n_users < 2:
        p = float("nan")
    elif test == "t":
        p = float(sps.ttest_1samp(per_user, 0.0).pvalue)
    else:
        p = sign_flip_p(per_user * scale, n_flips, seed)
    return PairedResult(float(diff), lo, hi, p, test, n_users, n_seeds, float(x.mean()), float(y.mean()))


def sign_flip_p(d: np.ndarray, n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> float:
    """Two-sided sign-flip randomization p of mean(d) = 0 (see the module doc)."""
    d = np.asarray(d, dtype=np.float64)
    n = d.size
    obs = abs(d.mean())
    tol = 1e-12 * max(1.0, obs)
    if n <= 20 and 2 ** n <= n_resamples:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=n)))
        return float(np.mean(np.abs(signs @ d) / n >= obs - tol))
    rng = np.random.default_rng(seed)
    hits = 0
    chunk = max(1, 4_000_000 // max(1, n))
    for s in range(0, n_resamples, chunk):
        b = min(chunk, n_resamples - s)
        signs = rng.integers(0, 2, size=(b, n)) * 2.0 - 1.0
        hits += int(np.sum(np.abs(signs @ d) / n >= obs - tol))
    return (hits + 1) / (n_resamples + 1)
