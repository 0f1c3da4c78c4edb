"""Top-k item ranking from a score matrix, with per-row exclusions (the history)."""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np
import torch

from mmgrid.errors import ConfigError


def topk_items(scores: torch.Tensor, k: int, exclude: Sequence[Iterable[int]] | None = None) -> np.ndarray:
    """Top-``k`` column indices of each row, best first, optionally masking some columns per row.

    Args:
        scores: ``[n, n_items]`` float scores (higher is better).
        k: how many to return; must not exceed ``n_items``.
        exclude: per row, item indices that may not be returned (e.g. the history).

    Returns:
        ``np.ndarray [n, k]`` of int64 item indices.
    """
    n_items = scores.shape[1]
    if k > n_items or k < 1:
        raise ConfigError(f"rank: k={k} must be between 1 and the domain's {n_items} items.")
    scores = scores.float().clone()
    if exclude is not None:
        for row, items in enumerate(exclude):
            idx = [i for i in items if 0 <= i < n_items]
            # Keep at least k candidates even for a history that covers the catalog.
            if idx and n_items - len(set(idx)) >= k:
                scores[row, idx] = float("-inf")
    return torch.topk(scores, k, dim=1).indices.cpu().numpy().astype(np.int64)
