"""The random keep masks of the dropping methods (DARE, TIES-DARE, DELLA), in one place.

Every mask is drawn by :func:`keep_mask`: entry e of input i of tensor ``key`` is kept
where u_e >= drop_e, u_e ~ U[0, 1) from a generator seeded by (seed, key, i)
(:func:`dare_generator`), so a seed reproduces a merge, whatever order the tensors are
read in. ``drop`` is DARE's scalar p or DELLA's per-entry p_e.

A test or an oracle comparison (e.g. against mergekit, whose masks come from torch's
global generator) can put its own masks in instead, with :func:`injected_masks`::

    def masks(key, index, drop, shape):      # -> bool tensor of ``shape``, True = kept
        return recorded[(key, index)]

    with injected_masks(masks):
        merge("della", [a, b], base=base, density=0.5)

The hook is process-wide (not per thread): one injected merge at a time.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

from mmgrid.merge.errors import MergeParamError

# (tensor key, input index, drop probability (float or per-entry tensor), shape) -> bool keep mask
MaskFn = Callable[[str, int, "float | torch.Tensor", torch.Size], torch.Tensor]

_injected: MaskFn | None = None


def dare_generator(seed: int, tensor_name: str, model_index: int) -> torch.Generator:
    """A generator seeded from (seed, tensor key, input): masks do not depend on the order
    tensors are read in. The key is the tensor name, plus ``@row`` for the row chunks of
    big tensors (:data:`mmgrid.merge.plan.CHUNK_ELEMS` fixes the chunking)."""
    h = hashlib.sha256(f"{seed}|{tensor_name}|{model_index}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(h[:8], "little") & ((1 << 63) - 1))


def seeded_mask(seed: int, key: str, index: int, drop: float | torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """The default mask: u >= drop with u ~ U[0, 1) from :func:`dare_generator` (DARE's draw)."""
    u = torch.rand(shape, generator=dare_generator(seed, key, index), dtype=torch.float32)
    return u >= drop


def keep_mask(seed: int, key: str, index: int, drop: float | torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """Input ``index``'s keep mask for tensor ``key``: the injected one if any, else :func:`seeded_mask`.

    Raises:
        MergeParamError: an injected mask of the wrong shape or dtype.
    """
    if _injected is None:
        return seeded_mask(seed, key, index, drop, shape)
    m = _injected(key, index, drop, torch.Size(shape))
    if not isinstance(m, torch.Tensor) or m.dtype != torch.bool or m.shape != torch.Size(shape):
        got = f"{m.dtype} {tuple(m.shape)}" if isinstance(m, torch.Tensor) else type(m).__name__
        raise MergeParamError(f"injected mask for tensor {key!r}, input {index}: want a bool tensor of shape "
                              f"{tuple(shape)}, got {got}; return True where the entry is kept")
    return m


@contextmanager
def injected_masks(fn: MaskFn) -> Iterator[None]:
    """Draw every keep mask from ``fn`` inside the block (tests, oracle comparisons)."""
    global _injected
    old, _injected = _injected, fn
    try:
        yield
    finally:
        _injected = old
