"""The streaming merge loop: check the inputs, then tensor by tensor read, merge in
float32, check, cast back to the inputs' dtype and hand to a sink.

Memory: per tensor, the inputs and the base as float32 plus the result; never a whole
model per input. Methods that need whole-model statistics (TIES over the whole model)
get extra streaming passes through :meth:`Method.prepare` before the merge pass.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch

from mmgrid.merge import stream
from mmgrid.merge import vocab as vc
from mmgrid.merge.errors import MissingTensorError, NonFiniteError, ShapeMismatchError
from mmgrid.merge.methods.base import Method, TensorView, ViewStream
from mmgrid.merge.tensors import TensorSource

Sink = Callable[[str, torch.Tensor], None]
PASSTHROUGH_MARKERS = ("rotary", "inv_freq")  # buffers that are not weights


@dataclass
class Plan:
    """What the merge will produce, known before any tensor is merged.

    Attributes:
        layout: (name, shape, dtype) of every output tensor, in output order.
        rows: tensor name -> RowPlan for tensors with added vocabulary.
        passthrough: names copied from the first input (non-float or buffers).
    """

    layout: list[tuple[str, tuple[int, ...], torch.dtype]]
    rows: dict[str, vc.RowPlan] = field(default_factory=dict)
    passthrough: set[str] = field(default_factory=set)

    def provenance(self, n: int) -> dict[str, Any]:
        return {name: p.provenance(n) for name, p in self.rows.items()}


def _is_vocab(name: str, has_rows: bool) -> bool:
    low = name.lower()
    return has_rows or "embed" in low or "lm_head" in low or "wte" in low


def check_and_plan(models: list[TensorSource], base: TensorSource | None) -> Plan:
    """Validate names, shapes and dtypes of all inputs; plan the output.

    Raises:
        MissingTensorError: a tensor present in one input but not in another or the base.
        ShapeMismatchError: different shapes other than added-vocabulary rows.
    """
    first = models[0]
    names = first.keys()
    for src in models[1:] + ([base] if base is not None else []):
        missing, extra = set(names) - set(src.keys()), set(src.keys()) - set(names)
        if missing or extra:
            name = sorted(missing or extra)[0]
            where = src.label if missing else first.label
            raise MissingTensorError(f"tensor {name!r} is missing from {where} ({len(missing | extra)} names differ); merge models of one architecture")
    plan = Plan([])
    labels = [m.label for m in models]
    for name in names:
        shapes = [m.shapes[name][0] for m in models]
        dtypes = [m.shapes[name][1] for m in models]
        if any(d.is_floating_point != dtypes[0].is_floating_point for d in dtypes):
            raise ShapeMismatchError(f"tensor {name!r}: inputs mix float and integer dtypes ({dtypes})")
        rp = vc.plan_rows(name, [s[0] if s else 0 for s in shapes], [m.meta for m in models], labels,
                          base.shapes[name][0][0] if base is not None and base.shapes[name][0] else None,
                          base.meta if base is not None else None)
        out_shape = shapes[0]
        if rp is not None:
            plan.rows[name] = rp
            out_shape = (rp.out_rows,) + tuple(shapes[0][1:])
            check = [tuple(s[1:]) for s in shapes] + ([tuple(base.shapes[name][0][1:])] if base else [])
        else:
            check = [tuple(s) for s in shapes] + ([tuple(base.shapes[name][0])] if base else [])
        if len(set(check)) != 1:
            detail = ", ".join(f"{lab}: {tuple(s)}" for lab, s in zip(labels, shapes))
            raise ShapeMismatchError(f"tensor {name!r} has different shapes ({detail}{', base: ' + str(base.shapes[name][0]) if base else ''}); merge models of one architecture")
        if not dtypes[0].is_floating_point or any(m in name for m in PASSTHROUGH_MARKERS):
            plan.passthrough.add(name)
        plan.layout.append((name, tuple(out_shape), dtypes[0]))
    return plan


def _finite(t: torch.Tensor, name: str, where: str) -> None:
    if not t.is_floating_point():
        return
    # One reduction without a temporary: NaN and Inf propagate into the sum. Only when the
    # sum is not finite (or finite values overflowed it) is the exact check run.
    if bool(torch.isfinite(t.sum(dtype=torch.float32))):
        return
    if not bool(torch.isfinite(t).all()):
        raise NonFiniteError(f"tensor {name!r} of {where} holds NaN or Inf; fix or retrain that checkpoint")


# Elementwise methods see big tensors in row chunks of at most this many entries, so
# their float32 temporaries stay small; the stored-dtype tensors are read once each.
CHUNK_ELEMS = 1 << 22


def _chunks(shape: tuple[int, ...], rows: int) -> list[tuple[int, int]]:
    per_row = 1
    for s in shape[1:]:
        per_row *= int(s)
    step = max(1, CHUNK_ELEMS // max(per_row, 1))
    return [(a, min(a + step, rows)) for a in range(0, max(rows, 1), step)] if rows else [(0, 0)]


def tensor_views(models: list[TensorSource], base: TensorSource | None, plan: Plan, name: str,
                 use_base: bool, chunked: bool, verify: bool = True) -> Iterator[TensorView]:
    """Views of one tensor's shared rows (as stored): whole, or in row chunks.

    With ``verify`` every input chunk is checked for NaN/Inf (one reduction each);
    methods whose first pass already checked every delta turn it off.
    """
    rp = plan.rows.get(name)
    full = []
    for m in models:
        t = m.get(name)
        full.append(t[: rp.shared] if rp else t)
    b = None
    if use_base and base is not None:
        bt = base.get(name)
        b = bt[: rp.shared] if rp else bt
    vocab = _is_vocab(name, rp is not None)
    rows = full[0].shape[0] if full[0].ndim else 0
    spans = _chunks(tuple(full[0].shape), rows) if chunked and full[0].ndim else [None]
    for span in spans:
        ts = [t if span is None else t[span[0]:span[1]] for t in full]
        bv = None if b is None else (b if span is None else b[span[0]:span[1]])
        if verify:
            for t, m in zip(ts, models):
                _finite(t, name, m.label)
            if bv is not None:
                _finite(bv, name, base.label)
        yield TensorView(name, ts, bv, vocab, 0 if span is None else span[0])


def _views(models: list[TensorSource], base: TensorSource | None, plan: Plan, use_base: bool,
           chunked: bool = False, verify: bool = True) -> Iterator[TensorView]:
    """Views of every merged tensor (one tensor, or one chunk, at a time)."""
    for name, _, _ in plan.layout:
        if name not in plan.passthrough:
            yield from tensor_views(models, base, plan, name, use_base, chunked, verify)


def view_stream(models: list[TensorSource], base: TensorSource | None, plan: Plan, use_base: bool,
                chunked: bool) -> ViewStream:
    """The stream a method's first passes read (inputs unchecked: the pass checks)."""
    total = 0
    for name, _, _ in plan.layout:
        if name not in plan.passthrough:
            shape = models[0].shapes[name][0]
            rp = plan.rows.get(name)
            n = 1
            for d in ((rp.shared,) + tuple(shape[1:]) if rp else shape):
                n *= int(d)
            total += n
    return ViewStream(lambda: _views(models, base, plan, use_base, chunked, verify=False), total)


# The fast pass of mmgrid.merge.stream (bitwise equal to the reference path below);
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
    with stream.threads() if kernel is not None else nullcontext():
        # A method's first pass checks what it reads itself (the TIES histogram flags NaN/Inf);
        # the merge pass checks inputs unless that pass saw them all (Method.verify_inputs).
        if kernel is not None:  # the first passes read chunk buffers too
            method.prepare(ViewStream(lambda: _flat_views(models, base if use_base else None, plan),
                                      view_stream(models, base, plan, use_base, chunked).total))
        else:
            method.prepare(view_stream(models, base, plan, use_base, chunked))
        if kernel is not None:
            kernel = method.fast_kernel(len(models))  # now with the first pass's thresholds
        _merge_pass(method, models, base if use_base else None, plan, sink, writer, kernel)


PREPARE_CHUNK = 1 << 22  # entries per chunk of the first passes (they only sample)


def _shared_numel(models: list[TensorSource], plan: Plan, name: str) -> int:
    rp = plan.rows.get(name)
    shape = models[0].shapes[name][0]
    n = 1
    for d in ((rp.shared,) + tuple(shape[1:]) if rp else shape):
        n *= int(d)
    return n


def _flat_views(models: list[TensorSource], base: TensorSource | None, plan: Plan) -> Iterator[TensorView]:
    """The views of :func:`view_stream` for the fast pass: flat chunks of the shared
    entries in reused buffers (consume each before the next). Only for methods with a
    :meth:`Method.fast_kernel`, whose first passes do not depend on the chunking."""
    for name, _, _ in plan.layout:
        if name in plan.passthrough:
            continue
        n = _shared_numel(models, plan, name)
        ins = [stream.ChunkInput(s, name, n, PREPARE_CHUNK) for s in ([base] if base is not None else []) + models]
        try:
            for a in range(0, n, PREPARE_CHUNK):
                b = min(a + PREPARE_CHUNK, n)
                parts = [x.chunk(a, b) for x in ins]
                yield TensorView(name, parts[1:] if base is not None else parts, parts[0] if base is not None else None)
        finally:
            for x in ins:
                x.close()


def _fast_ok(models: list[TensorSource], name: str, n: int) -> bool:
    """Whether the fast pass can merge tensor ``name`` (``n`` shared entries, all float)."""
    return n > 0 and all(s.shapes[name][1].is_floating_point for s in models)


def _fast_tensor(kernel: stream.Kernel, method: Method, models: list[TensorSource], base: TensorSource | None,
                 plan: Plan, name: str, shape: tuple[int, ...], dtype: torch.dtype, bufs: stream.Buffers,
                 sink: Sink) -> bool:
    """Merge one tensor with the fast pass; False if it must take the reference path."""
    rp = plan.rows.get(name)
    n = _shared_numel(models, plan, name)
    if not _fast_ok(models, name, n):
        return False
    full = torch.empty(shape, dtype=dtype)
    flat = full.reshape(-1)
    stream.merge_tensor(kernel, models, base, name, n, dtype, bufs, lambda a, b, c: flat[a:b].copy_(c), method.name)
    if rp is not None:
        full[rp.shared:] = _added_rows(method, models, base, name, rp, base is not None).to(dtype)
    sink(name, full)
    return True


def _merge_pass(method: Method, models: list[TensorSource], base: TensorSource | None, plan: Plan, sink: Sink,
                writer: Any, kernel: stream.Kernel | None) -> None:
    """The merge pass; with a ``writer`` (a SafetensorsWriter) and a kernel, blocks are
    read and merged on two threads and written from a third, in file order
    (:func:`mmgrid.merge.stream.write_blocks`)."""
    if writer is None or kernel is None:
        bufs = stream.Buffers(len(models)) if kernel is not None else None
        for name, shape, dtype in plan.layout:
            sink(name, _one_tensor(method, models, base, plan, name, shape, dtype, kernel, bufs))
        return
    srcs = ([base] if base is not None else []) + list(models)
    jobs = []
    for name, shape, dtype in plan.layout:
        n = _shared_numel(models, plan, name)
        if name in plan.passthrough or plan.rows.get(name) is not None or not _fast_ok(models, name, n):
            jobs.append(stream.Job(name, 0, n, dtype, whole=functools.partial(
                _one_tensor, method, models, base, plan, name, shape, dtype, kernel, None)))
        else:
            jobs += stream.block_jobs(name, n, dtype, max(s.shapes[name][1].itemsize for s in srcs))
    reader = stream.BlockReader(srcs)
    aw = stream.AsyncWriter(writer)
    ahead = stream.locate_ahead(srcs, [j.name for j in jobs if j.whole is None])
    try:
        stream.write_blocks(jobs, lambda job, out, work: stream.merge_block(kernel, reader, job, out, work, method.name),
                            aw, make_work=lambda: (stream.Buffers(len(models)), [torch.empty(0, dtype=torch.uint8) for _ in srcs]))
    finally:
        ahead.shutdown(wait=True, cancel_futures=True)
        try:
            aw.drain()
        finally:
            reader.close()


def _one_tensor(method: Method, models: list[TensorSource], base: TensorSource | None, plan: Plan, name: str,
                shape: tuple[int, ...], dtype: torch.dtype, kernel: stream.Kernel | None,
                bufs: stream.Buffers | None) -> torch.Tensor:
    """One merged tensor, whole, in the output dtype (the fast pass where it applies)."""
    if name in plan.passthrough:
        return _passthrough(models, name)
    if kernel is not None:
        got: list[torch.Tensor] = []
        if _fast_tensor(kernel, method, models, base, plan, name, shape, dtype, bufs or stream.Buffers(len(models)),
                        lambda _, t: got.append(t)):
            return got[0]
    use_base, chunked = base is not None, method.elementwise
    parts = []
    coefs = method.linear(len(models)) if chunked else None
    if coefs is not None:
        parts = list(_linear_chunks(models, base if use_base else None, plan, name, coefs, dtype, method.name))
    views = () if coefs is not None else tensor_views(models, base, plan, name, use_base, chunked, method.verify_inputs)
    for view in views:
        out = method.merge_tensor(view)
        _finite(out, name, f"the {method.name} merge (check the method's parameters)")
        parts.append(out.to(dtype))
    rp = plan.rows.get(name)
    if rp is not None:
        parts.append(_added_rows(method, models, base, name, rp, use_base).to(dtype))
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def _linear_chunks(models: list[TensorSource], base: TensorSource | None, plan: Plan, name: str,
                   coefs: tuple[float, list[float]], dtype: torch.dtype, method: str) -> Iterator[torch.Tensor]:
    """Fast path of linear methods: c_0 theta_0 + sum_i c_i theta_i, chunk by chunk.

    Accumulates in float32 straight from the stored dtype (no float32 copy of each
    input). NaN/Inf in an input always reaches the sum (0 * Inf is NaN), so only the
    result is checked; the inputs are searched only to name the culprit.
    """
    rp = plan.rows.get(name)
    srcs = ([base] if base is not None else []) + list(models)
    cs = ([coefs[0]] if base is not None else []) + list(coefs[1])
    full = [(s.get(name)[: rp.shared] if rp else s.get(name)) for s in srcs]
    rows = full[0].shape[0] if full[0].ndim else 0
    spans = _chunks(tuple(full[0].shape), rows) if full[0].ndim else [None]
    for span in spans:
        parts = [t if span is None else t[span[0]:span[1]] for t in full]
        out = torch.empty(parts[0].shape, dtype=torch.float32)
        out.copy_(parts[0])
        if cs[0] != 1.0:
            out.mul_(cs[0])
        for t, c in zip(parts[1:], cs[1:]):
            if c != 0.0 or not bool(torch.isfinite(t.sum(dtype=torch.float32))):
                out.add_(t, alpha=c)
        if not bool(torch.isfinite(out.sum())):
            for t, src in zip(parts, srcs):
                _finite(t, name, src.label)
            _finite(out, name, f"the {method} merge (check the method's parameters)")
        yield out.to(dtype)


def _passthrough(models: list[TensorSource], name: str) -> torch.Tensor:
    t0 = models[0].get(name)
    if not t0.is_floating_point():
        for m in models[1:]:
            if not torch.equal(t0, m.get(name)):
                raise ShapeMismatchError(f"non-float tensor {name!r} differs between {models[0].label} and {m.label}; integer tensors cannot be merged")
    return t0


def _added_rows(method: Method, models: list[TensorSource], base: TensorSource | None, name: str,
                rp: vc.RowPlan, use_base: bool) -> torch.Tensor:
    """Rows after the shared ones, in the plan's union order (see :mod:`mmgrid.merge.vocab`)."""
    full = [m.get(name) for m in models]
    bfull = base.get(name) if base is not None and use_base else None
    out = torch.zeros((len(rp.tokens),) + tuple(full[0].shape[1:]), dtype=torch.float32)
    by_method = [j for j, (src, brow) in enumerate(zip(rp.sources, rp.base_rows))
                 if len(src) == len(models) and (not use_base or brow is not None)]
    if by_method:  # one view of all rows every input has, merged by the method at once
        ts = [torch.stack([full[i][dict(rp.sources[j])[i]] for j in by_method]).float() for i in range(len(models))]
        b = torch.stack([bfull[rp.base_rows[j]] for j in by_method]).float() if use_base else None
        out[by_method] = method.merge_tensor(TensorView(f"{name}[added]", ts, b, True))
    done = set(by_method)
    for j, src in enumerate(rp.sources):
        if j not in done:
            out[j] = torch.stack([full[i][r].float() for i, r in src]).mean(0)
    _finite(out, name, f"the {method.name} merge of the added rows")
    return out
