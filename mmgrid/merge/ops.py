"""Pure tensor math of Euclidean merging (no I/O, no registry, no names).

Every function takes and returns float tensors and is the single implementation of
its step: the merge methods, the sweeps and the training regularizers (Orbit and
Soup-to-Go averaging) call these. Equations refer to MMGRid unless noted.

The pipeline these steps form (delta -> sparsify -> elect sign -> combine -> scale):

* delta: :func:`task_vector` (MMGRid Eq. 2);
* sparsify: :func:`trim_magnitude` (TIES top-X%), :func:`dare` (DARE);
* elect sign: :func:`elect_sign` (TIES: sign of the total mass);
* combine: :func:`weighted_sum` (Eq. 3), :func:`disjoint_mean` (TIES), :func:`average`;
* scale: a plain multiplication by the caller.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Literal, get_args

import torch

from mmgrid.merge.errors import NonFiniteError

# float32 magnitudes as int32 bit patterns are monotone in the value; their top 20 bits
# (sign bit 0, 8 exponent bits, 11 mantissa bits) index the histogram bins of
# :func:`magnitude_histogram`: one bin spans a relative width of 2^-11.
MAG_SHIFT = 12
N_MAG_BINS = 1 << (31 - MAG_SHIFT)
NONFINITE_BIN = 0x7F800000 >> MAG_SHIFT  # Inf and NaN land at or above this bin


def average(tensors: Sequence[torch.Tensor], weights: Sequence[float] | None = None) -> torch.Tensor:
    """Weight averaging: sum_i w_i x_i / sum_i w_i (uniform weights by default).

    Args:
        tensors: same-shaped tensors.
        weights: optional non-negative weights, one per tensor.

    Returns:
        The (weighted) mean, float32.
    """
    if weights is None:
        out = tensors[0].float().clone()
        for t in tensors[1:]:
            out.add_(t.float())
        return out.div_(len(tensors))
    total = float(sum(weights))
    return weighted_sum(tensors, [w / total for w in weights])


def weighted_sum(tensors: Sequence[torch.Tensor], weights: Sequence[float],
                 out: torch.Tensor | None = None) -> torch.Tensor:
    """sum_i w_i x_i in float32 (task arithmetic's combine, MMGRid Eq. 3).

    Args:
        tensors: same-shaped tensors (any float dtype; each is read in float32).
        weights: w_i, one per tensor.
        out: a float32 buffer of their shape to write into (the fast pass's chunk buffer);
            a new tensor when None.

    With w_0 = -1 and w_1 = 1 (task arithmetic of weight-1 models in the coefficient form
    of :func:`linear_combination`) the first two terms are x_1 - x_0, the same bits as
    (-1 x_0) + x_1 (negation is exact, and a + (-b) rounds as a - b) in one pass fewer.
    """
    out = torch.empty(tensors[0].shape, dtype=torch.float32) if out is None else out
    first = 1
    if len(tensors) > 1 and float(weights[0]) == -1.0 and float(weights[1]) == 1.0:
        out.copy_(tensors[1])
        out.sub_(_f32(tensors[0]))
        first = 2
    elif tensors[0].dtype == torch.float32:
        torch.mul(tensors[0], float(weights[0]), out=out)
    else:  # upcast first: a bf16 product would round in bf16
        out.copy_(tensors[0])
        if float(weights[0]) != 1.0:
            out.mul_(float(weights[0]))
    for t, w in zip(tensors[first:], weights[first:]):
        out.add_(_f32(t), alpha=float(w))
    return out


def _f32(t: torch.Tensor) -> torch.Tensor:
    """``t`` as the operand of an in-place float32 op: float32, bf16 and fp16 as stored (the
    op reads them exactly in float32, no copy), other dtypes converted first."""
    return t if t.dtype in (torch.float32, torch.bfloat16, torch.float16) else t.float()


Coefs = tuple[float | None, Sequence[float]]


def linear_combination(parts: Sequence[torch.Tensor], coefs: Coefs, out: torch.Tensor | None = None) -> torch.Tensor:
    """c_0 theta_0 + sum_i c_i theta_i in float32: the linear methods (task arithmetic as
    theta_0 + sum_i lambda_i (theta_i - theta_0), MMGRid Eq. 3, in coefficient form;
    weight averaging; slerp, NuSLERP and Model Stock with their per-tensor coefficients).

    The one definition of a linear merge: the reference path (row chunks) and the fast
    pass (cache-sized chunks into a reused buffer) both call it.

    Args:
        parts: theta_0 first when c_0 is not None, then theta_1..theta_n (any float dtype,
            accumulated in float32 straight from it).
        coefs: (c_0 or None without a base, [c_1..c_n]).
        out: a float32 buffer of the parts' shape (a new tensor when None).

    A term with c_i = 0 (i >= 1) is left out unless it holds NaN/Inf: then it is added, so
    that the NaN reaches the result (0 * Inf is NaN) and the caller's check of the result
    finds the bad input.
    """
    c0, cs = coefs
    allc = ([c0] if c0 is not None else []) + [float(c) for c in cs]
    keep = [0] + [j for j in range(1, len(parts))
                  if allc[j] != 0.0 or not bool(torch.isfinite(parts[j].sum(dtype=torch.float32)))]
    return weighted_sum([parts[j] for j in keep], [allc[j] for j in keep], out)


def task_vector(model: torch.Tensor, base: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """tau = theta - theta_0 (MMGRid Eq. 2) in float32 (into ``out``, a float32 buffer of
    their shape, when given)."""
    out = torch.empty(model.shape, dtype=torch.float32) if out is None else out
    out.copy_(model)
    return out.sub_(_f32(base))


def kth_largest_magnitude(x: torch.Tensor, k: int) -> float:
    """The k-th largest |x| (1-based); ``k >= numel`` gives the smallest magnitude."""
    flat = x.detach().reshape(-1).abs().float()
    k = max(1, min(int(k), flat.numel()))
    # kthvalue counts from the smallest: the k-th largest is the (n-k+1)-th smallest.
    return float(torch.kthvalue(flat, flat.numel() - k + 1).values)


def keep_count(density: float, n: int) -> int:
    """How many entries TIES keeps: ``max(1, floor(density * n))`` (the PEFT rule)."""
    return max(1, min(n, int(density * n)))


def trim_magnitude(delta: torch.Tensor, threshold: float) -> torch.Tensor:
    """Zero, in place, the entries with ``|delta| < threshold`` (TIES's trim; ties at it are kept).

    One float pass, :func:`torch.hardshrink` (it keeps |x| > lambd, NaN included, and sets
    the rest to +0) with lambd the value just below the threshold in ``delta``'s dtype
    (:func:`shrink_lambda`), so > becomes >=: the entries and bits of
    ``masked_fill_(|delta| < threshold, 0)`` at a fraction of its cost (boolean tensors cost
    3-15x a float pass on CPU).
    """
    lam = shrink_lambda(float(threshold), delta.dtype)
    return delta if lam is None else torch.hardshrink(delta, lam, out=delta)


@functools.lru_cache(maxsize=64)
def shrink_lambda(threshold: float, dtype: torch.dtype = torch.float32) -> float | None:
    """The ``lambd`` of :func:`torch.hardshrink` that keeps exactly |x| >= ``threshold``
    for x of ``dtype``: the value of that dtype just below the threshold (the threshold
    rounded to it first, as a comparison with a Python scalar does). None: nothing is
    trimmed (threshold <= 0 or NaN)."""
    if not threshold > 0.0:
        return None
    t = torch.tensor([threshold], dtype=dtype)
    return float(torch.nextafter(t, torch.zeros_like(t)))


def trim_top_density(delta: torch.Tensor, density: float) -> torch.Tensor:
    """Keep the top ``density`` fraction of entries of one tensor by magnitude (in place)."""
    if density >= 1.0:
        return delta
    return trim_magnitude(delta, kth_largest_magnitude(delta, keep_count(density, delta.numel())))


def dare(delta: torch.Tensor, p: float, generator: torch.Generator) -> torch.Tensor:
    """DARE: drop each entry with probability p, rescale survivors by 1/(1-p).

    Unbiased: E[dare(delta)] = delta. The mask comes from ``generator`` so that a seed
    reproduces it exactly.
    """
    if p <= 0.0:
        return delta
    keep = torch.rand(delta.shape, generator=generator, dtype=torch.float32) >= p
    return drop_rescale(delta, keep, p)


Rescale = Literal["inverse_keep", "l1", "none"]


def drop_rescale(delta: torch.Tensor, keep: torch.Tensor, p: float | torch.Tensor,
                 rescale: Rescale = "inverse_keep") -> torch.Tensor:
    """Zero the entries outside ``keep``, then rescale the kept ones.

    * ``inverse_keep``: tau_e / (1 - p_e) (DARE, Yu et al. 2024 Eq. 2; DELLA's per-entry
      p_e, Deep et al. 2024): unbiased, E[out] = tau;
    * ``l1``: (||tau||_1 / ||m * tau||_1) m * tau, mergekit's ``rescale: true``
      (``sparsify.rescaled_masked_tensor`` with the L1 norm): the kept entries keep the
      task vector's L1 norm; left unscaled where either norm is below 1e-7, as mergekit does;
    * ``none``: m * tau (mergekit's ``rescale: false``).
    """
    zero = torch.zeros((), dtype=delta.dtype)
    if rescale == "inverse_keep":
        factor = (1.0 / (1.0 - p)) if isinstance(p, float) else 1.0 / (1.0 - p)
        return torch.where(keep, delta * factor, zero)
    masked = torch.where(keep, delta, zero)
    if rescale == "l1":
        return rescale_l1(delta, masked)
    return masked


def rescale_l1(delta: torch.Tensor, masked: torch.Tensor, eps: float = 1e-7) -> torch.Tensor:
    """``masked`` scaled to ``delta``'s L1 norm (in place), unless either norm is below ``eps``."""
    before, after = float(delta.abs().sum()), float(masked.abs().sum())
    if before < eps or after < eps:
        return masked
    return masked.mul_(before / after)


SignRule = Literal["unweighted", "weighted"]
SIGN_RULES: tuple[str, ...] = get_args(SignRule)


def elect_sign(deltas: Sequence[torch.Tensor], weights: Sequence[float] | None = None,
               rule: str = "unweighted", out: torch.Tensor | None = None) -> torch.Tensor:
    """TIES sign election (Yadav et al. 2023, Sec. 3 step 2): +1 where the total mass is
    >= 0, -1 where it is < 0 (NaN where it is NaN, so a poisoned entry stays visible).

    The one definition of the rule: the Euclidean pipeline (:func:`mmgrid.merge.pipeline.fuse`,
    run by the reference path and, into reused chunk buffers, by the fast file pass) and
    LoRA merging (:mod:`mmgrid.merge.lora.merging`) call it.

    Args:
        deltas: the (trimmed) task vectors delta_i, one shape.
        weights: w_i; read only under ``rule="weighted"`` (None there: all 1).
        rule: ``unweighted``: the mass is sum_i delta_i (the TIES paper); ``weighted``: sum_i
            w_i delta_i (mergekit's rule: its ``get_mask`` sees the weighted task vectors).
        out: a buffer of the deltas' shape and dtype to write into (the fast pass's chunk
            buffers); a new tensor when None.

    The +-1 is built from float operations, sign(sign(mass) + 0.5) (0 -> +1), rather than a
    boolean mask: boolean tensors cost 3-15x a float pass on CPU.
    """
    if rule not in SIGN_RULES:
        raise ValueError(f"sign rule {rule!r}: use one of {SIGN_RULES}")
    mass = torch.empty_like(deltas[0]) if out is None else out
    if rule == "weighted" and weights is not None:
        torch.mul(deltas[0], float(weights[0]), out=mass)
        for d, w in zip(deltas[1:], weights[1:]):
            mass.add_(d, alpha=float(w))
    else:
        mass.copy_(deltas[0])
        for d in deltas[1:]:
            mass.add_(d)
    torch.sign(mass, out=mass)  # -1, 0, +1
    mass.add_(0.5)
    return torch.sign(mass, out=mass)  # 0 -> +1


def disjoint_mean(deltas: Sequence[torch.Tensor], sign: torch.Tensor, weights: Sequence[float] | None = None,
                  out: torch.Tensor | None = None, den: torch.Tensor | None = None,
                  tmp: torch.Tensor | None = None) -> torch.Tensor:
    """TIES disjoint merge: mean over the inputs whose (nonzero) entry agrees with ``sign``.

    With weights the rule is sum_i w_i d_i [agree] / sum_i w_i [agree] (mergekit's rule);
    with equal weights it equals PEFT's division by the count of agreeing entries.
    Entries where no input agrees are 0. The deltas are not modified.

    Args:
        deltas: the (trimmed) float32 task vectors.
        sign: the elected sign (:func:`elect_sign`).
        weights: w_i (all 1 when None).
        out, den, tmp: float32 buffers of the deltas' shape to work in (the fast pass's
            chunk buffers; the result is ``out``); new tensors when None.

    The indicator [d_i sign > 0] is sign(relu(d_i sign)) (1 or 0), a float pass instead
    of a boolean mask; where no input agrees the denominator becomes 1 (den + 1 - |sign(den)|,
    or, with all weights positive, max(den, min w_i): den is then 0 or at least min w_i).
    """
    weights = [1.0] * len(deltas) if weights is None else [float(w) for w in weights]
    num = torch.empty_like(deltas[0]) if out is None else out
    den = torch.empty_like(deltas[0]) if den is None else den
    num.zero_()
    den.zero_()
    for d, w in zip(deltas, weights):
        signed = torch.mul(d, sign, out=tmp)  # > 0 exactly where d is nonzero and agrees
        signed.clamp_min_(0.0)  # relu keeps |d| there
        num.add_(signed, alpha=w)
        torch.sign(signed, out=signed)  # [agree]
        den.add_(signed, alpha=w)
    if min(weights) > 0:
        den.clamp_min_(min(weights))
    else:  # den + [den == 0]
        one = torch.sign(den, out=tmp)
        one.abs_().neg_().add_(1.0)
        den.add_(one)
    # where no input agrees num is 0, so the denominator 1 there gives 0
    return num.mul_(sign).div_(den)


def sign_masked(deltas: Sequence[torch.Tensor], sign: torch.Tensor, inplace: bool = False,
                tmp: torch.Tensor | None = None, mask: torch.Tensor | None = None) -> list[torch.Tensor]:
    """Each delta with the entries that disagree with the elected sign (d sign < 0) zeroed.

    Args:
        inplace: zero them in the deltas themselves (which are returned); else new tensors.
        tmp, mask: a float32 and a bool buffer of the deltas' shape to work in (the fast
            pass's chunk buffers); new tensors when None.
    """
    out = []
    for d in deltas:
        disagree = torch.lt(torch.mul(d, sign, out=tmp), 0, out=mask)
        out.append(d.masked_fill_(disagree, 0.0) if inplace else d.masked_fill(disagree, 0.0))
    return out


# dtypes whose lerp torch computes in float32 (bf16/fp16 upcast, float32 as is)
LERP_IN_F32 = (torch.bfloat16, torch.float16, torch.float32)


def interpolate(t1: torch.Tensor, t2: torch.Tensor, lam: float) -> torch.Tensor:
    """theta_t1 + lam (theta_t2 - theta_t1) (MMGRid Eq. 9-10) in float32; lam > 1
    extrapolates.

    The one definition of a temporal point (every path of ``temporal`` and of the
    temporal sweep gives its bits): :func:`torch.lerp` in float32, which for
    |lam| >= 0.5 evaluates t2 - (t2 - t1)(1 - lam), equal in exact arithmetic, so that
    lam = 1 gives t2 exactly.
    """
    return torch.lerp(t1.float(), t2.float(), float(lam))


def lerp_into(a: torch.Tensor, b: torch.Tensor, s: float, out: torch.Tensor) -> torch.Tensor:
    """``out`` = :func:`interpolate` (a, b, s) rounded once to ``out``'s dtype, in one
    fused pass where a, b and out share a bf16/fp16/fp32 dtype.

    :func:`torch.lerp` of bf16/fp16 tensors computes each entry in float32 and rounds it
    once, so the fused pass gives the same bits as the float32 lerp then cast (tested
    for every chunking), in one pass over the chunk where a float32 lerp and a cast take five.
    Other dtype mixes (and float64) go through :func:`interpolate`.
    """
    if a.dtype == b.dtype == out.dtype and a.dtype in LERP_IN_F32:
        return torch.lerp(a, b, float(s), out=out)
    return out.copy_(interpolate(a, b, s))


def _magnitude_bits(x: torch.Tensor, scratch: torch.Tensor | None) -> torch.Tensor:
    """The float32 bit patterns of |x| (int32), in ``scratch`` (an int32 buffer of at least
    x's size, reused across chunks) when given."""
    flat = x.detach().float().reshape(-1)
    if scratch is None:
        return flat.abs().view(torch.int32)
    bits = scratch[: flat.numel()]
    torch.abs(flat, out=bits.view(torch.float32))
    return bits


def magnitude_histogram(x: torch.Tensor, scratch: torch.Tensor | None = None) -> torch.Tensor:
    """Counts of |x| over the first of :data:`N_MAG_BINS` bins of the float32 bit pattern's top bits.

    Summed over tensors, these counts locate the whole-model k-th largest magnitude in
    one streaming pass without holding the model (:func:`locate_threshold`). Bins at or
    above :data:`NONFINITE_BIN` count Inf and NaN. ``scratch``: see :func:`_magnitude_bits`.
    """
    bits = _magnitude_bits(x, scratch)
    # no minlength: the counts end at the largest bin present (add into a prefix)
    return torch.bincount(bits >> MAG_SHIFT if scratch is None else bits.bitwise_right_shift_(MAG_SHIFT))


def add_magnitude_histogram(hist: torch.Tensor, x: torch.Tensor, what: str, scratch: torch.Tensor | None = None) -> None:
    """Add x's :func:`magnitude_histogram` into ``hist`` (:data:`N_MAG_BINS` counts), the
    streaming first pass of a top-X% threshold.

    Raises:
        NonFiniteError: x holds NaN or Inf (their bit patterns sort above every finite one);
            ``what`` names it (e.g. "tensor 'w': input 0 or the base").
    """
    part = magnitude_histogram(x, scratch)
    if part.numel() > NONFINITE_BIN:
        raise NonFiniteError(f"{what} holds NaN or Inf; fix that checkpoint")
    hist[: part.numel()] += part


def _from_top(hist: torch.Tensor, k: int) -> tuple[int, torch.Tensor]:
    """(pos, desc): ``desc`` the counts of ``hist`` cumulated from its last bin down, ``pos`` the
    first position (counted from the last bin) where they reach ``k``."""
    desc = torch.flip(hist, [0]).cumsum(0)
    return int(torch.searchsorted(desc, torch.tensor(k, dtype=desc.dtype))), desc


def _as_float32(bits: int) -> float:
    """The float32 whose bit pattern is ``bits``."""
    return float(torch.tensor([bits], dtype=torch.int32).view(torch.float32))


def threshold_bin(hist: torch.Tensor, k: int) -> tuple[int, int]:
    """(b, above): the bin of a :func:`magnitude_histogram` (of :data:`N_MAG_BINS` counts)
    holding the k-th largest magnitude, and how many entries lie in the bins above it."""
    pos, desc = _from_top(hist, k)
    return hist.numel() - 1 - pos, int(desc[pos - 1]) if pos > 0 else 0


def sub_bin_histogram(x: torch.Tensor, b: int, scratch: torch.Tensor | None = None) -> torch.Tensor:
    """Counts of the low :data:`MAG_SHIFT` bits of |x|'s float32 bit pattern over the entries
    in bin ``b`` of :func:`magnitude_histogram` (2^MAG_SHIFT counts): with the bin, the
    bit pattern, i.e. the value, of each of them. ``scratch``: see :func:`_magnitude_bits`."""
    bits = _magnitude_bits(x, scratch)
    return torch.bincount(bits[(bits >> MAG_SHIFT) == b] & ((1 << MAG_SHIFT) - 1), minlength=1 << MAG_SHIFT)


def bin_value(b: int, sub_hist: torch.Tensor, k: int) -> float:
    """The k-th largest magnitude inside bin ``b`` (1-based) from its :func:`sub_bin_histogram`:
    with ``k`` = (k-th overall) - (entries above the bin), the exact k-th largest magnitude, the
    value :func:`kth_largest_magnitude` gives, from two streaming passes (two histograms)."""
    pos, _ = _from_top(sub_hist, k)
    return _as_float32((b << MAG_SHIFT) | ((1 << MAG_SHIFT) - 1 - pos))


def locate_threshold(hist: torch.Tensor, k: int) -> float:
    """A magnitude threshold keeping the k largest entries, from a histogram.

    Returns the lower edge of the bin holding the k-th largest magnitude: entries with
    |x| >= it are kept, i.e. the k largest plus the other entries of that bin (those
    within a relative 2^-11 of the k-th largest).
    """
    pos, _ = _from_top(hist, k)
    return _as_float32((N_MAG_BINS - 1 - pos) << MAG_SHIFT)
