"""Bootstrap intervals of a mean over users (and training seeds).

The interval of a mean metric is a percentile bootstrap (Efron & Tibshirani 1993, ch. 13)
over the two sources of variation a finding must survive: the test users and the training
seeds. With values ``[n_seeds, n_users]`` each replicate draws users with replacement (the
same draw for every seed, because the same users are evaluated on every replicate) and,
independently, seeds with replacement, then averages (a two-stage, "cases" bootstrap; Davison
& Hinkley 1997, sec. 3.8). With one seed this is the ordinary bootstrap over users.

:func:`resample_weights` gives the same two-stage draw as weights (multinomial counts divided
by the sample size), which lets statistics of whole curves be resampled by matrix products
(:mod:`mmgrid.stats.lambda_star`).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from mmgrid.stats.errors import StatsError

DEFAULT_RESAMPLES = 2000
DEFAULT_LEVEL = 0.95


def as_matrix(values: np.ndarray) -> np.ndarray:
    """Per-user values as ``[n_seeds, n_users]`` float64 (one evaluation's ``[n_users]`` is one seed)."""
    a = np.asarray(values, dtype=np.float64)
    if a.ndim == 1:
        a = a[None, :]
    if a.ndim != 2:
        raise StatsError(f"per-user values must be [n_users] or [n_seeds, n_users], got shape {a.shape}")
    return a


def check_level(level: float) -> None:
    """A coverage must lie strictly between 0 and 1."""
    if not 0.0 < level < 1.0:
        raise StatsError(f"level must be in (0, 1), got {level}")


def percentile_interval(stats: np.ndarray, level: float = DEFAULT_LEVEL, finite: bool = True) -> tuple[float, float]:
    """The ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles of bootstrap replicates (NaNs dropped;
    with ``finite``, infinite replicates too); ``(nan, nan)`` where none is left."""
    check_level(level)
    s = np.asarray(stats, dtype=np.float64)
    s = s[np.isfinite(s)] if finite else s[~np.isnan(s)]
    if s.size == 0:
        return float("nan"), float("nan")
    lo, hi = percentile_band(s, level)
    return float(lo), float(hi)


def percentile_band(stats: np.ndarray, level: float = DEFAULT_LEVEL, axis: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles of replicates along ``axis`` (a pointwise
    band over curves; NaNs propagate), the one place an interval's quantiles are computed."""
    check_level(level)
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(stats, [alpha, 1.0 - alpha], axis=axis)
    return lo, hi


def resample_counts(rng: np.random.Generator, n_resamples: int, n: int) -> np.ndarray:
    """``[n_resamples, n]`` how often each of ``n`` cases is drawn in each bootstrap sample of size ``n``.

    Cases are drawn uniformly with replacement (``rng.integers``) and counted, which is fast and
    turns a resampled mean into a matrix product.
    """
    idx = rng.integers(0, n, size=(n_resamples, n))
    flat = idx + (np.arange(n_resamples, dtype=np.int64) * n)[:, None]
    return np.bincount(flat.ravel(), minlength=n_resamples * n).reshape(n_resamples, n)


@lru_cache(maxsize=16)
def _draws(seed: int, n_resamples: int, n_users: int, n_seeds: int, chunk: int) -> tuple[tuple[np.ndarray, np.ndarray], ...]:
    """The (user counts, seed counts) chunks of :func:`mean_ci` for one seed and shape, cached: a report
    bootstraps hundreds of cells over the same users, and the draw depends only on these numbers."""
    rng = np.random.default_rng(seed)
    out = []
    for s in range(0, n_resamples, chunk):
        b = min(chunk, n_resamples - s)
        cu, cs = resample_counts(rng, b, n_users).astype(np.float64), resample_counts(rng, b, n_seeds).astype(np.float64)
        cu.flags.writeable = cs.flags.writeable = False
        out.append((cu, cs))
    return tuple(out)


def resample_weights(rng: np.random.Generator, n_resamples: int, n: int) -> np.ndarray:
    """``[n_resamples, n]`` bootstrap weights: how often each case is drawn, divided by ``n``.

    A weighted mean with one row of these weights is the mean of one bootstrap sample.
    """
    if n == 0:
        return np.zeros((n_resamples, 0))
    return resample_counts(rng, n_resamples, n) / float(n)


def cluster_index(clusters, n: int) -> tuple[np.ndarray, int]:
    """(cluster number of each of ``n`` columns, number of clusters); every column its own cluster when None."""
    if clusters is None:
        return np.arange(n), n
    c = np.asarray(clusters).reshape(-1)
    if c.size != n:
        raise StatsError(f"clusters: {c.size} labels for {n} columns; give one user id per column")
    _, inv = np.unique(c, return_inverse=True)
    return inv.reshape(-1), int(inv.max()) + 1 if inv.size else 0



def cluster_sums(values: np.ndarray, inv: np.ndarray, n_clusters: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-cluster sums ``[r, n_clusters]`` of the rows of ``values [r, n]`` and the cluster sizes ``[n_clusters]``.

    A resampled (weighted) mean of the columns is then a ratio of two small products (see
    :func:`resampled_means`), instead of a ``[b, n]`` weight matrix per statistic."""
    if n_clusters == 0:
        return np.zeros(np.shape(values)[:-1] + (0,)), np.zeros(0)
    order = np.argsort(inv, kind="stable")
    sizes = np.bincount(inv, minlength=n_clusters)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])  # every cluster has a column (cluster_index)
    v = np.asarray(values, dtype=np.float64)
    return np.add.reduceat(v[..., order], starts, axis=-1), sizes.astype(np.float64)


def resampled_means(sums: np.ndarray, sizes: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``[r, b]`` means of each row over the columns of the clusters drawn: with cluster draw counts
    ``counts [b, n_clusters]``, sum(counts_c * sum_c) / sum(counts_c * size_c), the mean over every
    drawn cluster's columns (the same number as per-column weights ``counts[:, inv]``, normalised
    per row, applied to the columns)."""
    return (sums @ counts.T) / (counts @ sizes)[None, :]


def mean_ci(values: np.ndarray, level: float = DEFAULT_LEVEL, n_resamples: int = DEFAULT_RESAMPLES,
            seed: int = 0, clusters=None) -> tuple[float, float, float]:
    """Mean of per-user values with a percentile-bootstrap interval over users and seeds.

    Args:
        values: ``[n_users]`` or ``[n_seeds, n_users]`` (columns are the same users); NaN-free.
            A column may be one test example: with ``clusters`` (the user of each column) whole
            users are drawn with all their examples (a cluster bootstrap), so a user with several
            test examples counts once in the draw.
        level: the interval's coverage (0.95: the 2.5 and 97.5 percentiles).
        n_resamples: bootstrap replicates.
        seed: the resampling generator's seed (results are reproducible).

    Returns:
        ``(mean, ci_low, ci_high)``; ``(nan, nan, nan)`` for no users; a zero-width interval
        for a single user and seed.
    """
    check_level(level)
    a = as_matrix(values)
    n_seeds, n_users = a.shape
    if n_users == 0 or n_seeds == 0:
        return float("nan"), float("nan"), float("nan")
    if not np.isfinite(a).all():
        raise StatsError("per-user values contain NaN or Inf; drop the users without a value first")
    mean = float(a.mean())
    if n_users * n_seeds == 1:
        return mean, mean, mean
    stats = np.empty(n_resamples)
    if clusters is None:
        # the original draw and arithmetic, kept bit for bit: the registry's stored intervals
        # (mmgrid.registry.peruser.intervals) reproduce exactly these generator calls
        rng = np.random.default_rng(seed)
        chunk = max(1, 4_000_000 // max(1, n_users * n_seeds))
        for s in range(0, n_resamples, chunk):
            b = min(chunk, n_resamples - s)
            users = rng.integers(0, n_users, size=(b, n_users))
            seeds = rng.integers(0, n_seeds, size=(b, n_seeds))
            per_seed = a[:, users].mean(axis=2)           # [n_seeds, b]: each seed's mean over the drawn users
            stats[s:s + b] = np.take_along_axis(per_seed.T, seeds, axis=1).mean(axis=1)
    else:
        # users as clusters: counts of drawn users (cached per shape and seed) turn every
        # resampled mean into one matrix product; a report bootstraps hundreds of cells this way
        inv, n_clusters = cluster_index(clusters, n_users)
        chunk = max(1, 4_000_000 // max(1, n_users))
        sums, sizes = cluster_sums(a, inv, n_clusters)   # [n_seeds, n_clusters], [n_clusters]
        s = 0
        for c_users, c_seeds in _draws(int(seed), int(n_resamples), n_clusters, n_seeds, chunk):
            b = c_users.shape[0]                          # c_users [b, n_clusters]: one draw for every seed
            per_seed = resampled_means(sums, sizes, c_users)  # [n_seeds, b]: each seed's mean over the drawn users' rows
            stats[s:s + b] = (per_seed.T * c_seeds).sum(axis=1) / n_seeds
            s += b
    lo, hi = percentile_interval(stats, level)
    return mean, lo, hi
