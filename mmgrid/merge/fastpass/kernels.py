"""The fast pass's arithmetic: one chunk of :data:`CHUNK` entries at a time, in reused
float32 buffers, the same operations as the reference path (so the results are bitwise
equal; tests/merge/test_fastpass.py checks it).

Covered: linear methods (task arithmetic, average: c_0 theta_0 + sum_i c_i theta_i),
the temporal lerp (:func:`mmgrid.merge.ops.interpolate`) and the Euclidean pipeline
without DARE (TIES with the whole-model top-X%, sign election, disjoint mean or sum).
A method says which kernel it takes with :meth:`mmgrid.merge.methods.base.Method.fast_kernel`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from mmgrid.merge import ops
from mmgrid.merge.errors import NonFiniteError

CHUNK = 1 << 17  # entries per compute chunk (512 KiB of float32): the work buffers stay in L2 (2 MiB per core here)


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
        sign_rule: the election's rule (:data:`mmgrid.merge.ops.SIGN_RULES`).
        scale: factor on the combined delta.
        tensor_coefs: linear methods whose coefficients differ by tensor (slerp: computed
            by the method's first pass): tensor name -> (c_0, [c_i]).
    """

    coefs: tuple[float | None, list[float]] | None = None
    lerp: float | None = None
    thresholds: list[float] | None = None
    weights: tuple[float, ...] = ()
    combine: str = "sum"
    elect_sign: bool = False
    sign_rule: str = "unweighted"
    scale: float = 1.0
    tensor_coefs: dict | None = None


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
    if k.combine == "disjoint_mean" or k.elect_sign:  # NaN in the mass poisons the result
        sign = ops.elect_sign(ds, list(k.weights) if k.weights else None, k.sign_rule, out=bufs.sign[:m])
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


def all_finite(t: torch.Tensor) -> bool:
    return bool(torch.isfinite(t.sum(dtype=torch.float32)))


def kernel_chunk(k: Kernel, parts: list[torch.Tensor], bufs: Buffers, ins: list, name: str) -> torch.Tensor:
    """One chunk through the kernel (base first in ``parts``); the float32 result."""
    if k.lerp is not None:  # MMGRid Eq. 9-10 on float32 copies; NaN/Inf in either input reaches the result
        m = parts[0].numel()
        acc, tmp = bufs.acc[:m], bufs.tmp[:m]
        acc.copy_(parts[0])
        tmp.copy_(parts[1])
        return ops.lerp_into(acc, tmp, k.lerp, acc)
    if k.tensor_coefs is not None:
        k = Kernel(coefs=k.tensor_coefs[name])
    if k.coefs is None:
        return pipeline_chunk(k, parts[1:], parts[0], bufs)
    acc, skipped = linear_chunk(k, parts, bufs)
    for j in skipped:  # the reference adds a non-finite part even at coefficient 0
        if not all_finite(parts[j]):
            culprit(parts, ins, name)
    return acc


def culprit(parts: list[torch.Tensor], ins: list, name: str) -> None:
    for t, x in zip(parts, ins):
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise NonFiniteError(f"tensor {name!r} of {x.label} holds NaN or Inf; fix or retrain that checkpoint")
