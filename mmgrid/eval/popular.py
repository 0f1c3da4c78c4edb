"""The most-popular baseline: every user gets the items with the most interactions in
the training phases, most popular first (ties by item index). Its counts go into the
registry as a tiny checkpoint (paradigm ``popular``) so that its results are queried
like any model's."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

from mmgrid.configtools import stable_hash


def popular_ranking(counts: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` most counted items, most first; ties go to the lower index."""
    counts = np.asarray(counts)
    order = np.lexsort((np.arange(len(counts)), -counts))
    return order[: min(k, len(counts))]


def put_popular(registry: Any, domain: Any, phases: Sequence[str], fingerprint: str, seed: int = 0) -> str:
    """Store the popularity counts of ``domain`` over ``phases`` (coords paradigm ``popular``)."""
    counts = domain.popularity(list(phases))
    coords = {"paradigm": "popular", "domain": domain.name, "period": phases[-1], "variant": "default"}
    params = {"method": "most_popular", "phases": list(phases)}
    return registry.put({"counts": torch.from_numpy(counts.astype(np.float32))}, coords, "trained", params=params,
                        config_hash=stable_hash({"data": fingerprint}), seed=seed, data_fingerprint=fingerprint)


def popular_counts(registry: Any, cid: str) -> np.ndarray:
    """The counts stored by :func:`put_popular`."""
    return registry.load(cid)["counts"].numpy()
