"""The fast merge pass: cache-sized chunks, reused buffers, few fused passes.

The reference path (:mod:`mmgrid.merge.engine`) reads a whole tensor per input and
merges row chunks of up to 4M entries with fresh float32 temporaries. On a 2-core
machine that is bound by page faults (fresh allocations) and memory traffic. This
module runs the same arithmetic, operation for operation (so results are bitwise
equal to the reference path; tests/merge/test_stream.py checks it), on chunks of
:data:`CHUNK` entries that fit in the L2 cache, moving data in blocks of about
:data:`BLOCK_BYTES`:

* merged to a file (:func:`write_blocks` + :func:`merge_block`): worker threads each
  read a block of every input with positioned reads into their own reused buffers,
  merge it chunk by chunk and cast it into an output block; a writer thread
  (:class:`AsyncWriter`) writes the blocks in file order to the streaming safetensors
  writer. No whole tensor is held, and a thread hand-off happens per block, not per
  chunk;
* merged in memory (:func:`merge_tensor`): the next block is read on a background
  thread while this one is merged;
* the float32 work buffers are allocated once per thread.

Covered: linear methods (task arithmetic, average: c_0 theta_0 + sum_i c_i theta_i),
the temporal lerp (:func:`mmgrid.merge.ops.interpolate`) and the Euclidean pipeline without DARE (TIES with the whole-model top-X%,
sign election, disjoint mean or sum). Everything else takes the reference path.

Threads: the chunks are small, so torch's intra-op parallelism buys little and, on a
shared 2-core machine, its spinning barrier slows every operation down several times
when another process holds a core (measured: 0.22 s vs 0.4-26 s for one pass over the
embedding). Each thread therefore runs with :data:`THREADS` torch threads, and the
parallelism comes from :data:`COMPUTE_THREADS` Python threads (torch releases the GIL
inside each operation).
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from mmgrid.merge.errors import NonFiniteError, SourceError
from mmgrid.merge.ops import lerp_into
from mmgrid.merge.tensors import TensorSource

CHUNK = 1 << 17  # entries per compute chunk (512 KiB of float32): the work buffers stay in L2 (2 MiB per core here)
BLOCK_BYTES = 2 << 20  # bytes per read or write call: few syscalls and thread hand-offs (measured best of 0.25-8 MiB)
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


# descriptors a BlockReader keeps open (a registry source has a file per tensor, and
# a common per-process limit is 1024)
MAX_OPEN_FILES = 64


def _open(path: str, label: str) -> int:
    try:
        return os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        raise SourceError(f"{label}: {path} vanished while the merge was reading it (removed by `registry gc`?); "
                          "run the merge again") from None


def _pread(fd: int, view: memoryview, pos: int, label: str) -> None:
    """Fill ``view`` from ``fd`` at byte ``pos`` (preadv may return short counts)."""
    got = 0
    while got < len(view):
        r = os.preadv(fd, [view[got:]], pos + got)
        if r <= 0:
            raise SourceError(f"{label}: tensor data is truncated; the file is incomplete")
        got += r


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
            self.fd = _open(path, src.label)
            self.bufs = [torch.empty(min(chunk, max(n, 1)), dtype=self.dtype) for _ in range(slots)]
            self.raws = [memoryview(b.view(torch.uint8).numpy()) for b in self.bufs]
            self.item = self.bufs[0].element_size()

    def chunk(self, a: int, b: int, slot: int = 0) -> torch.Tensor:
        """Entries [a, b) in the stored dtype, in buffer ``slot`` (valid until that slot
        is read into again)."""
        if self.fd < 0:
            return self.flat[a:b]
        _pread(self.fd, self.raws[slot][: (b - a) * self.item], self.offset + a * self.item, self.label)
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
        lerp: the temporal merge's lambda: :func:`mmgrid.merge.ops.interpolate` of the
            two inputs.
        thresholds: TIES whole-model thresholds (None: no trim).
        weights: pipeline weights w_i.
        combine: sum | disjoint_mean.
        elect_sign: TIES sign election.
        scale: factor on the combined delta.
    """

    coefs: tuple[float | None, list[float]] | None = None
    lerp: float | None = None
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
    skipped = []
    first = 1
    if len(parts) > 1 and allc[0] == -1.0 and allc[1] == 1.0:
        # task arithmetic of weight-1 models: (-1 x0) + x1 is x1 - x0 exactly (negation is
        # exact, a + (-b) rounds as a - b), one pass fewer than copy, negate, add
        acc.copy_(parts[1])
        acc.sub_(parts[0])
        first = 2
    else:
        acc.copy_(parts[0])
        if allc[0] != 1.0:
            acc.mul_(allc[0])
    for j, (t, c) in enumerate(zip(parts[first:], allc[first:]), start=first):
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


def finite_range(t: torch.Tensor) -> bool:
    """No NaN/Inf in ``t``, from one ``aminmax`` pass: NaN propagates to both ends and
    +-Inf is an end (4x faster than a float32 sum of a bf16 tensor, measured)."""
    return not t.numel() or all(bool(torch.isfinite(v)) for v in torch.aminmax(t))


def _all_finite(t: torch.Tensor) -> bool:
    return bool(torch.isfinite(t.sum(dtype=torch.float32)))


def block_entries(step: int, itemsize: int, block_bytes: int | None = None) -> int:
    """Entries per I/O block: about ``block_bytes`` (default :data:`BLOCK_BYTES`), a
    whole number of chunks."""
    return max(step, ((block_bytes or BLOCK_BYTES) // max(itemsize, 1)) // step * step)


def merge_tensor(k: Kernel, models: list[TensorSource], base: TensorSource | None, name: str, n: int,
                 dtype: torch.dtype, bufs: Buffers, emit: Callable[[int, int, torch.Tensor], None],
                 what: str) -> None:
    """Merge the first ``n`` entries of tensor ``name``; ``emit(a, b, chunk)`` gets each
    float32 result chunk (a reused buffer: cast or copy it before returning).

    Inputs are read in blocks of about :data:`BLOCK_BYTES` (the next block on a
    background thread while this one is merged) and merged in L2-sized chunks of
    ``bufs``: a thread hand-off per block, not per chunk.

    Raises:
        NonFiniteError: NaN/Inf in an input (named) or in the result.
    """
    srcs = ([base] if base is not None else []) + list(models)
    step = bufs.acc.numel()
    block = block_entries(step, max(s.shapes[name][1].itemsize for s in srcs))
    starts = list(range(0, n, block))
    ahead = PREFETCH and len(starts) > 1 and any(s.locate is not None for s in srcs)
    ins = [ChunkInput(s, name, n, block, 2 if ahead else 1) for s in srcs]

    def read(idx: int) -> list[torch.Tensor]:
        a = starts[idx]
        return [x.chunk(a, min(a + block, n), idx % 2 if ahead else 0) for x in ins]

    ex = ThreadPoolExecutor(1, thread_name_prefix="mmgrid-read") if ahead else None
    try:
        nxt = ex.submit(read, 0) if ex is not None else None
        for idx, a0 in enumerate(starts):
            # read block idx + 1 (other buffer slot) while block idx is merged
            blk = nxt.result() if ex is not None else read(idx)
            if ex is not None and idx + 1 < len(starts):
                nxt = ex.submit(read, idx + 1)
            for c in range(0, blk[0].numel(), step):
                parts = [t[c:c + step] for t in blk]
                acc = _kernel_chunk(k, parts, bufs, ins, name)
                if not _all_finite(acc):
                    _culprit(parts, ins, name)
                    raise NonFiniteError(f"tensor {name!r} of the {what} merge (check the method's parameters) holds NaN or Inf; fix or retrain that checkpoint")
                emit(a0 + c, a0 + c + acc.numel(), acc)
    finally:
        if ex is not None:
            ex.shutdown(wait=True)  # no read in flight when the files close
        for x in ins:
            x.close()


def _kernel_chunk(k: Kernel, parts: list[torch.Tensor], bufs: Buffers, ins: list, name: str) -> torch.Tensor:
    """One chunk through the kernel (base first in ``parts``); the float32 result."""
    if k.lerp is not None:  # ops.interpolate; NaN/Inf in either input reaches the result
        m = parts[0].numel()
        acc, tmp = bufs.acc[:m], bufs.tmp[:m]
        acc.copy_(parts[0])
        tmp.copy_(parts[1])
        return torch.lerp(acc, tmp, k.lerp, out=acc)
    if k.coefs is None:
        return pipeline_chunk(k, parts[1:], parts[0], bufs)
    acc, skipped = linear_chunk(k, parts, bufs)
    for j in skipped:  # the reference adds a non-finite part even at coefficient 0
        if not _all_finite(parts[j]):
            _culprit(parts, ins, name)
    return acc


def _culprit(parts: list[torch.Tensor], ins: list, name: str) -> None:
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

    The merge or sweep computes the next blocks while earlier ones are written (the
    write syscalls release the GIL), so a pass costs about max(compute, write) rather
    than their sum. At most ``depth`` writes are queued; every write goes through the
    one worker, so whole tensors and blocks keep the layout order.
    """

    def __init__(self, writer, depth: int = 3) -> None:
        self.w = writer
        self.ex = ThreadPoolExecutor(1, thread_name_prefix="mmgrid-write") if ASYNC_WRITE else _Inline()
        self.futs: list = [None] * depth
        self.depth, self.i = depth, 0

    def write(self, name: str, t: torch.Tensor) -> None:
        """Queue a whole tensor."""
        self._submit(self.w.write, name, t)

    def block(self, name: str, buf: torch.Tensor) -> Callable[[], None]:
        """Queue ``buf`` (the next entries of tensor ``name``, already in its dtype) as one
        write; returns a function that waits until that write is done (then ``buf`` may
        be reused)."""
        slot = self.i
        self._submit(self.w.write_part, name, buf)
        return lambda: self._slot_wait(slot)

    def _submit(self, fn, *args) -> None:
        self._slot_wait(self.i)
        self.futs[self.i] = self.ex.submit(fn, *args)
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


# compute threads of a blockwise write (the writer thread runs beside them)
COMPUTE_THREADS = max(1, min(2, int(os.environ.get("MMGRID_MERGE_COMPUTE_THREADS", "2"))))


@dataclass
class Job:
    """One piece of an output file, in file order: entries [a, b) of tensor ``name``
    computed by a worker thread, or (``whole`` given) the whole tensor, produced on the
    calling thread when its turn to be written comes."""

    name: str
    a: int
    b: int
    dtype: torch.dtype
    whole: Callable[[], torch.Tensor] | None = None


def block_jobs(name: str, n: int, dtype: torch.dtype, itemsize: int | None = None,
               block_bytes: int | None = None) -> list[Job]:
    """Jobs covering the ``n`` entries of tensor ``name`` in blocks of about
    ``block_bytes`` (default :data:`BLOCK_BYTES`) of ``itemsize``-byte entries (default:
    the dtype's)."""
    step = block_entries(CHUNK, itemsize or dtype.itemsize, block_bytes)
    return [Job(name, a, min(a + step, n), dtype) for a in range(0, n, step)] or [Job(name, 0, 0, dtype)]


def two_f32() -> tuple[torch.Tensor, torch.Tensor]:
    """Default per-thread work state: two float32 buffers of :data:`CHUNK` entries."""
    return torch.empty(CHUNK, dtype=torch.float32), torch.empty(CHUNK, dtype=torch.float32)


def write_blocks(jobs: list[Job], fill: Callable[[Job, torch.Tensor, Any], None], aw: AsyncWriter,
                 make_work: Callable[[], Any] = two_f32, n_threads: int | None = None,
                 pool: dict[torch.dtype, list[torch.Tensor]] | None = None) -> None:
    """Compute blocks on ``n_threads`` threads and write everything in file order.

    ``fill(job, out, work)`` writes entries [job.a, job.b) of tensor ``job.name`` into
    ``out`` (in ``job.dtype``), with the calling thread's own ``work = make_work()``.
    Blocks go to ``aw``'s writer thread in order as they complete; at most
    ``2 n_threads + 1`` are computed ahead, and an output buffer is reused once its
    write is done. Whole-tensor jobs are produced on this thread when their turn comes.
    ``pool`` (dtype -> free output buffers) lends and takes back the output buffers, so
    repeated calls (a sweep's points) reuse them instead of faulting in fresh memory.

    Two compute threads beside the writer keep both cores of a small machine busy: a
    pass then costs about (read + compute + write) / 2 instead of being bound by the
    one thread that merges.
    """
    n = n_threads or COMPUTE_THREADS
    local = threading.local()

    def run(job: Job, out: torch.Tensor) -> torch.Tensor:
        if not hasattr(local, "work"):
            # once per worker: OpenMP's thread count is per calling thread, and a new
            # thread starts from the default (all cores), not from the caller's setting;
            # switching it per block (or inheriting 2 per worker) oversubscribes the cores
            torch.set_num_threads(THREADS)
            local.work = make_work()
        fill(job, out, local.work)
        return out

    free: dict[torch.dtype, list[torch.Tensor]] = pool if pool is not None else {}
    size: dict[torch.dtype, int] = {}
    for job in jobs:
        if job.whole is None:
            size[job.dtype] = max(size.get(job.dtype, 0), job.b - job.a)
    writing: list[tuple[Callable[[], None], torch.Tensor]] = []  # (wait for the write, its buffer)
    ahead: list[tuple[Job, Any, torch.Tensor | None]] = []  # (job, future, buffer)

    def emit() -> None:
        job, fut, buf = ahead.pop(0)
        if job.whole is not None:
            aw.write(job.name, job.whole())
        else:
            writing.append((aw.block(job.name, fut.result()), buf))

    ex = ThreadPoolExecutor(n, thread_name_prefix="mmgrid-compute")
    try:
        for job in jobs:
            if job.whole is not None:
                ahead.append((job, None, None))
            else:
                bufs = free.setdefault(job.dtype, [])
                while not bufs and writing:  # recycle the oldest written buffer
                    done, buf = writing.pop(0)
                    done()
                    free.setdefault(buf.dtype, []).append(buf)
                m = job.b - job.a
                if bufs and bufs[-1].numel() >= m:
                    out = bufs.pop()
                else:
                    out = torch.empty(size[job.dtype], dtype=job.dtype)
                ahead.append((job, ex.submit(run, job, out[:m]), out))
            while len(ahead) > 2 * n:
                emit()
        while ahead:
            emit()
        for done, buf in writing:  # every buffer back to the pool once written
            done()
            free.setdefault(buf.dtype, []).append(buf)
    finally:
        for _, fut, _ in ahead:
            if fut is not None:
                fut.cancel()
        ex.shutdown(wait=True)


def locate_ahead(srcs: list[TensorSource], names: list[str], n_threads: int = 2) -> ThreadPoolExecutor:
    """Resolve every source's location of ``names`` (in order) on ``n_threads`` threads
    while the merge runs behind: for a registry source that is the blob's hash check
    (1.2 GB/s per core here), which otherwise falls on whichever merge worker first
    reads a tensor while the other waits for the same blob. Errors are not raised here:
    the merge's own ``locate`` call raises them. Shut the executor down when done."""
    ex = ThreadPoolExecutor(n_threads, thread_name_prefix="mmgrid-locate")
    seen: set[str] = set()
    for name in names:
        if name not in seen:
            seen.add(name)
            for s in srcs:
                if s.locate is not None:
                    ex.submit(s.locate, name)
    return ex


class BlockReader:
    """Entries [a, b) of any source's tensor, for any thread: positioned reads into that
    thread's own buffers (file-backed sources; one descriptor per file, shared), or a
    slice (in-memory sources)."""

    def __init__(self, srcs: list[TensorSource]) -> None:
        self.srcs = srcs
        self.fds: dict[str, int] = {}
        self.lock = threading.Lock()

    def _fd(self, path: str, label: str) -> tuple[int, bool]:
        """(descriptor, kept): the first :data:`MAX_OPEN_FILES` files stay open until
        :meth:`close`; beyond them (a registry checkpoint is a file per tensor) the
        caller closes its descriptor after the read."""
        fd = self.fds.get(path)
        if fd is not None:
            return fd, True
        with self.lock:
            if path not in self.fds and len(self.fds) < MAX_OPEN_FILES:
                self.fds[path] = _open(path, label)
            if path in self.fds:
                return self.fds[path], True
        return _open(path, label), False

    def read(self, i: int, name: str, a: int, b: int, buf: torch.Tensor) -> torch.Tensor:
        """Entries [a, b) of source ``i``'s tensor ``name`` (a view of ``buf``, uint8,
        grown by the caller to fit, or a slice of the in-memory tensor)."""
        src = self.srcs[i]
        loc = src.locate(name) if src.locate is not None else None
        dtype = src.shapes[name][1]
        if loc is None:
            return src.get(name).reshape(-1)[a:b]
        path, offset = loc
        item = dtype.itemsize
        want = (b - a) * item
        fd, kept = self._fd(path, src.label)
        try:
            _pread(fd, memoryview(buf.numpy())[:want], offset + a * item, src.label)
        finally:
            if not kept:
                os.close(fd)
        return buf[:want].view(dtype)

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()


def merge_block(k: Kernel, reader: BlockReader, job: Job, out: torch.Tensor, work: tuple[Buffers, list[torch.Tensor]],
                what: str) -> None:
    """Entries [job.a, job.b) of a merged tensor into ``out`` (the operations of
    :func:`merge_tensor`, so the result is bitwise the same). ``work``: this thread's
    :class:`Buffers` and one uint8 read buffer per source."""
    bufs, raw = work
    name = job.name
    parts = []
    for i in range(len(reader.srcs)):
        need = (job.b - job.a) * reader.srcs[i].shapes[name][1].itemsize
        if raw[i].numel() < need:
            raw[i] = torch.empty(need, dtype=torch.uint8)
        parts.append(reader.read(i, name, job.a, job.b, raw[i]))
    if k.lerp is not None:
        lerp_into(parts[0], parts[1], k.lerp, out)  # one fused pass where the dtypes agree
    else:
        step = bufs.acc.numel()
        for c in range(0, job.b - job.a, step):
            acc = _kernel_chunk(k, [t[c:c + step] for t in parts], bufs, reader.srcs, name)
            out[c:c + acc.numel()].copy_(acc)
    # one check per block on the output (NaN and +-Inf survive the cast, and a value the
    # output dtype cannot hold becomes Inf): a single pass instead of one per chunk
    if not finite_range(out):
        _culprit(parts, reader.srcs, name)
        raise NonFiniteError(f"tensor {name!r} of the {what} merge (check the method's parameters) holds NaN or Inf; fix or retrain that checkpoint")
