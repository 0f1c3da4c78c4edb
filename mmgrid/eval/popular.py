"""The most-popular baseline: every user gets the items with the most interactions in
the training phases, most popular first (ties by item index), leaving out the items of the
user's own history (``eval.popular_exclude_history``, default true) as every paradigm does
(``exclude_history``): prepared data holds one interaction per (user, item), so a history item
is never the target, and a baseline that spends top-K slots on it is weaker than popularity
itself. Its counts go into the registry as a tiny checkpoint (paradigm ``popular``) so that
its results are queried like any model's; the rule is part of its identity."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import torch

from mmgrid.configtools import stable_hash

if TYPE_CHECKING:
    from mmgrid.registry.api import Registry


def popular_ranking(counts: np.ndarray, k: int, histories: Sequence[Sequence[int]] | None = None) -> np.ndarray:
    """Indices of the ``k`` most counted items, most first; ties go to the lower index.

    Without ``histories``: one ranking ``[min(k, n_items)]`` shared by every user. With them: ``[n, k]``,
    row r the most counted items that are not in ``histories[r]`` (fewer than ``k`` left: padded with -1,
    which matches no target)."""
    counts = np.asarray(counts)
    order = np.lexsort((np.arange(len(counts)), -counts))
    if histories is None:
        return order[: min(k, len(counts))]
    out = np.full((len(histories), k), -1, dtype=np.int64)
    for r, h in enumerate(histories):
        seen = set(int(i) for i in h)
        head = order[: k + len(seen)]  # the first k items outside a history of len(seen) items lie in here
        keep = head[~np.isin(head, list(seen))][:k] if seen else head[:k]
        out[r, : len(keep)] = keep
    return out


def put_popular(registry: Registry, domain: Any, phases: Sequence[str], fingerprint: str, seed: int = 0,
                exclude_history: bool = True) -> str:
    """Store the popularity counts of ``domain`` over ``phases`` (coords paradigm ``popular``).

    ``exclude_history`` is in the checkpoint's parameters (so in its id) when true: a stored baseline
    evaluated with the history left in keeps its id and its meaning."""
    counts = domain.popularity(list(phases))
    coords = {"paradigm": "popular", "domain": domain.name, "period": phases[-1], "variant": "default"}
    params: dict[str, Any] = {"method": "most_popular", "phases": list(phases)}
    if exclude_history:
        params["exclude_history"] = True
    return registry.put({"counts": torch.from_numpy(counts.astype(np.float32))}, coords, "trained", params=params,
                        config_hash=stable_hash({"data": fingerprint}), seed=seed, data_fingerprint=fingerprint)


def popular_counts(registry: Registry, cid: str) -> np.ndarray:
    """The counts stored by :func:`put_popular`."""
    return registry.load(cid)["counts"].numpy()
