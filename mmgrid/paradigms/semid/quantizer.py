"""Residual k-means quantizer (RQ-KMeans) turning item embeddings into unique semantic IDs.

LC-Rec (MMGRid section 3.2, ref. [41]) encodes each item's text embedding into
``levels`` codes, one per codebook of ``codebook_size`` entries (paper: 4 x 256), by
residual quantization: level ``l`` quantizes the residual left by levels ``< l``,

    r_0 = x,   c_l = argmin_k ||r_l - C_l[k]||,   r_{l+1} = r_l - C_l[c_l].

LC-Rec learns the codebooks with an RQ-VAE; mmgrid fits each codebook with k-means on the
residuals (RQ-KMeans), which is deterministic for a seed and needs no extra training loop.
The residual form and the code semantics (a coarse-to-fine path) are the same.

Collisions (two items with the same full code) are resolved so that every item's code is
unique: within a group of items sharing a code, the item closest to that code keeps it and
each other item moves to its next-nearest *free* last-level code under the same prefix
(LC-Rec likewise spreads collided items over the last level). Only if a prefix holds more
items than the last codebook has entries does an extra disambiguation level get appended
(TIGER-style index within the collision group; every item of the domain then has
``levels + 1`` codes, the extra level having as many entries as the largest group).
"""

from __future__ import annotations

import warnings
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from mmgrid.errors import ModelError


class SemIDError(ModelError):
    """Semantic IDs cannot be built for a domain (too few items for the codebook...)."""


@dataclass
class SemanticIDs:
    """Unique codes of a domain's items.

    Attributes:
        codes: int array [n_items, n_levels]; row ``i`` is item ``i``'s code.
        level_sizes: entries per level (``codebook_size`` for RQ levels, the largest
            collision group for an extra disambiguation level).
    """

    codes: np.ndarray
    level_sizes: list[int]

    @property
    def n_levels(self) -> int:
        return len(self.level_sizes)


def fit_rq_kmeans(
    x: np.ndarray, levels: int, codebook_size: int, seed: int = 0, domain: str = "?", n_init: int = 1
) -> tuple[np.ndarray, list[np.ndarray]]:
    """Fit residual k-means codebooks and assign codes.

    Args:
        x: float array [n, d] of item embeddings.
        levels: number of residual levels.
        codebook_size: entries per codebook.
        seed: k-means seed (codes are deterministic for a seed).
        domain: named in errors.
        n_init: k-means restarts per level.

    Returns:
        (codes int64 [n, levels], codebooks: list of float arrays [codebook_size, d]).

    Raises:
        SemIDError: fewer items than ``codebook_size`` or a bad size.
    """
    n = x.shape[0]
    if levels < 1 or codebook_size < 2:
        raise SemIDError(
            f"semid in domain {domain!r}: levels={levels}, codebook_size={codebook_size}; need levels >= 1 and "
            f"codebook_size >= 2 (paradigm_params.semid.levels / codebook_size)."
        )
    if n < codebook_size:
        raise SemIDError(
            f"semid in domain {domain!r}: {n} items but codebook_size={codebook_size}; k-means needs at least "
            f"as many items as codebook entries. Lower paradigm_params.semid.codebook_size to <= {n} "
            f"(or use a larger domain)."
        )
    # lazy: scikit-learn costs ~2.7 s to import; only building semantic IDs needs it
    from sklearn.cluster import KMeans

    residual = np.asarray(x, dtype=np.float64)
    codes = np.zeros((n, levels), dtype=np.int64)
    books: list[np.ndarray] = []
    for level in range(levels):
        km = KMeans(n_clusters=codebook_size, n_init=n_init, random_state=seed + level, max_iter=100)
        # Identical residuals (duplicate texts) make k-means find fewer distinct clusters; it
        # still returns codebook_size centres, and collision handling below separates items.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            codes[:, level] = km.fit_predict(residual)
        centres = km.cluster_centers_
        books.append(centres.astype(np.float32))
        residual = residual - centres[codes[:, level]]
    return codes, books


def resolve_collisions(codes: np.ndarray, last_book: np.ndarray, last_residual: np.ndarray) -> SemanticIDs:
    """Make every row of ``codes`` unique (see the module docstring for the rule).

    Args:
        codes: int array [n, L] (RQ codes).
        last_book: the last level's codebook [K, d].
        last_residual: the residual each item had *before* the last level [n, d]; its
            distance to each last-level entry orders the alternatives.

    Returns:
        SemanticIDs with unique codes (``L`` or ``L + 1`` levels).
    """
    codes = codes.copy()
    k = last_book.shape[0]
    dist = ((last_residual[:, None, :] - last_book[None, :, :]) ** 2).sum(-1)  # [n, K]
    by_prefix: dict[tuple[int, ...], list[int]] = defaultdict(list)
    for i, row in enumerate(codes):
        by_prefix[tuple(row[:-1])].append(i)
    overflow = False
    for members in by_prefix.values():
        if len(members) > k:
            overflow = True
            continue
        _spread_last_level(codes, members, dist)
    sizes = [k] * codes.shape[1]
    if overflow or len({tuple(r) for r in codes}) < len(codes):
        return _append_disambiguation(codes, sizes)
    return SemanticIDs(codes=codes, level_sizes=sizes)


def _spread_last_level(codes: np.ndarray, members: list[int], dist: np.ndarray) -> None:
    """Within one prefix: closest item keeps a contested code, others take the nearest free one."""
    taken: set[int] = set()
    # Items nearest to their own code claim first, so the best-fitting item keeps it.
    order = sorted(members, key=lambda i: dist[i, codes[i, -1]])
    pending = []
    for i in order:
        c = int(codes[i, -1])
        if c in taken:
            pending.append(i)
        else:
            taken.add(c)
    for i in pending:
        for c in np.argsort(dist[i], kind="stable"):
            if int(c) not in taken:
                codes[i, -1] = int(c)
                taken.add(int(c))
                break


def _append_disambiguation(codes: np.ndarray, sizes: list[int]) -> SemanticIDs:
    """Append an index-within-group level so that identical codes become distinct."""
    groups: dict[tuple[int, ...], int] = defaultdict(int)
    extra = np.zeros((codes.shape[0], 1), dtype=np.int64)
    for i, row in enumerate(codes):
        key = tuple(row)
        extra[i, 0] = groups[key]
        groups[key] += 1
    width = max(2, max(groups.values()))
    return SemanticIDs(codes=np.concatenate([codes, extra], axis=1), level_sizes=sizes + [width])


def semantic_ids(x: np.ndarray, levels: int, codebook_size: int, seed: int = 0, domain: str = "?") -> SemanticIDs:
    """Unique semantic IDs of items from their embeddings (RQ-KMeans + collision handling).

    Args:
        x: float array [n_items, d] (item text embeddings, by item_idx).
        levels: residual levels (paper: 4).
        codebook_size: entries per level (paper: 256).
        seed: k-means seed.
        domain: named in errors.

    Raises:
        SemIDError: see :func:`fit_rq_kmeans`.
    """
    codes, books = fit_rq_kmeans(x, levels, codebook_size, seed=seed, domain=domain)
    residual = np.asarray(x, dtype=np.float64)
    for level in range(levels - 1):
        residual = residual - books[level][codes[:, level]]
    return resolve_collisions(codes, books[-1].astype(np.float64), residual)
