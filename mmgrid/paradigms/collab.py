"""Collaborative item embeddings for semantic IDs: what items are consumed together.

Semantic IDs built from item text alone carry no collaborative signal; where text says little (short
titles), items that users consume together get unrelated codes and the next-code task has little to
generalise from. LETTER (Wang et al. 2024) regularises the RQ tokenizer towards collaborative
embeddings; here the collaborative embeddings are computed directly and deterministically from the
training interactions, with no model to train:

1. co-occurrence counts ``C_ij``: how often items ``i`` and ``j`` are within ``window`` positions of
   each other in a user's time-ordered sequence (symmetric; both directions counted);
2. positive PMI (Levy & Goldberg 2014, "Neural word embedding as implicit matrix factorization"):
   ``M_ij = max(0, log(C_ij * C_tot / (C_i * C_j)))`` with ``C_i = sum_j C_ij``;
3. a truncated SVD ``M = U S V^T``, item embedding ``U_d S_d^{1/2}`` (their Eq. 13's symmetric split),
   rows L2-normalised;
4. items without any co-occurrence in the phases used (released later) get a ridge regression from
   their text embedding onto the collaborative space, fitted on the other items.

``semid.codes``: ``text`` quantizes the text embedding (as before), ``collab`` the collaborative one,
``fused`` the concatenation of both (each part L2-normalised, so they weigh equally).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

CODE_SOURCES = ("text", "collab", "fused")
PHASE_CHOICES = ("first", "train")


def ordered_phases(interactions: pl.DataFrame) -> list[str]:
    """The phases present in ``interactions``, in time order (by their earliest interaction)."""
    first = interactions.group_by("phase").agg(pl.col("timestamp").min()).sort("timestamp", "phase")
    return first.get_column("phase").to_list()


def collab_phases(interactions: pl.DataFrame, which: str) -> list[str]:
    """``first``: the earliest phase (the data of the first stage, when codes are built); ``train``:
    every phase but the latest (the evaluation window: ``test``, or ``valid`` in a validation split)."""
    phases = ordered_phases(interactions)
    if which == "first":
        return phases[:1]
    return phases[:-1] if len(phases) > 1 else phases


def following_pairs(users: np.ndarray, items: np.ndarray, window: int) -> tuple[np.ndarray, np.ndarray]:
    """``(a, b)``: every item ``a`` and each item ``b`` that follows it within ``window`` positions of
    the same user's sequence. ``users`` / ``items`` are the interactions sorted by user, then time."""
    users, items = np.asarray(users), np.asarray(items, dtype=np.int64)
    firsts, seconds = [], []
    for d in range(1, max(1, int(window)) + 1):
        same = users[d:] == users[:-d]
        firsts.append(items[:-d][same])
        seconds.append(items[d:][same])
    return np.concatenate(firsts), np.concatenate(seconds)


def cooccurrence(users: np.ndarray, items: np.ndarray, n_items: int, window: int) -> np.ndarray:
    """Symmetric counts ``[n_items, n_items]`` of item pairs within ``window`` positions in a user's
    sequence (:func:`following_pairs` in both directions, zero diagonal)."""
    a, b = following_pairs(users, items, window)
    c = np.zeros((n_items, n_items), dtype=np.float64)
    np.add.at(c, (a, b), 1.0)
    np.add.at(c, (b, a), 1.0)
    np.fill_diagonal(c, 0.0)
    return c


def ppmi(counts: np.ndarray) -> np.ndarray:
    """Positive pointwise mutual information of a symmetric count matrix (zero rows stay zero)."""
    total = counts.sum()
    if total <= 0:
        return np.zeros_like(counts)
    row = counts.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        pmi = np.log(counts * total / np.outer(row, row))
    return np.where(np.isfinite(pmi) & (pmi > 0), pmi, 0.0)


def svd_embeddings(m: np.ndarray, dim: int) -> np.ndarray:
    """``U_d S_d^{1/2}`` of the symmetric matrix ``m``, signs fixed (largest-magnitude entry of each
    column positive) so the result does not depend on the LAPACK build; rows L2-normalised."""
    u, s, _ = np.linalg.svd(m, hermitian=True)
    order = np.argsort(-s, kind="stable")[: min(dim, m.shape[0])]
    u, s = u[:, order], s[order]
    sign = np.sign(u[np.abs(u).argmax(axis=0), np.arange(u.shape[1])])
    e = u * np.where(sign == 0, 1.0, sign) * np.sqrt(np.maximum(s, 0.0))
    return _normalise(e)


def _normalise(x: np.ndarray) -> np.ndarray:
    n = np.linalg.norm(x, axis=1, keepdims=True)
    return np.where(n > 0, x / np.where(n > 0, n, 1.0), 0.0)


#: Catalogs up to this many co-occurring items take the dense, exact path (a full symmetric SVD:
#: O(n^3), n^2 float64); larger ones (paper scale: tens of thousands of items) a sparse count matrix
#: and the top ``dim`` eigenpairs of the sparse PPMI matrix (scipy.sparse.linalg.eigsh).
DENSE_MAX_ITEMS = 4096


def sparse_cooccurrence(users: np.ndarray, items: np.ndarray, n_items: int, window: int) -> "Any":
    """:func:`cooccurrence` as a scipy CSR matrix (memory in the number of co-occurring pairs)."""
    from scipy import sparse  # lazy: scipy.sparse ~0.2 s, only for large catalogs

    a, b = following_pairs(users, items, window)
    keep = a != b
    r = np.concatenate([a[keep], b[keep]])
    c = np.concatenate([b[keep], a[keep]])
    m = sparse.coo_matrix((np.ones(len(r)), (r, c)), shape=(n_items, n_items)).tocsr()
    m.sum_duplicates()
    return m


def sparse_ppmi_embeddings(counts: "Any", dim: int) -> np.ndarray:
    """:func:`ppmi` then :func:`svd_embeddings` on a sparse symmetric count matrix: PPMI on the stored
    entries only, then the ``dim`` eigenpairs of largest magnitude (eigsh, which for a symmetric matrix
    gives the singular values as |eigenvalue|), signs fixed and rows normalised as in the dense path."""
    from scipy.sparse.linalg import eigsh  # lazy: only for large catalogs

    m = counts.tocoo()
    total = m.data.sum()
    row = np.asarray(counts.sum(axis=1)).reshape(-1)
    pmi = np.log(m.data * total / (row[m.row] * row[m.col]))
    keep = pmi > 0
    p = type(counts)((pmi[keep], (m.row[keep], m.col[keep])), shape=counts.shape)
    k = min(dim, counts.shape[0] - 1)
    vals, vecs = eigsh(p, k=k, which="LM", v0=np.ones(counts.shape[0]))
    order = np.argsort(-np.abs(vals), kind="stable")
    u, s = vecs[:, order], np.abs(vals[order])
    sign = np.sign(u[np.abs(u).argmax(axis=0), np.arange(u.shape[1])])
    return _normalise(u * np.where(sign == 0, 1.0, sign) * np.sqrt(s))


def collab_embeddings(domain: Any, phases: list[str], dim: int, window: int,
                      text: np.ndarray, ridge: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Collaborative embeddings ``[n_items, dim]`` (rows unit length) from ``phases``' interactions,
    and the mask of items that had co-occurrences; the others are predicted from ``text`` by ridge
    regression fitted on the former (zero rows if no item has any). Catalogs above
    :data:`DENSE_MAX_ITEMS` items take the sparse path (same quantities, iterative eigensolver)."""
    inter = domain.interactions.filter(pl.col("phase").is_in(phases)).sort("user_idx", "timestamp", "item_idx")
    users, items = inter.get_column("user_idx").to_numpy(), inter.get_column("item_idx").to_numpy()
    emb = np.zeros((domain.n_items, dim), dtype=np.float64)
    if domain.n_items <= DENSE_MAX_ITEMS:
        counts = cooccurrence(users, items, domain.n_items, window)
        warm = counts.sum(axis=1) > 0
        if warm.sum() < 2:
            return emb, warm
        e = svd_embeddings(ppmi(counts[np.ix_(warm, warm)]), dim)
    else:
        sc = sparse_cooccurrence(users, items, domain.n_items, window)
        warm = np.asarray(sc.sum(axis=1)).reshape(-1) > 0
        if warm.sum() < 2:
            return emb, warm
        idx = np.flatnonzero(warm)
        e = sparse_ppmi_embeddings(sc[idx][:, idx], dim)
    emb[warm, : e.shape[1]] = e
    if (~warm).any():
        t = np.asarray(text, dtype=np.float64)
        tw = t[warm]
        w = np.linalg.solve(tw.T @ tw + ridge * np.eye(t.shape[1]), tw.T @ emb[warm])
        emb[~warm] = _normalise(t[~warm] @ w)
    return emb, warm


def code_inputs(mode: str, text: np.ndarray, collab: np.ndarray | None, collab_weight: float = 0.5) -> np.ndarray:
    """What RQ-KMeans quantizes for ``semid.codes``: the text embedding, the collaborative one, or
    both side by side (``fused``: each part L2-normalised, then scaled so that the collaborative part
    carries ``collab_weight`` of the squared norm: squared distances add up in that proportion)."""
    if mode == "text":
        return np.asarray(text, dtype=np.float64)
    assert collab is not None
    if mode == "collab":
        return collab
    t = _normalise(np.asarray(text, dtype=np.float64)) * np.sqrt(1.0 - collab_weight)
    return np.concatenate([t, _normalise(collab) * np.sqrt(collab_weight)], axis=1)
