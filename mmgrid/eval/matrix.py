"""The accuracy matrix of continual learning and the transfer measures derived from it.

``R[i, j]`` is the metric of the model trained through period ``i`` evaluated on period
``j`` (T x T). ``b[j]`` is the metric on period ``j`` of the model before any of the
periods (the start, e.g. the paradigm built from the base or a most-popular ranking).

* BWT = 1/(T-1) * sum_{i<T-1} (R[T-1, i] - R[i, i])   (Lopez-Paz & Ranzato 2017,
  "Gradient Episodic Memory for Continual Learning", NeurIPS, Eq. 3 / section 4)
* FWT = 1/(T-1) * sum_{i>=1} (R[i-1, i] - b[i])        (same paper and place)
* Forgetting of period j: f_j = max_{l<T-1} R[l, j] - R[T-1, j], averaged over
  j < T-1 (Chaudhry et al. 2018, "Riemannian Walk for Incremental Learning", ECCV, Eq. 7-8).
"""

from __future__ import annotations

import numpy as np


def _square(R: np.ndarray) -> np.ndarray:
    R = np.asarray(R, dtype=float)
    if R.ndim != 2 or R.shape[0] != R.shape[1]:
        raise ValueError(f"the accuracy matrix must be square (T x T), got shape {R.shape}.")
    return R


def backward_transfer(R: np.ndarray) -> float:
    """BWT (Lopez-Paz & Ranzato 2017); NaN for fewer than 2 periods."""
    R = _square(R)
    T = R.shape[0]
    if T < 2:
        return float("nan")
    return float(np.mean([R[T - 1, i] - R[i, i] for i in range(T - 1)]))


def forward_transfer(R: np.ndarray, b: np.ndarray) -> float:
    """FWT (Lopez-Paz & Ranzato 2017) against the start-of-training scores ``b``; NaN for T < 2."""
    R = _square(R)
    T = R.shape[0]
    b = np.asarray(b, dtype=float)
    if T < 2:
        return float("nan")
    return float(np.mean([R[i - 1, i] - b[i] for i in range(1, T)]))


def forgetting(R: np.ndarray) -> float:
    """Average forgetting (Chaudhry et al. 2018, Eq. 7-8); NaN for fewer than 2 periods."""
    R = _square(R)
    T = R.shape[0]
    if T < 2:
        return float("nan")
    return float(np.mean([R[: T - 1, j].max() - R[T - 1, j] for j in range(T - 1)]))


def transfer_summary(R: np.ndarray, b: np.ndarray | None = None) -> dict[str, float]:
    """``{"bwt", "fwt", "forgetting"}`` (fwt NaN without ``b``)."""
    return {
        "bwt": backward_transfer(R),
        "fwt": forward_transfer(R, b) if b is not None else float("nan"),
        "forgetting": forgetting(R),
    }
