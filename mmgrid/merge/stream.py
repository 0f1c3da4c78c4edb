"""The fast merge pass: cache-sized chunks, reused buffers, few fused passes.

The reference path (:mod:`mmgrid.merge.engine`) reads a whole tensor per input and
merges row chunks of up to 4M entries with fresh float32 temporaries. On a 2-core
machine that is bound by page faults (fresh allocations) and memory traffic. This
module runs the same arithmetic, operation for operation (so results are bitwise
equal to the reference path; tests/merge/test_stream.py checks it), on chunks of
:data:`CHUNK` entries that fit in the L2 cache:

* file-backed inputs are read chunk by chunk with positioned reads into two reused
  buffers per input, the next chunk on a background thread while this one is merged
  (no page faults, no whole tensor held); in-memory inputs are sliced;
* the float32 work buffers are allocated once per merge;
* the result chunk is cast into the output tensor, or into a ring of buffers written
  by a background thread (:class:`AsyncWriter`) to the streaming safetensors writer.

Covered: linear methods (task arithmetic, average, temporal: c_0 theta_0 + sum_i c_i
theta_i) and the Euclidean pipeline without DARE (TIES with the whole-model top-X%,
sign election, disjoint mean or sum). Everything else takes the reference path.

Threads: the chunks are small, so torch's intra-op parallelism buys little and, on a
shared 2-core machine, its spinning barrier slows every operation down several times
when another process holds a core (measured: 0.22 s vs 0.4-26 s for one pass over the
embedding). The pass therefore runs with :data:`THREADS` torch threads.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from mmgrid.merge.errors import NonFiniteError, SourceError
from mmgrid.merge.tensors import TensorSource

CHUNK = 1 << 18  # entries per chunk: 1 MiB of float32, a few buffers fit in L2
THREADS = 1
# read the next chunk of file inputs on a background thread while merging this one
PREFETCH = os.environ.get("MMGRID_MERGE_PREFETCH", "1") != "0"


@contextmanager
def threads(n: int = THREADS) -> Iterator[None]:
    """Run the block with ``n`` torch intra-op threads, then restore the setting."""
    old = torch.get_num_threads()
    if old != n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if old != n:
            torch.set_num_threads(old)


class ChunkInput:
    """The first ``n`` entries of one source's tensor, read chunk by chunk as stored."""

    def __init__(self, src: TensorSource, name: str, n: int, chunk: int, slots: int = 1) -> None:
        self.label = src.label
        self.dtype = src.shapes[name][1]
        self.n = n
        loc = src.locate(name) if src.locate is not None else None
        self.fd = -1
        if loc is None:
            self.flat = src.get(name).reshape(-1)[:n]
        else:
            path, self.offset = loc
            self.fd = os.open(path, os.O_RDONLY)
            self.bufs = [torch.empty(min(chunk, max(n, 1)), dtype=self.dtype) for _ in range(slots)]
            self.raws = [memoryview(b.view(torch.uint8).numpy()) for b in self.bufs]
            self.item = self.bufs[0].element_size()

    def chunk(self, a: int, b: int, slot: int = 0) -> torch.Tensor:
        """Entries [a, b) in the stored dtype, in buffer ``slot`` (valid until that slot
        is read into again)."""
        if self.fd < 0:
            return self.flat[a:b]
        want, got = (b - a) * self.item, 0
        view = self.raws[slot][:want]
        while got < want:  # preadv may return short counts
            r = os.preadv(self.fd, [view[got:]], self.offset + a * self.item + got)
            if r <= 0:
                raise SourceError(f"{self.label}: tensor data is truncated; the file is incomplete")
            got += r
        return self.bufs[slot][: b - a]

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


@dataclass
class Kernel:
    """One chunk's arithmetic, the same operations as the reference path.

    Attributes:
        coefs: linear methods: c_0 (None without a base) and c_i.
        thresholds: TIES whole-model thresholds (None: no trim).
        weights: pipeline weights w_i.
        combine: sum | disjoint_mean.
        elect_sign: TIES sign election.
        scale: factor on the combined delta.
    """

    coefs: tuple[float | None, list[float]] | None = None
    thresholds: list[float] | None = None
    weights: tuple[float, ...] = ()
    combine: str = "sum"
    elect_sign: bool = False
    scale: float = 1.0


class Buffers:
    """Float32 work buffers reused across chunks and tensors."""

    def __init__(self, n_inputs: int, chunk: int | None = None) -> None:
        chunk = chunk or CHUNK
        f = lambda: torch.empty(chunk, dtype=torch.float32)  # noqa: E731
        self.acc, self.base, self.sign, self.tmp, self.den = f(), f(), f(), f(), f()
        self.d = [f() for _ in range(n_inputs)]
        self.mask = torch.empty(chunk, dtype=torch.bool)


def linear_chunk(k: Kernel, parts: list[torch.Tensor], bufs: Buffers) -> tuple[torch.Tensor, list[int]]:
    """c_0 theta_0 + sum_i c_i theta_i (base first in ``parts`` when c_0 is given).

    Returns the float32 result and the indices of parts skipped (coefficient 0), which
    the caller checks for NaN/Inf as the reference path does.
    """
    c0, cs = k.coefs
    allc = ([c0] if c0 is not None else []) + list(cs)
    m = parts[0].numel()
    acc = bufs.acc[:m]
    acc.copy_(parts[0])
    if allc[0] != 1.0:
        acc.mul_(allc[0])
    skipped = []
    for j, (t, c) in enumerate(zip(parts[1:], allc[1:]), start=1):
        if c != 0.0:
            acc.add_(t, alpha=c)
        else:
            skipped.append(j)
    return acc, skipped


@functools.lru_cache(maxsize=64)
def shrink_lambda(threshold: float) -> float | None:
    """The ``lambd`` of :func:`torch.hardshrink` that keeps exactly |x| >= ``threshold``.

    hardshrink keeps |x| > lambd (NaN kept, the rest set to +0, as
    :func:`mmgrid.merge.ops.trim_magnitude`'s ``masked_fill``); the float32 just below
    the threshold turns > into >=. None: nothing is trimmed (threshold <= 0).
    """
    if not threshold > 0.0:
        return None
    t = torch.tensor([threshold], dtype=torch.float32)
    return float(torch.nextafter(t, torch.zeros_like(t)))


def pipeline_chunk(k: Kernel, xs: list[torch.Tensor], b: torch.Tensor, bufs: Buffers) -> torch.Tensor:
    """base + scale * COMBINE(ELECT(TRIM(x_i - base))) in float32 (see :mod:`pipeline`).

    Boolean tensors cost 3-15x a float pass on CPU (comparisons, masked_fill), so the
    masks of the reference operations are rebuilt from float ones with the same
    values: [p > 0] = clamp(sign(p), 0); [mass >= 0] -> +-1 = sign(sign(mass) + 0.5).
    """
    m = b.numel()
    base, tmp = bufs.base[:m], bufs.tmp[:m]
    base.copy_(b)
    ds = []
    for i, x in enumerate(xs):
        d = bufs.d[i][:m]
        d.copy_(x)
        d.sub_(base)
        lam = shrink_lambda(k.thresholds[i]) if k.thresholds is not None else None
        if lam is not None:  # ops.trim_magnitude: zero |d| < threshold
            torch.hardshrink(d, lam, out=d)
        ds.append(d)
    weights = [float(w) for w in (k.weights or [1.0] * len(ds))]
    acc = bufs.acc[:m]
    sign = None
    if k.combine == "disjoint_mean" or k.elect_sign:  # ops.elect_sign: sign of the total mass
        sign = bufs.sign[:m]
        sign.copy_(ds[0])
        for d in ds[1:]:
            sign.add_(d)
        torch.sign(sign, out=sign)  # -1, 0, +1 (NaN stays NaN and poisons the result)
        sign.add_(0.5)
        torch.sign(sign, out=sign)  # 0 -> +1
    if k.combine == "disjoint_mean":  # ops.disjoint_mean
        den = bufs.den[:m]
        acc.zero_()
        den.zero_()
        for d, w in zip(ds, weights):
            d.mul_(sign)
            torch.sign(d, out=tmp)
            tmp.clamp_min_(0.0)  # [d * sign > 0]
            acc.add_(d.clamp_min_(0.0), alpha=w)
            den.add_(tmp, alpha=w)
        if min(weights) > 0:  # den is 0 or a sum of positive weights >= min(weights)
            den.clamp_min_(min(weights))
        else:  # den + [den == 0]
            torch.sign(den, out=tmp)
            tmp.abs_().neg_().add_(1.0)
            den.add_(tmp)
        acc.mul_(sign).div_(den)
    else:
        if sign is not None:  # ops.sign_masked (rare path: keeps the boolean mask)
            mask = bufs.mask[:m]
            for d in ds:
                torch.mul(d, sign, out=tmp)
                torch.lt(tmp, 0, out=mask)
                d.masked_fill_(mask, 0.0)
        torch.mul(ds[0], weights[0], out=acc)  # ops.weighted_sum
        for d, w in zip(ds[1:], weights[1:]):
            acc.add_(d, alpha=w)
    if k.scale != 1.0:
        acc.mul_(k.scale)
    return acc.add_(base)


def _all_finite(t: torch.Tensor) -> bool:
    return bool(torch.isfinite(t.sum(dtype=torch.float32)))


def merge_tensor(k: Kernel, models: list[TensorSource], base: TensorSource | None, name: str, n: int,
                 dtype: torch.dtype, bufs: Buffers, emit: Callable[[int, int, torch.Tensor], None],
                 what: str) -> None:
    """Merge the first ``n`` entries of tensor ``name``; ``emit(a, b, chunk)`` gets each
    float32 result chunk (a reused buffer: cast or copy it before returning).

    Raises:
        NonFiniteError: NaN/Inf in an input (named) or in the result.
    """
    srcs = ([base] if base is not None else []) + list(models)
    step = bufs.acc.numel()
    starts = list(range(0, n, step))
    ahead = PREFETCH and len(starts) > 1 and any(s.locate is not None for s in srcs)
    ins = [ChunkInput(s, name, n, step, 2 if ahead else 1) for s in srcs]

    def read(idx: int) -> list[torch.Tensor]:
        a = starts[idx]
        return [x.chunk(a, min(a + step, n), idx % 2 if ahead else 0) for x in ins]

    ex = ThreadPoolExecutor(1, thread_name_prefix="mmgrid-read") if ahead else None
    try:
        nxt = ex.submit(read, 0) if ex is not None else None
        for idx, a in enumerate(starts):
            b = min(a + step, n)
            # read chunk idx + 1 (other buffer slot) while chunk idx is merged
            parts = nxt.result() if ex is not None else read(idx)
            if ex is not None and idx + 1 < len(starts):
                nxt = ex.submit(read, idx + 1)
            if k.coefs is not None:
                acc, skipped = linear_chunk(k, parts, bufs)
                for j in skipped:  # the reference adds a non-finite part even at coefficient 0
                    if not _all_finite(parts[j]):
                        _culprit(parts, ins, name)
            else:
                acc = pipeline_chunk(k, parts[1:], parts[0], bufs)
            if not _all_finite(acc):
                _culprit(parts, ins, name)
                raise NonFiniteError(f"tensor {name!r} of the {what} merge (check the method's parameters) holds NaN or Inf; fix or retrain that checkpoint")
            emit(a, b, acc)
    finally:
        if ex is not None:
            ex.shutdown(wait=True)  # no read in flight when the files close
        for x in ins:
            x.close()


def _culprit(parts: list[torch.Tensor], ins: list[ChunkInput], name: str) -> None:
    for t, x in zip(parts, ins):
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise NonFiniteError(f"tensor {name!r} of {x.label} holds NaN or Inf; fix or retrain that checkpoint")


ASYNC_WRITE = os.environ.get("MMGRID_MERGE_ASYNC_WRITE", "1") != "0"


class _Done:
    def __init__(self, value) -> None:
        self.value = value

    def result(self):
        return self.value


class _Inline:
    """An executor that runs each call at once (writes without a background thread)."""

    def submit(self, fn, *args):
        return _Done(fn(*args))

    def shutdown(self, wait: bool = True) -> None:
        pass


class AsyncWriter:
    """Writes to a :class:`SafetensorsWriter` from one background thread, in order.

    The merge or sweep computes the next chunk while the previous ones are written (the
    write syscalls release the GIL), so a pass costs about max(compute, write) rather
    than their sum. Chunks are cast into a ring of ``depth`` buffers; a buffer is
    reused only after its write finished. Every write goes through the one worker, so
    whole tensors and parts keep the layout order.
    """

    def __init__(self, writer, depth: int = 4) -> None:
        self.w = writer
        self.ex = ThreadPoolExecutor(1, thread_name_prefix="mmgrid-write") if ASYNC_WRITE else _Inline()
        self.ring: dict[torch.dtype, list[torch.Tensor]] = {}
        self.futs: list = [None] * depth
        self.depth, self.i = depth, 0

    def write(self, name: str, t: torch.Tensor) -> None:
        self._slot_wait(self.i)
        self.futs[self.i] = self.ex.submit(self.w.write, name, t)
        self.i = (self.i + 1) % self.depth

    def part(self, name: str, chunk: torch.Tensor, dtype: torch.dtype) -> None:
        """Cast a float32 chunk to ``dtype`` into a ring buffer and queue its write."""
        self._slot_wait(self.i)
        ring = self.ring.setdefault(dtype, [torch.empty(CHUNK, dtype=dtype) for _ in range(self.depth)])
        if ring[self.i].numel() < chunk.numel():
            ring[self.i] = torch.empty(chunk.numel(), dtype=dtype)
        out = ring[self.i][: chunk.numel()]
        out.copy_(chunk)
        self.futs[self.i] = self.ex.submit(self.w.write_part, name, out)
        self.i = (self.i + 1) % self.depth

    def _slot_wait(self, i: int) -> None:
        if self.futs[i] is not None:
            self.futs[i].result()  # re-raises the write's error
            self.futs[i] = None

    def drain(self) -> None:
        """Wait for every queued write (raising the first error)."""
        try:
            for k in range(self.depth):
                self._slot_wait((self.i + k) % self.depth)
        finally:
            self.ex.shutdown(wait=True)
