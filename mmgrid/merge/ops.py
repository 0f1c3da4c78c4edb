"""Pure tensor math of Euclidean merging (no I/O, no registry, no names).

Every function takes and returns float tensors and is the single implementation of
its step: the merge methods, the sweeps and the training regularizers (Orbit and
Soup-to-Go averaging) call these. Equations refer to MMGRid (paper 004) unless noted.

The pipeline these steps form (delta -> sparsify -> elect sign -> combine -> scale):

* delta: :func:`task_vector` (MMGRid Eq. 2);
* sparsify: :func:`trim_magnitude` (TIES top-X%), :func:`dare` (DARE);
* elect sign: :func:`elect_sign` (TIES: sign of the total mass);
* combine: :func:`weighted_sum` (Eq. 3), :func:`disjoint_mean` (TIES), :func:`average`;
* scale: a plain multiplication by the caller.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

# float32 magnitudes as int32 bit patterns are monotone in the value; the top 16 bits
# (sign bit always 0 for a magnitude) index 32768 histogram bins.
N_MAG_BINS = 1 << 15


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


def weighted_sum(tensors: Sequence[torch.Tensor], weights: Sequence[float]) -> torch.Tensor:
    """sum_i w_i x_i in float32 (task arithmetic's combine, MMGRid Eq. 3)."""
    out = tensors[0].float() * float(weights[0])
    for t, w in zip(tensors[1:], weights[1:]):
        out.add_(t.float(), alpha=float(w))
    return out


def task_vector(model: torch.Tensor, base: torch.Tensor) -> torch.Tensor:
    """tau = theta - theta_0 (MMGRid Eq. 2), float32."""
    return model.float() - base.float()


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
    """Zero the entries with ``|delta| < threshold`` (TIES's trim; ties at it are kept)."""
    return torch.where(delta.abs() >= threshold, delta, torch.zeros((), dtype=delta.dtype))


def trim_top_density(delta: torch.Tensor, density: float) -> torch.Tensor:
    """Keep the top ``density`` fraction of entries by magnitude of one tensor."""
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
    return torch.where(keep, delta * (1.0 / (1.0 - p)), torch.zeros((), dtype=delta.dtype))


def elect_sign(deltas: Sequence[torch.Tensor]) -> torch.Tensor:
    """TIES sign election: the sign of the total mass sum_i delta_i (+1 where it is 0)."""
    mass = deltas[0].clone()
    for d in deltas[1:]:
        mass.add_(d)
    return torch.where(mass >= 0, 1.0, -1.0).to(mass.dtype)


def disjoint_mean(
    deltas: Sequence[torch.Tensor], sign: torch.Tensor, weights: Sequence[float] | None = None
) -> torch.Tensor:
    """TIES disjoint merge: mean over the inputs whose (nonzero) entry agrees with ``sign``.

    With weights the rule is sum_i w_i d_i [agree] / sum_i w_i [agree] (mergekit's rule);
    with equal weights it equals PEFT's division by the count of agreeing entries.
    Entries where no input agrees are 0.
    """
    weights = [1.0] * len(deltas) if weights is None else list(weights)
    num = torch.zeros_like(deltas[0])
    den = torch.zeros_like(deltas[0])
    for d, w in zip(deltas, weights):
        agree = ((torch.sign(d) == sign) & (d != 0)).to(d.dtype)
        num.add_(d * agree, alpha=float(w))
        den.add_(agree, alpha=float(w))
    return torch.where(den != 0, num / den.clamp_min(1e-30), torch.zeros((), dtype=num.dtype))


def sign_masked(deltas: Sequence[torch.Tensor], sign: torch.Tensor) -> list[torch.Tensor]:
    """Each delta with the entries that disagree with the elected sign zeroed."""
    return [torch.where(torch.sign(d) == sign, d, torch.zeros((), dtype=d.dtype)) for d in deltas]


def interpolate(t1: torch.Tensor, t2: torch.Tensor, lam: float) -> torch.Tensor:
    """theta_t1 + lam (theta_t2 - theta_t1) (MMGRid Eq. 9-10); lam > 1 extrapolates."""
    t1f = t1.float()
    return t1f + float(lam) * (t2.float() - t1f)


def magnitude_histogram(x: torch.Tensor) -> torch.Tensor:
    """Counts of |x| over :data:`N_MAG_BINS` bins of the float32 bit pattern's top 16 bits.

    Summed over tensors, these counts locate the whole-model k-th largest magnitude
    in one streaming pass without holding the model (see :func:`locate_kth_bin`).
    """
    bits = x.detach().float().abs().reshape(-1).view(torch.int32) >> 16
    return torch.bincount(bits, minlength=N_MAG_BINS)


def locate_kth_bin(hist: torch.Tensor, k: int) -> tuple[int, int]:
    """The bin holding the k-th largest magnitude and that value's rank inside the bin.

    Returns:
        (bin index, rank r >= 1 counted from the bin's largest value).
    """
    desc = torch.flip(hist, [0]).cumsum(0)
    pos = int(torch.searchsorted(desc, torch.tensor(k, dtype=desc.dtype)))
    b = N_MAG_BINS - 1 - pos
    above = int(desc[pos - 1]) if pos > 0 else 0
    return b, k - above


def values_in_bin(x: torch.Tensor, b: int) -> torch.Tensor:
    """The magnitudes of x that fall into histogram bin b."""
    mag = x.detach().float().abs().reshape(-1)
    return mag[(mag.view(torch.int32) >> 16) == b]
