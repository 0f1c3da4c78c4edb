"""Corrections for many tests: Holm's step-down (family-wise error) and Benjamini-Hochberg (FDR).

Holm (1979): sort the m p-values ascending, p_(1) <= ... <= p_(m); the adjusted value of the
j-th is ``max_{i<=j} min(1, (m - i + 1) p_(i))``; reject where the adjusted p < alpha. It
controls the chance of any false rejection at alpha under any dependence.
Benjamini & Hochberg (1995): adjusted ``min_{i>=j} min(1, m p_(i) / i)``; controls the expected
share of false rejections (scipy.stats.false_discovery_control).
NaN p-values (tests that could not be run) are left NaN and do not count in m.
"""

from __future__ import annotations

import numpy as np
from scipy import stats as sps

from mmgrid.stats.errors import StatsError


def _clean(pvalues) -> tuple[np.ndarray, np.ndarray]:
    p = np.asarray(pvalues, dtype=np.float64).ravel()
    ok = np.isfinite(p)
    if np.any((p[ok] < 0) | (p[ok] > 1)):
        raise StatsError(f"p-values must lie in [0, 1], got {p[ok][(p[ok] < 0) | (p[ok] > 1)].tolist()}")
    return p, ok


def holm(pvalues) -> np.ndarray:
    """Holm-adjusted p-values, in the input order (NaN stays NaN)."""
    p, ok = _clean(pvalues)
    out = np.full(p.shape, np.nan)
    q = p[ok]
    m = q.size
    if m == 0:
        return out
    order = np.argsort(q, kind="stable")
    adj = np.minimum(1.0, (m - np.arange(m)) * q[order])
    adj = np.maximum.accumulate(adj)
    res = np.empty(m)
    res[order] = adj
    out[ok] = res
    return out


def benjamini_hochberg(pvalues) -> np.ndarray:
    """Benjamini-Hochberg-adjusted p-values (q-values), in the input order (NaN stays NaN)."""
    p, ok = _clean(pvalues)
    out = np.full(p.shape, np.nan)
    if ok.any():
        out[ok] = sps.false_discovery_control(p[ok], method="bh")
    return out
