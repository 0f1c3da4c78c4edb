"""The fast pass's threads: compute blocks on worker threads and write them in file order
from one background writer thread.

Threads: the chunks are small, so torch's intra-op parallelism buys little and, on a
shared 2-core machine, its spinning barrier slows every operation down several times
when another process holds a core (measured: 0.22 s vs 0.4-26 s for one pass over the
embedding). Each thread therefore runs with :data:`THREADS` torch threads, and the
parallelism comes from :data:`COMPUTE_THREADS` Python threads (torch releases the GIL
inside each operation).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from mmgrid.merge.fastpass import kernels, reads

THREADS = 1


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
               block_bytes: int | None = None, chunk: int | None = None) -> list[Job]:
    """Jobs covering the ``n`` entries of tensor ``name`` in blocks of about
    ``block_bytes`` (default :data:`mmgrid.merge.fastpass.reads.BLOCK_BYTES`) of ``itemsize``-byte entries (default:
    the dtype's), each a whole number of compute chunks of ``chunk`` entries (default
    :data:`mmgrid.merge.fastpass.kernels.CHUNK`)."""
    step = reads.block_entries(chunk or kernels.CHUNK, itemsize or dtype.itemsize, block_bytes)
    return [Job(name, a, min(a + step, n), dtype) for a in range(0, n, step)] or [Job(name, 0, 0, dtype)]


def two_f32() -> tuple[torch.Tensor, torch.Tensor]:
    """Default per-thread work state: two float32 buffers of :data:`CHUNK` entries."""
    return torch.empty(kernels.CHUNK, dtype=torch.float32), torch.empty(kernels.CHUNK, dtype=torch.float32)


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
            assert buf is not None  # a blocked job has its buffer
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
