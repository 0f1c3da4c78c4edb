"""Grounding scores of the text paradigm (BIGRec step 2 and its history-aware terms):
pure functions on similarity matrices, popularity counts and histories.

BIGRec (Bao et al. 2023, "A Bi-Step Grounding Paradigm for Large Language Models in Recommendation
Systems", grounding step with statistics injection): a generated title's L2 distance to each item's
embedding is divided by
``(1 + popularity)^gamma``; :func:`popularity_adjust` is mmgrid's raw form, :func:`bigrec_adjust`
BIGRec's own min-max scaled form; :func:`ground_scores` adds the history terms described in
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
    return divide_by_popularity(sims_distance(sims), counts, gamma)


def divide_by_popularity(dist: torch.Tensor, counts: np.ndarray, gamma: float) -> torch.Tensor:
    """mmgrid's raw statistics injection on a distance ``[n, n_items]``: ``-D / (1 + N)^gamma``, ``N`` = count /
    max count (:func:`_scaled`). Higher is better."""
    return -dist.float() / (1 + _scaled(counts))[None, :] ** gamma


def _scaled(counts: np.ndarray) -> torch.Tensor:
    """Counts divided by the largest (at least 1): mmgrid's raw popularity in [0, 1]."""
    pop = torch.as_tensor(np.asarray(counts, dtype=np.float32))
    return pop / pop.max().clamp(min=1.0)


def minmax_rows(x: torch.Tensor) -> torch.Tensor:
    """Each row of ``x`` scaled to [0, 1]: ``(x - min) / (max - min)`` along the last dimension.
    A constant row (max = min, where BIGRec's code divides 0 by 0) becomes all 0: every entry ties."""
    lo = x.min(-1, keepdim=True).values
    span = x.max(-1, keepdim=True).values - lo
    return torch.where(span > 0, (x - lo) / torch.where(span > 0, span, torch.ones_like(span)), torch.zeros_like(x))


def bigrec_adjust(dist: torch.Tensor, counts: np.ndarray | None, gamma: float) -> torch.Tensor:
    """BIGRec's grounding with statistics injection as its code computes it (Bao et al. 2023,
    section 3.2.2, Eq. 3-4): rank items by ``D~_i * (1 + N~_i)^-gamma``, smallest first, with

    * ``D~ = (D - min_i D) / (max_i D - min_i D)``, the L2 distance ``D`` ``[n, n_items]`` of the
      generated text's embedding to every item's, min-max scaled per row (per user);
    * ``N~ = (N - min_i N) / (max_i N - min_i N)``, the popularity ``N`` (counts; BIGRec divides
      them by their sum first, which the min-max scaling cancels) min-max scaled over the items;
    * ``gamma`` >= 0 tuned on validation (0, or ``counts`` None: the scaled distance alone).

    A constant row or constant counts scale to 0 (:func:`minmax_rows`). The item nearest to the
    generated text has ``D~ = 0`` and stays first whatever its popularity; popularity re-orders the
    rest. Returns a score (higher is better): the negated adjusted distance, ``[n, n_items]``.
    """
    score = minmax_rows(dist.float())
    if counts is not None and gamma > 0:
        pop = minmax_rows(torch.as_tensor(np.asarray(counts, dtype=np.float64)).float())
        score = score * (1 + pop)[None, :] ** -gamma
    return -score


def sims_distance(sims: torch.Tensor) -> torch.Tensor:
    """The L2 distance of unit vectors from their cosine: ``sqrt(2 - 2 cos)`` (clamped at 0)."""
    return (2 - 2 * sims.float()).clamp(min=0).sqrt()


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


def base_score(sims: torch.Tensor | None, counts: np.ndarray | None, gamma: float, scale: str = "raw",
               dist: torch.Tensor | None = None) -> torch.Tensor:
    """The grounding score before the history terms (higher is better), ``[n, n_items]``.

    ``G`` = the beams' similarity (:meth:`TextParadigm._ground`). ``scale: raw``: with popularity
    (``counts`` given) BIGRec's ``-D / (1 + N)^gamma`` with ``N`` = count / max count
    (:func:`popularity_adjust`), else ``G`` itself. ``scale: minmax``: BIGRec's own form
    (:func:`bigrec_adjust`): the distance min-max scaled per row, popularity min-max scaled over
    items. ``dist`` (``[n, n_items]``) is the L2 distance where it is not ``sqrt(2 - 2 G)``
    (embeddings that are not unit vectors; then ``scale: raw`` without popularity gives ``-D``, and
    ``sims`` may be None: it is not read).
    """
    if scale == "minmax":
        if dist is None:
            assert sims is not None  # sims is read wherever dist is not given
            dist = sims_distance(sims)
        return bigrec_adjust(dist, counts, gamma)
    if dist is not None:
        return divide_by_popularity(dist, counts, gamma) if counts is not None else -dist.float()
    assert sims is not None  # sims is read wherever dist is not given
    return popularity_adjust(sims, counts, gamma) if counts is not None else sims.float()


def history_terms(score: torch.Tensor, hist_w: torch.Tensor | None, items: torch.Tensor, history_weight: float,
                  cooc: torch.Tensor | None, cooc_weight: float) -> torch.Tensor:
    """``score`` plus the history terms of :func:`ground_scores` whose weights are > 0."""
    if hist_w is not None and history_weight > 0:
        score = score + history_weight * (hist_w @ items.float()) @ items.float().T
    if hist_w is not None and cooc is not None and cooc_weight > 0:
        c = hist_w @ cooc
        score = score + cooc_weight * c / c.max(1, keepdim=True).values.clamp(min=1e-12)
    return score


def ground_scores(sims: torch.Tensor, counts: np.ndarray | None, gamma: float, hist_w: torch.Tensor | None,
                  items: torch.Tensor, history_weight: float, cooc: torch.Tensor | None,
                  cooc_weight: float) -> torch.Tensor:
    """The grounding score of every item (higher is better), ``[n, n_items]``.

    ``G`` = the beams' similarity (:meth:`TextParadigm._ground`). With popularity
    (``counts`` given, gamma > 0) the base is BIGRec's ``-D / (1 + pop)^gamma``
    (:func:`popularity_adjust`), else ``G`` itself (:func:`base_score`, ``scale: raw``; the text
    paradigm calls :func:`base_score` and :func:`history_terms` itself, to pass ``scale``). Then,
    when their weights are > 0:

        + history_weight * sum_j w_j cos(title_j, title_i)        (content similarity to the history)
        + cooc_weight * C_i / max_i C_i,  C_i = sum_j w_j P(i | j)  (what followed the history's items)

    with ``w_j`` the recency weights of :func:`history_weights` and ``P`` of :func:`cooc_matrix`.
    Both weights 0 and no popularity give exactly the similarities (today's behaviour).
    """
    return history_terms(base_score(sims, counts, gamma), hist_w, items, history_weight, cooc, cooc_weight)
