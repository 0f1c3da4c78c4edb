"""The sparse path of the collaborative item embeddings (large catalogs) against the dense, exact one."""

import numpy as np

from mmgrid.paradigms.collab import (cooccurrence, ppmi, sparse_cooccurrence, sparse_ppmi_embeddings,
                                     svd_embeddings)


def _sequences(seed: int = 0, n: int = 6000) -> tuple[np.ndarray, np.ndarray]:
    """Users sorted, items drawn mostly from one of 8 groups of unequal size (distinct eigenvalues)."""
    rng = np.random.default_rng(seed)
    users = np.sort(rng.integers(0, 400, n))
    sizes = np.array([5, 8, 12, 17, 23, 30, 40, 65])
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    g = users % 8
    items = starts[g] + (rng.random(n) * sizes[g]).astype(int)
    return users, np.where(rng.random(n) < 0.2, rng.integers(0, 200, n), items)


def test_sparse_counts_equal_the_dense_counts() -> None:
    users, items = _sequences()
    for window in (1, 5):
        np.testing.assert_array_equal(sparse_cooccurrence(users, items, 200, window).toarray(),
                                      cooccurrence(users, items, 200, window))


def test_sparse_embeddings_equal_the_dense_svd_ones() -> None:
    users, items = _sequences()
    dense = svd_embeddings(ppmi(cooccurrence(users, items, 200, 5)), 6)
    sparse = sparse_ppmi_embeddings(sparse_cooccurrence(users, items, 200, 5), 6)
    np.testing.assert_allclose(sparse, dense, rtol=0, atol=1e-9)
    np.testing.assert_allclose(np.linalg.norm(sparse, axis=1), 1.0, rtol=1e-12)
