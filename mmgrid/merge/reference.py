"""The reference merge path: one whole tensor per input at a time, merged by the
method's own :meth:`~mmgrid.merge.methods.base.Method.merge_tensor` in float32 (row
chunks for elementwise methods), checked, cast back to the inputs' dtype.

Memory: per tensor, the inputs and the base as float32 plus the result; never a whole
model per input. The fast pass (:mod:`mmgrid.merge.fastpass`) gives the same bits for
the methods it covers; everything else, and every tensor it cannot take (added
vocabulary rows, passthrough tensors), is merged here.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch

from mmgrid.merge import ops
from mmgrid.merge import pipeline as pl
from mmgrid.merge import vocab as vc
from mmgrid.merge.errors import ShapeMismatchError
from mmgrid.merge.methods.base import Method, TensorView
from mmgrid.merge.plan import Plan, check_finite, row_chunks, tensor_views
from mmgrid.merge.tensors import TensorSource


def reference_tensor(method: Method, models: list[TensorSource], base: TensorSource | None, plan: Plan, name: str,
                     dtype: torch.dtype) -> torch.Tensor:
    """One merged tensor, whole, in the output dtype, by the reference path.

    An elementwise method with a :meth:`~mmgrid.merge.methods.base.Method.kernel` is
    evaluated by :func:`mmgrid.merge.pipeline.apply_kernel` on row chunks (the function the
    fast pass calls on its chunks); any other by its ``merge_tensor``.
    """
    if name in plan.passthrough:
        return passthrough(models, name)
    use_base, chunked = base is not None, method.elementwise
    parts = []
    kernel = method.kernel(len(models)) if chunked else None
    coefs = kernel.coefs_for(name) if kernel is not None else None
    if kernel is not None and kernel.coefs is not None and coefs is None:
        kernel = None  # a tensor the first pass did not see (no shared entries): the method's own merge
    if coefs is not None:
        parts = list(linear_chunks(models, base if use_base else None, plan, name, coefs, dtype, method.name))
    views = () if coefs is not None else tensor_views(models, base, plan, name, use_base, chunked, method.verify_inputs)
    for view in views:
        if kernel is not None:
            # DARE's masks are drawn per row chunk (its key); the other kernels read their
            # first passes' statistics by the tensor's name
            dare = kernel.pipeline is not None and kernel.pipeline.uses_dare
            key = view.key if dare else view.name
            ins = ([view.raw_base] if view.raw_base is not None else []) + view.raw
            if kernel.fn is not None and getattr(kernel.fn, "positional", False):  # entries depend on their flat position
                out = kernel.fn(view.name, ins, None, view.start * math.prod(view.raw[0].shape[1:]))
            else:
                out = pl.apply_kernel(kernel, key, ins)
        else:
            out = method.merge_tensor(view)
        check_finite(out, name, f"the {method.name} merge (check the method's parameters)")
        parts.append(out.to(dtype))
    rp = plan.rows.get(name)
    if rp is not None:
        parts.append(added_rows(method, models, base, name, rp, use_base).to(dtype))
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def linear_chunks(models: list[TensorSource], base: TensorSource | None, plan: Plan, name: str,
                  coefs: ops.Coefs, dtype: torch.dtype, method: str) -> Iterator[torch.Tensor]:
    """The reference path of linear methods: :func:`mmgrid.merge.ops.linear_combination`
    (c_0 theta_0 + sum_i c_i theta_i) row chunk by row chunk.

    Accumulates in float32 straight from the stored dtype (no float32 copy of each
    input). NaN/Inf in an input always reaches the sum, so only the result is checked;
    the inputs are searched only to name the culprit.
    """
    rp = plan.rows.get(name)
    srcs = ([base] if base is not None else []) + list(models)
    full = [(s.get(name)[: rp.shared] if rp else s.get(name)) for s in srcs]
    rows = full[0].shape[0] if full[0].ndim else 0
    spans = row_chunks(tuple(full[0].shape), rows) if full[0].ndim else [None]
    for span in spans:
        parts = [t if span is None else t[span[0]:span[1]] for t in full]
        out = ops.linear_combination(parts, coefs)
        if not bool(torch.isfinite(out.sum())):
            for t, src in zip(parts, srcs):
                check_finite(t, name, src.label)
            check_finite(out, name, f"the {method} merge (check the method's parameters)")
        yield out.to(dtype)


def passthrough(models: list[TensorSource], name: str) -> torch.Tensor:
    t0 = models[0].get(name)
    if not t0.is_floating_point():
        for m in models[1:]:
            if not torch.equal(t0, m.get(name)):
                raise ShapeMismatchError(f"non-float tensor {name!r} differs between {models[0].label} and {m.label}; integer tensors cannot be merged")
    return t0


def added_rows(method: Method, models: list[TensorSource], base: TensorSource | None, name: str,
                rp: vc.RowPlan, use_base: bool) -> torch.Tensor:
    """Rows after the shared ones, in the plan's union order (see :mod:`mmgrid.merge.vocab`)."""
    full = [m.get(name) for m in models]
    bfull = base.get(name) if base is not None and use_base else None
    out = torch.zeros((len(rp.tokens),) + tuple(full[0].shape[1:]), dtype=torch.float32)
    by_method = [j for j, (src, brow) in enumerate(zip(rp.sources, rp.base_rows))
                 if len(src) == len(models) and (not use_base or brow is not None)]
    if by_method:  # one view of all rows every input has, merged by the method at once
        ts = [torch.stack([full[i][dict(rp.sources[j])[i]] for j in by_method]).float() for i in range(len(models))]
        b = None
        if use_base:
            assert bfull is not None  # use_base: the caller passes the base
            b = torch.stack([bfull[rp.base_rows[j]] for j in by_method]).float()
        out[by_method] = method.merge_tensor(TensorView(f"{name}[added]", ts, b, True))
    done = set(by_method)
    for j, src in enumerate(rp.sources):
        if j not in done:
            out[j] = torch.stack([full[i][r].float() for i, r in src]).mean(0)
    check_finite(out, name, f"the {method.name} merge of the added rows")
    return out
