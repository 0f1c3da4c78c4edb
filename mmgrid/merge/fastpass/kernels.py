"""The fast pass's chunk loop: a method's :class:`~mmgrid.merge.pipeline.Kernel` evaluated
on one chunk of at most :data:`CHUNK` entries at a time in reused float32 buffers.

No formula lives here: each chunk goes through :func:`mmgrid.merge.pipeline.apply_kernel`,
the same function the reference path (:mod:`mmgrid.merge.reference`) calls per row chunk,
which calls the one definition of each method's math (:func:`mmgrid.merge.ops.linear_combination`,
:func:`mmgrid.merge.ops.lerp_into`, :func:`mmgrid.merge.pipeline.merged`). The kernels are
elementwise, so any split of the entries gives the same bits
(tests/merge/test_fastpass.py compares the two paths at several chunk sizes).
"""

from __future__ import annotations

import torch

from mmgrid.merge import pipeline as pl
from mmgrid.merge.errors import NonFiniteError

CHUNK = 1 << 17  # entries per compute chunk (512 KiB of float32): the work buffers stay in L2 (2 MiB per core here)


class Buffers:
    """The float32 work buffers of one thread, reused across chunks and tensors."""

    def __init__(self, n_inputs: int, chunk: int = CHUNK) -> None:
        self.work = pl.Work.fresh((chunk,), n_inputs)
        self.work.base = torch.empty(chunk, dtype=torch.float32)  # the base upcast once per chunk
        self.chunk = chunk

    def take(self, m: int) -> pl.Work:
        """Views of the first ``m`` entries of each buffer (the whole buffers for a full chunk)."""
        return self.work.take(m)


def kernel_chunk(k: pl.Kernel, parts: list[torch.Tensor], bufs: Buffers, name: str, offset: int = 0) -> torch.Tensor:
    """One chunk (theta_0 first in ``parts`` where the kernel takes a base) through the
    kernel; the float32 result, in one of ``bufs``'s buffers (consume it before the next).

    ``offset``: the flat index of the chunk's first entry in its tensor, given to a kernel
    function marked ``positional`` (``k.fn.positional = True``: ``fn(name, parts, work, offset)``),
    whose entries depend on their position (DARE's masks drawn in a first pass,
    :class:`mmgrid.merge.methods.dare.StreamedL1`); the reference path gives it too.
    """
    w = bufs.take(parts[0].numel())
    if k.fn is not None and getattr(k.fn, "positional", False):
        return k.fn(name, parts, w, offset)
    return pl.apply_kernel(k, name, parts, w)


def finite_range(t: torch.Tensor) -> bool:
    """No NaN/Inf in ``t``, from one ``aminmax`` pass: NaN propagates to both ends and
    +-Inf is an end (4x faster than a float32 sum of a bf16 tensor, measured)."""
    return not t.numel() or all(bool(torch.isfinite(v)) for v in torch.aminmax(t))


def all_finite(t: torch.Tensor) -> bool:
    return bool(torch.isfinite(t.sum(dtype=torch.float32)))


def check_inputs(k: pl.Kernel, parts: list[torch.Tensor], ins: list, name: str) -> None:
    """NaN/Inf in an input block of a kernel whose result may not carry them (a method's
    own function, :attr:`mmgrid.merge.pipeline.Kernel.fn`: a threshold compares a NaN away),
    one ``aminmax`` per input block; other kernels carry them into the checked result."""
    if k.fn is None:
        return
    for t, x in zip(parts, ins):
        if t.is_floating_point() and not finite_range(t):
            raise NonFiniteError(f"tensor {name!r} of {x.label} holds NaN or Inf; fix or retrain that checkpoint")


def culprit(parts: list[torch.Tensor], ins: list, name: str) -> None:
    for t, x in zip(parts, ins):
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise NonFiniteError(f"tensor {name!r} of {x.label} holds NaN or Inf; fix or retrain that checkpoint")
