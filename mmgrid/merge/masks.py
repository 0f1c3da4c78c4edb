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
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
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


def injecting() -> bool:
    """Whether :func:`injected_masks` is active (callers that draw masks their own way,
    chunk by chunk, fall back to :func:`keep_mask` on whole tensors then)."""
    return _injected is not None


BLOCK = 1 << 16  # entries per block of BlockSums


class BlockSums:
    """sum_e x_e of a vector fed in consecutive pieces of any size, the same to the last bit
    however it is cut: fixed blocks of :data:`BLOCK` entries, each summed in float64, the block
    sums added exactly (``math.fsum``)."""

    def __init__(self) -> None:
        self._held: list[torch.Tensor] = []
        self._n = 0
        self._parts: list[float] = []

    def add(self, x: torch.Tensor) -> None:
        x = x.reshape(-1)
        m, i = x.numel(), 0
        if self._n:
            take = min(BLOCK - self._n, m)
            self._held.append(x[:take].clone())
            self._n += take
            i = take
            if self._n == BLOCK:
                self._parts.append(float(torch.cat(self._held).sum(dtype=torch.float64)))
                self._held, self._n = [], 0
        while m - i >= BLOCK:
            self._parts.append(float(x[i:i + BLOCK].sum(dtype=torch.float64)))
            i += BLOCK
        if i < m:
            self._held.append(x[i:].clone())
            self._n += m - i

    def result(self) -> float:
        if self._n:
            self._parts.append(float(torch.cat(self._held).sum(dtype=torch.float64)))
            self._held, self._n = [], 0
        return math.fsum(self._parts)


class PackedMask:
    """One tensor's keep mask for one input, drawn piece by piece in order from one
    generator (the draws of :func:`seeded_mask` on the whole tensor: torch's CPU ``rand``
    takes one draw per entry, in order, so consecutive pieces continue the same stream) and
    kept as bits (1/32 of the float32 draws), with the L1 norms mergekit's rescale needs:
    ||tau||_1 and ||m * tau||_1 (:class:`BlockSums`, the same for any cutting)."""

    def __init__(self, seed: int, key: str, index: int, drop: float = 0.0) -> None:
        self.gen = dare_generator(seed, key, index)
        self.drop = drop
        self.bits = np.zeros(0, dtype=np.uint8)
        self._packed: list[np.ndarray] = []
        self._carry = np.zeros(0, dtype=np.bool_)
        self.before, self.after = BlockSums(), BlockSums()

    def add(self, delta: torch.Tensor, u: torch.Tensor, drop: torch.Tensor | None = None) -> None:
        """The next ``delta.numel()`` entries' task vector (float32, flat); ``u``: a float32
        scratch buffer of at least that many entries; ``drop``: their drop probabilities
        (flat, DELLA's p_e; default the scalar of the constructor)."""
        m = delta.numel()
        u = u if u.numel() >= m else torch.empty(m, dtype=torch.float32)
        keep = torch.rand(m, generator=self.gen, out=u[:m]) >= (self.drop if drop is None else drop)  # seeded_mask's test
        a = delta.abs()
        self.before.add(a)
        self.after.add(a.mul_(keep))
        k = np.concatenate([self._carry, keep.numpy()]) if self._carry.size else keep.numpy()
        full = (k.size // 8) * 8
        self._packed.append(np.packbits(k[:full]))
        self._carry = k[full:].copy()

    def close(self) -> None:
        """After the tensor's last piece: the bits in one array."""
        self._packed.append(np.packbits(self._carry))
        self.bits = np.concatenate(self._packed)
        self._packed, self._carry = [], np.zeros(0, dtype=np.bool_)

    def factor(self, eps: float = 1e-7) -> float | None:
        """||tau||_1 / ||m * tau||_1, or None (unscaled) where either is below ``eps``
        (:func:`mmgrid.merge.ops.rescale_l1`'s rule)."""
        before, after = self.before.result(), self.after.result()
        return None if before < eps or after < eps else before / after

    def keep(self, offset: int, m: int) -> torch.Tensor:
        """The bool mask of entries [offset, offset + m)."""
        lo, hi = offset // 8, -(-(offset + m) // 8)
        got = np.unpackbits(self.bits[lo:hi])[offset - 8 * lo: offset - 8 * lo + m]
        return torch.from_numpy(got.view(np.bool_))
