"""Robust lambda*: the argmax of a seed-averaged per-user curve, with a bootstrap interval.

MMGRid section 5.2 reads lambda* as the lambda of theta_t1 + lambda (theta_t2 - theta_t1)
(Eq. 10) with the best test metric. One evaluation's curve is jagged (a few hundred users), so
here:

* the curve is the mean over users and training seeds of per-user values ``[n_seeds,
  n_lambdas, n_users]`` (the same users at every lambda and seed);
* it may be smoothed by a centred running mean over ``smooth`` neighbouring grid points
  (``smooth=1``: no smoothing; at the grid's ends the window shrinks to the points that exist);
  with an evenly spaced grid this is a box filter of width ``smooth * step``;
* lambda* is its argmax; values equal after rounding to 1e-9 tie and the tie goes to the lambda
  closest to ``prefer`` (1 = the t2 checkpoint), then to the smaller lambda: :func:`argmax_lambda`,
  the one home of lambda*'s rule (:func:`mmgrid.sweep.selection.select_lambda_star` applies it to
  a curve of recorded means);
* the interval is a percentile bootstrap: each replicate draws users with replacement (one draw
  shared by every lambda and seed) and seeds with replacement, recomputes the (smoothed) curve
  and its argmax;
* ``on_edge`` flags a maximum on the grid's first or last point: the true maximum may lie
  outside the grid; ``edge_share`` is the share of replicates whose argmax is on an edge.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from mmgrid.stats.bootstrap import (DEFAULT_LEVEL, DEFAULT_RESAMPLES, check_level, cluster_index, cluster_sums,
                                    percentile_band, percentile_interval, resample_counts, resample_weights, resampled_means)
from mmgrid.stats.errors import StatsError

TIE_DECIMALS = 9  # metrics equal after rounding to 1e-9 decimals tie (the one definition)


@dataclass(frozen=True)
class LambdaStar:
    """lambda* of one domain and user group with its uncertainty."""

    lambda_star: float
    ci_low: float
    ci_high: float
    on_edge: bool  # the seed-averaged curve peaks on the grid's first or last point
    edge_side: str  # "low", "high" or "" (not on an edge)
    edge_share: float  # share of bootstrap replicates whose argmax is on an edge
    best: float  # the (smoothed) curve's value at lambda*
    curve: np.ndarray  # the seed-averaged (smoothed) curve, [n_lambdas]
    n_users: int
    n_seeds: int
    # the bootstrap replicates of lambda* behind the interval, so that an interval at another level (e.g. a
    # family's Bonferroni level, :func:`family_interval`) comes from the same draws
    replicates: np.ndarray | None = field(default=None, repr=False, compare=False)


def as_curves(values: np.ndarray) -> np.ndarray:
    """``[n_lambdas, n_users]`` or ``[n_seeds, n_lambdas, n_users]`` as a float 3-d array."""
    a = np.asarray(values, dtype=np.float64)
    if a.ndim == 2:
        a = a[None]
    if a.ndim != 3:
        raise StatsError(f"per-user curves must be [n_lambdas, n_users] or [n_seeds, n_lambdas, n_users], got {a.shape}")
    if not np.isfinite(a).all():
        raise StatsError("per-user curves contain NaN or Inf; drop users without a value at every lambda first")
    return a


def smooth_curve(curve: np.ndarray, window: int) -> np.ndarray:
    """Centred running mean along axis 0 over ``window`` points (odd, >= 1); the window shrinks at the ends."""
    if window < 1 or window % 2 == 0:
        raise StatsError(f"smoothing window must be an odd number >= 1, got {window}")
    c = np.asarray(curve, dtype=np.float64)
    if window == 1:
        return c
    h = window // 2
    n = c.shape[0]
    cs = np.concatenate([np.zeros((1, *c.shape[1:])), np.cumsum(c, axis=0)])
    lo = np.clip(np.arange(n) - h, 0, n)
    hi = np.clip(np.arange(n) + h + 1, 0, n)
    shape = (n,) + (1,) * (c.ndim - 1)
    return (cs[hi] - cs[lo]) / (hi - lo).reshape(shape)


def argmax_lambda(lambdas: np.ndarray, curves: np.ndarray, prefer: float = 1.0) -> np.ndarray:
    """lambda* (MMGRid 5.2): the lambda of the maximum of each column of ``curves`` ([n_lambdas] or
    [n_lambdas, k]); values equal after rounding to :data:`TIE_DECIMALS` decimals tie, and a tie goes
    to the lambda closest to ``prefer``, then to the smaller lambda. The one home of this rule."""
    lam = np.asarray(lambdas, dtype=np.float64)
    c = np.round(np.asarray(curves, dtype=np.float64), TIE_DECIMALS)
    order = np.lexsort((lam, np.abs(lam - prefer)))  # most preferred first
    idx = np.argmax(c[order], axis=0)  # first maximum in preference order
    return lam[order][idx]


def seed_averaged_curve(values: np.ndarray, smooth: int = 1) -> np.ndarray:
    """The mean over seeds and users of ``[n_seeds, n_lambdas, n_users]``, smoothed (``smooth`` points)."""
    return smooth_curve(as_curves(values).mean(axis=(0, 2)), smooth)


def bootstrap_curves(values: np.ndarray, n_resamples: int, rng: np.random.Generator,
                     seed_weights: np.ndarray | None = None, clusters=None) -> np.ndarray:
    """``[n_lambdas, n_resamples]`` replicate curves: users and seeds drawn with replacement.

    Args:
        values: ``[n_seeds, n_lambdas, n_users]``.
        n_resamples: replicates.
        rng: the generator (users are drawn from it).
        seed_weights: ``[n_resamples, n_seeds]`` seed weights to share with other domains
            (the same training seeds trained every domain); drawn here when None.
        clusters: the user of each column when a column is one test example (whole users are drawn).
    """
    a = as_curves(values)
    s, n_l, n_u = a.shape
    inv, n_c = cluster_index(clusters, n_u)
    flat = a.reshape(s * n_l, n_u)
    if clusters is None:
        users = flat @ resample_weights(rng, n_resamples, n_u).T  # [S*L, B]
    else:  # whole users drawn: per-user sums and sizes, no [B, U] weight matrix
        users = resampled_means(*cluster_sums(flat, inv, n_c), resample_counts(rng, n_resamples, n_c))
    w_seeds = resample_weights(rng, n_resamples, s) if seed_weights is None else np.asarray(seed_weights)
    if w_seeds.shape != (n_resamples, s):
        raise StatsError(f"seed weights of shape {w_seeds.shape}, expected {(n_resamples, s)}")
    per_seed = users.reshape(s, n_l, n_resamples)  # [S, L, B]
    return np.einsum("slb,bs->lb", per_seed, w_seeds)


def robust_lambda_star(lambdas, values: np.ndarray, smooth: int = 1, prefer: float = 1.0,
                       level: float = DEFAULT_LEVEL, n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0,
                       clusters=None) -> LambdaStar:
    """lambda* of the seed-averaged curve, its bootstrap interval and an edge flag (see module doc).

    Args:
        lambdas: the grid, ``[n_lambdas]``, ascending.
        values: per-user metric values ``[n_seeds, n_lambdas, n_users]`` (or without the seed axis).
        smooth: running-mean window in grid points (odd; 1 = none).
        prefer: tie-break target.
        level: coverage of the interval.
        n_resamples: bootstrap replicates.
        seed: the generator's seed.
        clusters: the user of each column (see :func:`bootstrap_curves`).

    Returns:
        A :class:`LambdaStar`.
    """
    lam = np.asarray(lambdas, dtype=np.float64)
    a = as_curves(values)
    if a.shape[1] != lam.size or lam.size == 0:
        raise StatsError(f"{lam.size} lambdas but curves of {a.shape[1]} points")
    if np.any(np.diff(lam) <= 0):
        raise StatsError("lambdas must be strictly ascending")
    if a.shape[2] == 0:
        raise StatsError("lambda*: no users in the curves")
    curve = smooth_curve(a.mean(axis=(0, 2)), smooth)
    star = float(argmax_lambda(lam, curve, prefer))
    reps = lambda_star_replicates(lam, a, smooth, prefer, n_resamples, np.random.default_rng(seed), clusters=clusters)
    lo, hi = percentile_interval(reps, level)
    edges = (lam[0], lam[-1])
    on_edge = lam.size > 1 and star in edges
    side = "" if not on_edge else ("low" if star == lam[0] else "high")
    edge_share = float(np.isin(reps, edges).mean()) if lam.size > 1 else 0.0
    best = float(curve[np.argmin(np.abs(lam - star))])
    return LambdaStar(star, lo, hi, bool(on_edge), side, edge_share, best, curve, a.shape[2], a.shape[0], reps)


def family_level(level: float, m: int) -> float:
    """The per-member level at which m intervals hold together at ``level`` (Bonferroni: 1 - (1 - level) / m).

    An existential claim over m domains ("some domain's lambda* is not 1") judged on per-domain intervals at
    ``level`` errs with probability up to 1 - level^m under the null (23% for m = 5 at 95%); judged on intervals
    at this level, at most 1 - level. For "some member differs" this is Holm's first step, which is all of Holm
    that such a claim uses."""
    check_level(level)
    if m < 1:
        raise StatsError(f"family_level: m = {m}; need at least one member")
    return 1.0 - (1.0 - level) / m


def family_interval(star: LambdaStar, level: float, m: int) -> tuple[float, float]:
    """``star``'s percentile interval at :func:`family_level` (``level``, ``m``), from its own bootstrap replicates."""
    if star.replicates is None:
        raise StatsError("family_interval: this lambda* carries no bootstrap replicates")
    return percentile_interval(star.replicates, family_level(level, m))


def lambda_star_replicates(lambdas, values: np.ndarray, smooth: int = 1, prefer: float = 1.0,
                           n_resamples: int = DEFAULT_RESAMPLES, rng: np.random.Generator | None = None,
                           seed_weights: np.ndarray | None = None, clusters=None) -> np.ndarray:
    """``[n_resamples]`` bootstrap replicates of lambda* (users and seeds resampled, argmax recomputed)."""
    rng = rng if rng is not None else np.random.default_rng(0)
    reps = smooth_curve(bootstrap_curves(values, n_resamples, rng, seed_weights, clusters), smooth)
    return argmax_lambda(np.asarray(lambdas, float), reps, prefer)


def curve_band(values: np.ndarray, smooth: int = 1, level: float = DEFAULT_LEVEL,
               n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0, clusters=None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The seed-averaged (smoothed) curve with a pointwise percentile-bootstrap band (users and seeds resampled).

    Returns:
        ``(curve, low, high)``, each ``[n_lambdas]``.
    """
    reps = smooth_curve(bootstrap_curves(values, n_resamples, np.random.default_rng(seed), clusters=clusters), smooth)
    lo, hi = percentile_band(reps, level, axis=1)
    return seed_averaged_curve(values, smooth), lo, hi


def domains_lambda_star_replicates(lambdas, per_domain: list[np.ndarray], smooth: int = 1, prefer: float = 1.0,
                                   n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0,
                                   clusters: list | None = None) -> np.ndarray:
    """``[n_resamples, n_domains]`` lambda* replicates of several domains resampled together.

    Users are resampled within each domain; the training seeds are drawn once per replicate and
    shared by all domains (seed s trained every domain's replicate s). Every domain's curves must
    have the same seeds (axis 0). ``lambdas`` is one grid for every domain or a list with one grid
    per domain (a grid extended at an edge differs).
    """
    curves = [as_curves(v) for v in per_domain]
    if not curves:
        return np.zeros((n_resamples, 0))
    n_seeds = curves[0].shape[0]
    if any(c.shape[0] != n_seeds for c in curves):
        raise StatsError(f"every domain needs the same seeds, got {[c.shape[0] for c in curves]}")
    rng = np.random.default_rng(seed)
    w_seeds = resample_weights(rng, n_resamples, n_seeds)
    out = np.empty((n_resamples, len(curves)))
    grids = (list(lambdas) if isinstance(lambdas, (list, tuple)) and len(lambdas) and np.ndim(lambdas[0]) == 1
             else [lambdas] * len(curves))
    if len(grids) != len(curves):
        raise StatsError(f"{len(grids)} lambda grids for {len(curves)} domains")
    for j, c in enumerate(curves):
        out[:, j] = lambda_star_replicates(grids[j], c, smooth, prefer, n_resamples, rng, w_seeds,
                                           None if clusters is None else clusters[j])
    return out
