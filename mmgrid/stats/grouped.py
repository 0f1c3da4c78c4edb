"""A mean, or a paired difference, over users who come in groups that share an effect: the interval is over
the groups.

Pooling the users of several evaluation windows (or (domain, window) cells) into one mean, a bootstrap over
users treats every user as independent. Where each window has its own shift, shared by all its users, the
pooled mean varies from one set of windows to the next by that shift's variance over the number of windows,
which no resampling of users sees. Here the unit is the group: with G groups, group g's column sum S_g over
its n_g columns (seeds averaged first) and N = sum n_g, the pooled mean is m = sum S_g / N (every column
weighted alike, as a pooled mean over users is), and its variance is the cluster-robust (sandwich) estimate
with the small-sample factor G / (G - 1),

    V = G / (G - 1) * sum_g (S_g - m n_g)^2 / N^2,

(Liang & Zeger 1986; Cameron & Miller, J. Human Resources 2015, sec. VI.C: CR1 with t(G - 1) critical values
for few clusters). The interval is m -/+ t_{G-1, (1+level)/2} sqrt(V) and the two-sided p of m = 0 is
2 P(t_{G-1} > |m| / sqrt(V)). With equal group sizes V is the sample variance of the group means over G, and
the interval is the one-sample t interval over the groups: exact when the group means are normal, whatever
the users within them do. The users' own variation is inside each S_g, so nothing is counted twice; what the
interval leaves out is variation shared by every group (a training seed's effect common to all windows).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats as sps

from mmgrid.stats.bootstrap import DEFAULT_LEVEL, as_matrix, check_level, cluster_index, cluster_sums
from mmgrid.stats.errors import StatsError
from mmgrid.stats.paired import PairedResult, paired_matrices

ROUND_OFF = 1e-12  # relative: a spread or mean below it (times the largest |value|) is the sums' round-off
TEST = "groups_t"  # PairedResult.test of a difference judged over groups


def grouped_mean_ci(values: np.ndarray, groups, level: float = DEFAULT_LEVEL,
                    fixed=None) -> tuple[float, float, float, float]:
    """The pooled mean of per-user values whose columns come in groups, with its interval over the groups.

    Args:
        values: ``[n_users]`` or ``[n_seeds, n_users]`` (seeds are averaged per column first); NaN-free.
        groups: the group of each column (e.g. its (domain, window) cell); any hashable labels.
        level: the interval's coverage.
        fixed: labels of groups whose values are known constants, not draws (a paired difference of a model
            with itself: exactly 0 in every world): they count in the mean with their columns and add no
            variance; the variance and the t's degrees of freedom come from the other G' groups,
            V = G' / (G' - 1) * sum_{g not fixed} (S_g - m' n_g)^2 / N^2, m' their own pooled mean.

    Returns:
        ``(mean, ci_low, ci_high, p)``, p the two-sided p of mean = 0 (module doc). With one group (not
        fixed) the interval and p are NaN (nothing to measure the groups' spread by); when every group's
        residual sum is 0 (to round-off, :data:`ROUND_OFF`) the interval has zero width and p is 0, or the
        mean is 0 and p is 1 where it is round-off too.
    """
    check_level(level)
    a = as_matrix(values)
    n = a.shape[1]
    if n == 0:
        return math.nan, math.nan, math.nan, math.nan
    if not np.isfinite(a).all():
        raise StatsError("per-user values contain NaN or Inf; drop the users without a value first")
    labels = np.asarray(groups).reshape(-1)
    inv, g = cluster_index(labels, n)
    sums, sizes = cluster_sums(a.mean(axis=0), inv, g)
    mean = float(sums.sum() / sizes.sum())
    tol = ROUND_OFF * float(np.abs(a).max())  # the sums' round-off at the values' own scale
    free = np.ones(g, dtype=bool)
    if fixed is not None and len(fixed):
        first = np.zeros(g, dtype=np.int64)
        first[inv[::-1]] = np.arange(n)[::-1]  # a column of each group, to read its label
        free = ~np.isin(labels[first], np.asarray(list(fixed), dtype=labels.dtype))
    gf = int(free.sum())
    if gf < 2:
        if abs(mean) <= tol:
            mean = 0.0  # round-off of the sums
        if gf == 0:  # every group fixed: the mean is known exactly
            return mean, mean, mean, 1.0 if mean == 0 else 0.0
        return mean, math.nan, math.nan, math.nan
    m_free = float(sums[free].sum() / sizes[free].sum())
    resid = sums[free] - m_free * sizes[free]
    se = math.sqrt(gf / (gf - 1) * float((resid ** 2).sum())) / float(sizes.sum())
    if se <= tol:
        mean = 0.0 if abs(mean) <= tol else mean  # a difference that cancels to round-off is no difference
        return mean, mean, mean, 1.0 if mean == 0 else 0.0
    q = float(sps.t.ppf((1.0 + level) / 2.0, gf - 1))
    p = float(2.0 * sps.t.sf(abs(mean) / se, gf - 1))
    return mean, mean - q * se, mean + q * se, p


def grouped_difference(a: np.ndarray, b: np.ndarray, groups, level: float = DEFAULT_LEVEL) -> PairedResult:
    """A - B over the same users, pooled over groups, with its interval and p over the groups.

    Args:
        a, b: ``[n_users]`` or ``[n_seeds, n_users]``, columns the same users in the same order (a side with
            one seed is paired with every seed of the other).
        groups: the group of each column (the (domain, window) cell the user was evaluated in).
        level: the interval's coverage.

    Returns:
        A :class:`mmgrid.stats.paired.PairedResult` with ``test`` :data:`TEST` (:func:`grouped_mean_ci` of the
        per-user differences); a group where A and B agree on every user and seed (the same model on both
        sides) is ``fixed`` there: a known 0 without variance. With one other group the interval and p are NaN.
    """
    x, y = paired_matrices(a, b)
    n_seeds = x.shape[0]
    labels = np.asarray(groups).reshape(-1)
    d = x - y
    same = [gr for gr in dict.fromkeys(labels.tolist()) if not np.any(d[:, labels == gr])]
    diff, lo, hi, p = grouped_mean_ci(d, labels, level, fixed=same)
    nan = math.nan
    return PairedResult(diff, lo, hi, p, TEST, x.shape[1], n_seeds, float(x.mean()) if x.size else nan,
                        float(y.mean()) if y.size else nan)
