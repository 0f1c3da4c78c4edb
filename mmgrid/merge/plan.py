"""Before any tensor is merged: check the inputs, plan the output, and cut tensors into
the views a method sees.

:func:`check_and_plan` validates names, shapes and dtypes (added vocabulary rows
planned by :mod:`mmgrid.merge.vocab`); :func:`tensor_views` hands a method one tensor's
shared rows, whole or in row chunks of at most :data:`CHUNK_ELEMS` entries (elementwise
methods), checked for NaN/Inf; :func:`view_stream` is what a method's first passes
(:meth:`mmgrid.merge.methods.base.Method.prepare`) read.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from mmgrid.merge import vocab as vc
from mmgrid.merge.errors import MissingTensorError, NonFiniteError, ShapeMismatchError
from mmgrid.merge.fastpass.kernels import finite_range
from mmgrid.merge.methods.base import TensorView, ViewStream
from mmgrid.merge.tensors import TensorSource

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


def is_vocab(name: str, has_rows: bool) -> bool:
    """Embedding / LM-head rows (merged in Euclidean space by the geometric methods)."""
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


def check_finite(t: torch.Tensor, name: str, where: str) -> None:
    """Raise NonFiniteError naming ``where`` if the float tensor ``t`` holds NaN or Inf."""
    if not t.is_floating_point():
        return
    # One reduction without a temporary: NaN and Inf propagate into a float32 sum and into
    # both ends of ``aminmax``; only when that says not finite (or finite values overflowed
    # the sum) is the exact check run. aminmax for 16-bit tensors (no float32 upcast of each
    # entry, as a float32 sum of a bf16 tensor needs), the sum for 32/64-bit ones (one pass).
    if t.element_size() < 4 and finite_range(t):
        return
    if t.element_size() >= 4 and bool(torch.isfinite(t.sum(dtype=torch.float32))):
        return
    if not bool(torch.isfinite(t).all()):
        raise NonFiniteError(f"tensor {name!r} of {where} holds NaN or Inf; fix or retrain that checkpoint")


# Elementwise methods see big tensors in row chunks of at most this many entries, so
# their float32 temporaries stay small; the stored-dtype tensors are read once each.
CHUNK_ELEMS = 1 << 22


def row_chunks(shape: tuple[int, ...], rows: int) -> list[tuple[int, int]]:
    """Row spans of at most :data:`CHUNK_ELEMS` entries (at least one row each)."""
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
    vocab = is_vocab(name, rp is not None)
    rows = full[0].shape[0] if full[0].ndim else 0
    spans = row_chunks(tuple(full[0].shape), rows) if chunked and full[0].ndim else [None]
    for span in spans:
        ts = [t if span is None else t[span[0]:span[1]] for t in full]
        bv = None if b is None else (b if span is None else b[span[0]:span[1]])
        if verify:
            for t, m in zip(ts, models):
                check_finite(t, name, m.label)
            if bv is not None:
                check_finite(bv, name, base.label if base is not None else "the base")  # bv: from base
        yield TensorView(name, ts, bv, vocab, 0 if span is None else span[0])


def all_views(models: list[TensorSource], base: TensorSource | None, plan: Plan, use_base: bool,
           chunked: bool = False, verify: bool = True) -> Iterator[TensorView]:
    """Views of every merged tensor (one tensor, or one chunk, at a time)."""
    for name, _, _ in plan.layout:
        if name not in plan.passthrough:
            yield from tensor_views(models, base, plan, name, use_base, chunked, verify)


def view_stream(models: list[TensorSource], base: TensorSource | None, plan: Plan, use_base: bool,
                chunked: bool) -> ViewStream:
    """The stream a method's first passes read (inputs unchecked: the pass checks)."""
    total = 0
    shapes: dict[str, tuple[int, ...]] = {}
    for name, _, _ in plan.layout:
        if name not in plan.passthrough:
            shape = models[0].shapes[name][0]
            rp = plan.rows.get(name)
            shapes[name] = tuple(int(d) for d in ((rp.shared,) + tuple(shape[1:]) if rp else shape))
            n = 1
            for d in shapes[name]:
                n *= d
            total += n
    return ViewStream(lambda: all_views(models, base, plan, use_base, chunked, verify=False), total, shapes)




def shared_numel(models: list[TensorSource], plan: Plan, name: str) -> int:
    """Entries of tensor ``name`` every input has (its shared rows)."""
    rp = plan.rows.get(name)
    shape = models[0].shapes[name][0]
    n = 1
    for d in ((rp.shared,) + tuple(shape[1:]) if rp else shape):
        n *= int(d)
    return n
