"""The merge loop: plan, the methods' first passes, then tensor by tensor through the
fast pass (:mod:`mmgrid.merge.fastpass`) where the method has a kernel and the tensor
fits it, else the reference path (:mod:`mmgrid.merge.reference`); each result goes, in
the output dtype, to a sink or (files) straight to a streaming writer.

Methods that need whole-model statistics (TIES over the whole model) get extra streaming
passes through :meth:`Method.prepare` before the merge pass.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from typing import Any

import torch

from mmgrid.merge.fastpass import kernels as fk
from mmgrid.merge.fastpass import reads as fr
from mmgrid.merge.fastpass import tensor as ft
from mmgrid.merge.fastpass import writer as fw
from mmgrid.merge.methods.base import Method, TensorView, ViewStream
from mmgrid.merge.plan import Plan, shared_numel, view_stream
from mmgrid.merge.reference import added_rows, reference_tensor
from mmgrid.merge.tensors import TensorSource

Sink = Callable[[str, torch.Tensor], None]

# The fast pass of mmgrid.merge.fastpass (bitwise equal to mmgrid.merge.reference);
# tests switch it off to compare the two.
FAST = True


def run(method: Method, models: list[TensorSource], base: TensorSource | None, plan: Plan, sink: Sink,
        writer: Any = None) -> None:
    """Merge every tensor and give each result (in the output dtype) to ``sink``.

    With ``writer`` (a :class:`~mmgrid.merge.tensors.SafetensorsWriter`; ``sink`` is
    then unused) tensors merged by the fast pass are written chunk by chunk, never
    held whole, from a background thread.
    """
    use_base, chunked = method.needs_base, method.elementwise
    kernel = method.fast_kernel(len(models)) if FAST and chunked else None
    with fw.threads() if kernel is not None else nullcontext():
        # A method's first pass checks what it reads itself (the TIES histogram flags NaN/Inf);
        # the merge pass checks inputs unless that pass saw them all (Method.verify_inputs).
        if kernel is not None:  # the first passes read chunk buffers too
            method.prepare(ViewStream(lambda: flat_views(models, base if use_base else None, plan),
                                      view_stream(models, base, plan, use_base, chunked).total))
        else:
            method.prepare(view_stream(models, base, plan, use_base, chunked))
        if kernel is not None:
            kernel = method.fast_kernel(len(models))  # now with the first pass's thresholds
        _merge_pass(method, models, base if use_base else None, plan, sink, writer, kernel)


PREPARE_CHUNK = 1 << 22  # entries per chunk of the first passes (they only sample)


def flat_views(models: list[TensorSource], base: TensorSource | None, plan: Plan) -> Iterator[TensorView]:
    """The views of :func:`view_stream` for the fast pass: flat chunks of the shared
    entries in reused buffers (consume each before the next). Only for methods with a
    :meth:`Method.fast_kernel`, whose first passes do not depend on the chunking."""
    for name, _, _ in plan.layout:
        if name in plan.passthrough:
            continue
        n = shared_numel(models, plan, name)
        ins = [fr.ChunkInput(s, name, n, PREPARE_CHUNK) for s in ([base] if base is not None else []) + models]
        try:
            for a in range(0, n, PREPARE_CHUNK):
                b = min(a + PREPARE_CHUNK, n)
                parts = [x.chunk(a, b) for x in ins]
                yield TensorView(name, parts[1:] if base is not None else parts, parts[0] if base is not None else None)
        finally:
            for x in ins:
                x.close()


def fast_ok(models: list[TensorSource], name: str, n: int) -> bool:
    """Whether the fast pass can merge tensor ``name`` (``n`` shared entries, all float)."""
    return n > 0 and all(s.shapes[name][1].is_floating_point for s in models)


def fast_tensor(kernel: fk.Kernel, method: Method, models: list[TensorSource], base: TensorSource | None,
                plan: Plan, name: str, shape: tuple[int, ...], dtype: torch.dtype, bufs: fk.Buffers,
                sink: Sink) -> bool:
    """Merge one tensor with the fast pass; False if it must take the reference path."""
    rp = plan.rows.get(name)
    n = shared_numel(models, plan, name)
    if not fast_ok(models, name, n):
        return False
    full = torch.empty(shape, dtype=dtype)
    flat = full.reshape(-1)
    ft.merge_tensor(kernel, models, base, name, n, dtype, bufs, lambda a, b, c: flat[a:b].copy_(c), method.name)
    if rp is not None:
        full[rp.shared:] = added_rows(method, models, base, name, rp, base is not None).to(dtype)
    sink(name, full)
    return True


def _merge_pass(method: Method, models: list[TensorSource], base: TensorSource | None, plan: Plan, sink: Sink,
                writer: Any, kernel: fk.Kernel | None) -> None:
    """The merge pass; with a ``writer`` (a SafetensorsWriter) and a kernel, blocks are
    read and merged on two threads and written from a third, in file order
    (:func:`mmgrid.merge.fastpass.writer.write_blocks`)."""
    if writer is None or kernel is None:
        bufs = fk.Buffers(len(models)) if kernel is not None else None
        for name, shape, dtype in plan.layout:
            sink(name, _one_tensor(method, models, base, plan, name, shape, dtype, kernel, bufs))
        return
    srcs = ([base] if base is not None else []) + list(models)
    jobs = []
    for name, shape, dtype in plan.layout:
        n = shared_numel(models, plan, name)
        if name in plan.passthrough or plan.rows.get(name) is not None or not fast_ok(models, name, n):
            jobs.append(fw.Job(name, 0, n, dtype, whole=functools.partial(
                _one_tensor, method, models, base, plan, name, shape, dtype, kernel, None)))
        else:
            jobs += fw.block_jobs(name, n, dtype, max(s.shapes[name][1].itemsize for s in srcs))
    reader = fr.BlockReader(srcs)
    aw = fw.AsyncWriter(writer)
    ahead = fr.locate_ahead(srcs, [j.name for j in jobs if j.whole is None])
    try:
        fw.write_blocks(jobs, lambda job, out, work: ft.merge_block(kernel, reader, job, out, work, method.name),
                        aw, make_work=lambda: (fk.Buffers(len(models)), [torch.empty(0, dtype=torch.uint8) for _ in srcs]))
    finally:
        ahead.shutdown(wait=True, cancel_futures=True)
        try:
            aw.drain()
        finally:
            reader.close()


def _one_tensor(method: Method, models: list[TensorSource], base: TensorSource | None, plan: Plan, name: str,
                shape: tuple[int, ...], dtype: torch.dtype, kernel: fk.Kernel | None,
                bufs: fk.Buffers | None) -> torch.Tensor:
    """One merged tensor, whole, in the output dtype (the fast pass where it applies)."""
    if kernel is not None and name not in plan.passthrough:
        got: list[torch.Tensor] = []
        if fast_tensor(kernel, method, models, base, plan, name, shape, dtype, bufs or fk.Buffers(len(models)),
                       lambda _, t: got.append(t)):
            return got[0]
    return reference_tensor(method, models, base, plan, name, dtype)
