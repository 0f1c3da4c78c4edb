"""Grounding scores of the text paradigm (BIGRec step 2 and the history-aware terms of issue 16):
pure functions on similarity matrices, popularity counts and histories.

BIGRec (Bao et al. 2023, "A Bi-Step Grounding Paradigm for Large Language Models in Recommendation
Systems", grounding step with statistics injection): a generated title's L2 distance to each item's
embedding is divided by
``(1 + popularity)^gamma``; :func:`ground_scores` adds the history terms described in
``mmgrid.paradigms.text``.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from mmgrid.paradigms.collab import following_pairs


def popularity_adjust(sims: torch.Tensor, counts: np.ndarray, gamma: float) -> torch.Tensor:
    """BIGRec's statistics injection (Bao et al., step 2): rank by ``D_i / (1 + N_i)^gamma``.

    ``D_i`` is the L2 distance of unit embeddings, ``sqrt(2 - 2 cos)``, and ``N_i`` the
    item's training popularity scaled to [0, 1] by the most popular item. Returns a score
    (higher is better): the negated adjusted distance.
    """
    dist = (2 - 2 * sims.float()).clamp(min=0).sqrt()
    pop = torch.as_tensor(np.asarray(counts, dtype=np.float32))
    pop = pop / pop.max().clamp(min=1.0)
    return -dist / (1 + pop)[None, :] ** gamma


def history_weights(histories: Sequence[Sequence[int]], n_items: int, max_history: int, decay: float) -> torch.Tensor:
    """``[n, n_items]`` recency weights of each history's items: the j-th most recent (j = 0, 1, ...)
    of the last ``max_history`` gets ``decay^j``; rows sum to 1 (an empty history: all zero)."""
    w = torch.zeros(len(histories), n_items)
    for r, h in enumerate(histories):
        hist = list(h)[-max_history:] if max_history > 0 else []
        for j, item in enumerate(reversed(hist)):
            w[r, item] += decay ** j
    total = w.sum(1, keepdim=True)
    return torch.where(total > 0, w / total.clamp(min=1e-12), w)


def cooc_matrix(users: np.ndarray, items: np.ndarray, n_items: int, window: int) -> torch.Tensor:
    """``P[j, i]``: of the items that follow ``j`` within ``window`` steps of a user's sequence, the
    share that is ``i`` (rows sum to 1; an item never followed has a zero row). ``users`` and
    ``items`` are interactions sorted by user, then time."""
    a, b = following_pairs(users, items, window)
    counts = np.zeros((n_items, n_items), dtype=np.float64)
    np.add.at(counts, (a, b), 1.0)
    total = counts.sum(1, keepdims=True)
    return torch.from_numpy((counts / np.maximum(total, 1.0)).astype(np.float32))


def ground_scores(sims: torch.Tensor, counts: np.ndarray | None, gamma: float, hist_w: torch.Tensor | None,
                  items: torch.Tensor, history_weight: float, cooc: torch.Tensor | None,
                  cooc_weight: float) -> torch.Tensor:
    """The grounding score of every item (higher is better), ``[n, n_items]``.

    ``G`` = the beams' similarity (:meth:`TextParadigm._ground`). With popularity
    (``counts`` given, gamma > 0) the base is BIGRec's ``-D / (1 + pop)^gamma``
    (:func:`popularity_adjust`), else ``G`` itself. Then, when their weights are > 0:

        + history_weight * sum_j w_j cos(title_j, title_i)        (content similarity to the history)
        + cooc_weight * C_i / max_i C_i,  C_i = sum_j w_j P(i | j)  (what followed the history's items)

    with ``w_j`` the recency weights of :func:`history_weights` and ``P`` of :func:`cooc_matrix`.
    Both weights 0 and no popularity give exactly the similarities (today's behaviour).
    """
    score = popularity_adjust(sims, counts, gamma) if counts is not None else sims.float()
    if hist_w is not None and history_weight > 0:
        score = score + history_weight * (hist_w @ items.float()) @ items.float().T
    if hist_w is not None and cooc is not None and cooc_weight > 0:
        c = hist_w @ cooc
        score = score + cooc_weight * c / c.max(1, keepdim=True).values.clamp(min=1e-12)
    return score
