"""The merge loop: plan, the methods' first passes, then tensor by tensor through the
fast pass (:mod:`mmgrid.merge.fastpass`) where the method declares a chunkable
:class:`~mmgrid.merge.pipeline.Kernel` and the tensor fits it, else the reference path
(:mod:`mmgrid.merge.reference`); each result goes, in the output dtype, to a sink or
(files) straight to a streaming writer.

Both paths evaluate a method's kernel with the same function
(:func:`mmgrid.merge.pipeline.apply_kernel`), so the route changes speed and memory, never
bits; :class:`Route` picks it explicitly (tests compare the two).

Methods that need whole-model statistics (TIES over the whole model) get extra streaming
passes through :meth:`Method.prepare` before the merge pass.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import torch

from mmgrid.merge.fastpass import kernels as fk
from mmgrid.merge.fastpass import reads as fr
from mmgrid.merge.fastpass import tensor as ft
from mmgrid.merge.fastpass import writer as fw
from mmgrid.merge.methods.base import Method, TensorView, ViewStream
from mmgrid.merge.pipeline import Kernel
from mmgrid.merge.plan import Plan, shared_numel, view_stream
from mmgrid.merge.reference import added_rows, reference_tensor
from mmgrid.merge.tensors import TensorSource

Sink = Callable[[str, torch.Tensor], None]

PREPARE_CHUNK = 1 << 22  # entries per chunk of the first passes (they only sample)


@dataclass(frozen=True)
class Route:
    """Which path merges the tensors, and its chunk sizes.

    Attributes:
        fast: the fast pass wherever the method's kernel and the tensor allow it (the
            default); False: the reference path for every tensor. Both give the same bits.
        chunk: entries per compute chunk of the fast pass.
        prepare_chunk: entries per chunk of the first passes on the fast route.
    """

    fast: bool = True
    chunk: int = fk.CHUNK
    prepare_chunk: int = PREPARE_CHUNK


REFERENCE = Route(fast=False)


@dataclass
class MergePass:
    """One merge pass: the method, its inputs, the plan, the fast kernel (None: reference
    path only) and the route."""

    method: Method
    models: list[TensorSource]
    base: TensorSource | None
    plan: Plan
    kernel: Kernel | None
    route: Route

    @property
    def srcs(self) -> list[TensorSource]:
        """The base (if any) then the inputs: the order of a kernel's parts."""
        return ([self.base] if self.base is not None else []) + list(self.models)

    def buffers(self) -> fk.Buffers:
        return fk.Buffers(len(self.models), self.route.chunk)


def run(method: Method, models: list[TensorSource], base: TensorSource | None, plan: Plan, sink: Sink,
        writer: Any = None, route: Route | None = None) -> None:
    """Merge every tensor and give each result (in the output dtype) to ``sink``.

    With ``writer`` (a :class:`~mmgrid.merge.tensors.SafetensorsWriter`; ``sink`` is
    then unused) tensors merged by the fast pass are written chunk by chunk, never
    held whole, from a background thread. ``route``: :class:`Route` (default: the fast
    pass where it applies).
    """
    route = route or Route()
    use_base, chunked = method.needs_base, method.elementwise
    k = method.kernel(len(models)) if route.fast and chunked else None
    fast = k is not None and k.chunkable
    with fw.threads() if fast else nullcontext():
        # A method's first pass checks what it reads itself (the TIES histogram flags NaN/Inf);
        # the merge pass checks inputs unless that pass saw them all (Method.verify_inputs).
        if fast:  # the first passes read chunk buffers too
            vs = view_stream(models, base, plan, use_base, chunked)
            method.prepare(ViewStream(lambda: flat_views(models, base if use_base else None, plan, route.prepare_chunk),
                                      vs.total, vs.shapes))
        else:
            method.prepare(view_stream(models, base, plan, use_base, chunked))
        kernel = method.kernel(len(models)) if fast else None  # now with the first pass's statistics
        _merge_pass(MergePass(method, models, base if use_base else None, plan, kernel, route), sink, writer)


def flat_views(models: list[TensorSource], base: TensorSource | None, plan: Plan,
               chunk: int = PREPARE_CHUNK) -> Iterator[TensorView]:
    """The views of :func:`view_stream` for the fast pass: flat chunks of ``chunk``
    shared entries in reused buffers (consume each before the next). Only for methods
    with a chunkable :meth:`Method.kernel`, whose first passes do not depend on the
    chunking."""
    for name, _, _ in plan.layout:
        if name in plan.passthrough:
            continue
        n = shared_numel(models, plan, name)
        ins = [fr.ChunkInput(s, name, n, chunk) for s in ([base] if base is not None else []) + models]
        try:
            for a in range(0, n, chunk):
                b = min(a + chunk, n)
                parts = [x.chunk(a, b) for x in ins]
                yield TensorView(name, parts[1:] if base is not None else parts, parts[0] if base is not None else None)
        finally:
            for x in ins:
                x.close()


def fast_ok(models: list[TensorSource], name: str, n: int) -> bool:
    """Whether the fast pass can merge tensor ``name`` (``n`` shared entries, all float)."""
    return n > 0 and all(s.shapes[name][1].is_floating_point for s in models)


def fast_tensor(mp: MergePass, name: str, shape: tuple[int, ...], dtype: torch.dtype, bufs: fk.Buffers) -> torch.Tensor | None:
    """One tensor merged by the fast pass, whole, in ``dtype``; None if it must take the
    reference path."""
    n = shared_numel(mp.models, mp.plan, name)
    if mp.kernel is None or name in mp.plan.passthrough or not fast_ok(mp.models, name, n):
        return None
    full = torch.empty(shape, dtype=dtype)
    flat = full.reshape(-1)
    ft.merge_tensor(mp.kernel, mp.srcs, name, n, bufs, lambda a, b, c: flat[a:b].copy_(c), mp.method.name)
    rp = mp.plan.rows.get(name)
    if rp is not None:
        full[rp.shared:] = added_rows(mp.method, mp.models, mp.base, name, rp, mp.base is not None).to(dtype)
    return full


def _merge_pass(mp: MergePass, sink: Sink, writer: Any) -> None:
    """The merge pass; with a ``writer`` (a SafetensorsWriter) and a kernel, blocks are
    read and merged on two threads and written from a third, in file order
    (:func:`mmgrid.merge.fastpass.writer.write_blocks`)."""
    plan = mp.plan
    if writer is None or mp.kernel is None:
        bufs = mp.buffers() if mp.kernel is not None else None
        for name, shape, dtype in plan.layout:
            sink(name, _one_tensor(mp, name, shape, dtype, bufs))
        return
    srcs = mp.srcs
    jobs = []
    for name, shape, dtype in plan.layout:
        n = shared_numel(mp.models, plan, name)
        if name in plan.passthrough or plan.rows.get(name) is not None or not fast_ok(mp.models, name, n):
            jobs.append(fw.Job(name, 0, n, dtype, whole=functools.partial(_one_tensor, mp, name, shape, dtype, None)))
        else:
            jobs += fw.block_jobs(name, n, dtype, max(s.shapes[name][1].itemsize for s in srcs), chunk=mp.route.chunk)
    reader = fr.BlockReader(srcs)
    aw = fw.AsyncWriter(writer)
    ahead = fr.locate_ahead(srcs, [j.name for j in jobs if j.whole is None])
    kernel = mp.kernel
    assert kernel is not None  # the fast pass runs only methods with a kernel
    try:
        fw.write_blocks(jobs, lambda job, out, work: ft.merge_block(kernel, reader, job, out, work, mp.method.name),
                        aw, make_work=lambda: (mp.buffers(), [torch.empty(0, dtype=torch.uint8) for _ in srcs]))
    finally:
        ahead.shutdown(wait=True, cancel_futures=True)
        try:
            aw.drain()
        finally:
            reader.close()


def _one_tensor(mp: MergePass, name: str, shape: tuple[int, ...], dtype: torch.dtype,
                bufs: fk.Buffers | None) -> torch.Tensor:
    """One merged tensor, whole, in the output dtype (the fast pass where it applies)."""
    if mp.kernel is not None:
        got = fast_tensor(mp, name, shape, dtype, bufs or mp.buffers())
        if got is not None:
            return got
    return reference_tensor(mp.method, mp.models, mp.base, mp.plan, name, dtype)
