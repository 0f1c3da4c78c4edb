"""Top-K ranking metrics: pure functions on ranked item lists.

With one held-out target per example (next-item prediction, as in MMGRid section 4.1
and the Orbit paper section 5.2):

* Recall@K = 1 if the target is among the top K, else 0, averaged over examples
  (the hit ratio; with one relevant item recall and hit ratio coincide).
* NDCG@K = 1 / log2(rank + 2) for a 0-based rank < K, else 0: DCG with binary gain
  (Jarvelin & Kekalainen 2002, "Cumulated gain-based evaluation of IR techniques",
  ACM TOIS 20(4)) divided by the ideal DCG, which is 1 for a single relevant item.
"""

from __future__ import annotations

import numpy as np


def target_ranks(ranked: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """0-based position of each target in its ranked list, or -1 when it is absent.

    Args:
        ranked: int array [n, L]: item indices, best first.
        targets: int array [n]: the held-out item of each example.
    """
    ranked = np.asarray(ranked)
    targets = np.asarray(targets).reshape(-1, 1)
    hits = ranked == targets
    found = hits.any(axis=1)
    return np.where(found, hits.argmax(axis=1), -1)


def per_user_metrics(ranked: np.ndarray, targets: np.ndarray,
                     ks: list[int] | tuple[int, ...] = (10, 20)) -> dict[str, np.ndarray]:
    """Per-example ``{"recall@K": float64 [n], "ndcg@K": float64 [n]}`` for every K in ``ks``.

    The mean of each array over any subset of examples is that subset's Recall@K / NDCG@K
    (:func:`ranking_metrics` computes exactly that mean, with the same float operations).
    """
    ranked = np.asarray(ranked)
    out: dict[str, np.ndarray] = {}
    for k in ks:
        ranks = target_ranks(ranked[:, :k], targets)
        out[f"recall@{k}"] = (ranks >= 0).astype(np.float64)
        out[f"ndcg@{k}"] = np.where(ranks >= 0, 1.0 / np.log2(np.maximum(ranks, 0) + 2.0), 0.0)
    return out


def recall_at_k(ranked: np.ndarray, targets: np.ndarray, k: int) -> float:
    """Mean Recall@K for one target per example (0.0 for no examples)."""
    values = per_user_metrics(ranked, targets, (k,))[f"recall@{k}"]
    return float(values.mean()) if len(values) else 0.0


def ndcg_at_k(ranked: np.ndarray, targets: np.ndarray, k: int) -> float:
    """Mean NDCG@K for one target per example: ``1 / log2(rank + 2)`` inside the top K."""
    values = per_user_metrics(ranked, targets, (k,))[f"ndcg@{k}"]
    return float(values.mean()) if len(values) else 0.0


def ranking_metrics(ranked: np.ndarray, targets: np.ndarray,
                    ks: list[int] | tuple[int, ...] = (10, 20)) -> dict[str, float]:
    """``{"recall@K": ..., "ndcg@K": ...}`` for every K in ``ks``: the means of :func:`per_user_metrics`."""
    per = per_user_metrics(ranked, targets, ks)
    return {name: (float(v.mean()) if len(v) else 0.0) for name, v in per.items()}
