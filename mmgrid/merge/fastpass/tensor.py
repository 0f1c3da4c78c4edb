"""The fast pass over one tensor: in memory (:func:`merge_tensor`: the next block is read
on a background thread while this one is merged) or one block of an output file
(:func:`merge_block`, run by the worker threads of
:func:`mmgrid.merge.fastpass.writer.write_blocks`).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import torch

from mmgrid.merge.errors import NonFiniteError
from mmgrid.merge.fastpass import reads
from mmgrid.merge.fastpass.kernels import Buffers, all_finite, check_inputs, culprit, finite_range, kernel_chunk
from mmgrid.merge.fastpass.reads import BlockReader, ChunkInput
from mmgrid.merge.fastpass.writer import Job
from mmgrid.merge.ops import lerp_into
from mmgrid.merge.pipeline import Kernel
from mmgrid.merge.tensors import TensorSource


def merge_tensor(k: Kernel, srcs: list[TensorSource], name: str, n: int, bufs: Buffers,
                 emit: Callable[[int, int, torch.Tensor], object], what: str) -> None:
    """Merge the first ``n`` entries of tensor ``name`` of ``srcs`` (the base first where
    the kernel takes one); ``emit(a, b, chunk)`` gets each float32 result chunk (a reused
    buffer: cast or copy it before returning).

    Inputs are read in blocks of about :data:`mmgrid.merge.fastpass.reads.BLOCK_BYTES` (the next block on a
    background thread while this one is merged) and merged in L2-sized chunks of
    ``bufs``: a thread hand-off per block, not per chunk.

    Raises:
        NonFiniteError: NaN/Inf in an input (named) or in the result.
    """
    step = bufs.chunk
    block = reads.block_entries(step, max(s.shapes[name][1].itemsize for s in srcs))
    starts = list(range(0, n, block))
    ahead = reads.PREFETCH and len(starts) > 1 and any(s.locate is not None for s in srcs)
    ins = [ChunkInput(s, name, n, block, 2 if ahead else 1) for s in srcs]

    def read(idx: int) -> list[torch.Tensor]:
        a = starts[idx]
        return [x.chunk(a, min(a + block, n), idx % 2 if ahead else 0) for x in ins]

    ex = ThreadPoolExecutor(1, thread_name_prefix="mmgrid-read") if ahead else None
    try:
        nxt = ex.submit(read, 0) if ex is not None else None
        for idx, a0 in enumerate(starts):
            # read block idx + 1 (other buffer slot) while block idx is merged
            blk = nxt.result() if nxt is not None else read(idx)  # nxt: None only without ex
            if ex is not None and idx + 1 < len(starts):
                nxt = ex.submit(read, idx + 1)
            check_inputs(k, blk, ins, name)
            for c in range(0, blk[0].numel(), step):
                parts = [t[c:c + step] for t in blk]
                acc = kernel_chunk(k, parts, bufs, name, a0 + c)
                if not all_finite(acc):
                    culprit(parts, ins, name)
                    raise NonFiniteError(f"tensor {name!r} of the {what} merge (check the method's parameters) holds NaN or Inf; fix or retrain that checkpoint")
                emit(a0 + c, a0 + c + acc.numel(), acc)
    finally:
        if ex is not None:
            ex.shutdown(wait=True)  # no read in flight when the files close
        for x in ins:
            x.close()


def is_copy(k: Kernel, reader: BlockReader, name: str, dtype: torch.dtype) -> bool:
    """Whether the kernel is theta* = theta_1 (one input, linear coefficient 1.0, no base:
    passthrough) and the input is stored in the output dtype: the merge is then a copy."""
    c = k.coefs
    return (len(reader.srcs) == 1 and k.fn is None and k.lerp is None and k.pipeline is None
            and isinstance(c, tuple) and c[0] is None and [float(x) for x in c[1]] == [1.0]
            and reader.srcs[0].shapes[name][1] == dtype)


def merge_block(k: Kernel, reader: BlockReader, job: Job, out: torch.Tensor, work: tuple[Buffers, list[torch.Tensor]],
                what: str) -> None:
    """Entries [job.a, job.b) of a merged tensor into ``out`` (the operations of
    :func:`merge_tensor`, so the result is bitwise the same). ``work``: this thread's
    :class:`Buffers` and one uint8 read buffer per source."""
    bufs, raw = work
    name = job.name
    if is_copy(k, reader, name, job.dtype):
        # theta* = 1.0 theta_1 in the stored dtype is the stored bits (1.0 x is exact, and so is
        # the cast back): read straight into the output block, no float32 round trip
        got = reader.read(0, name, job.a, job.b, out.view(torch.uint8))
        if got.data_ptr() != out.data_ptr():  # an in-memory source: a slice, copied
            out.copy_(got)
        if not finite_range(out):
            culprit([out], reader.srcs, name)
        return
    parts = []
    for i in range(len(reader.srcs)):
        need = (job.b - job.a) * reader.srcs[i].shapes[name][1].itemsize
        if raw[i].numel() < need:
            raw[i] = torch.empty(need, dtype=torch.uint8)
        parts.append(reader.read(i, name, job.a, job.b, raw[i]))
    check_inputs(k, parts, reader.srcs, name)
    if k.lerp is not None:
        lerp_into(parts[0], parts[1], k.lerp, out)  # one fused pass where the dtypes agree
    else:
        step = bufs.chunk
        for c in range(0, job.b - job.a, step):
            acc = kernel_chunk(k, [t[c:c + step] for t in parts], bufs, name, job.a + c)
            out[c:c + acc.numel()].copy_(acc)
    # one check per block on the output (NaN and +-Inf survive the cast, and a value the
    # output dtype cannot hold becomes Inf): a single pass instead of one per chunk
    if not finite_range(out):
        culprit(parts, reader.srcs, name)
        raise NonFiniteError(f"tensor {name!r} of the {what} merge (check the method's parameters) holds NaN or Inf; fix or retrain that checkpoint")
