"""The update bounds of the merge methods, as numbers: each method's
:meth:`~mmgrid.merge.methods.base.Method.update_bound` returns the c of

    ||theta* - theta_0|| <= c max_i ||theta_i - theta_0||   (per tensor, Frobenius norms)

that its module docstring derives, and these helpers hold the factors several methods share
(the weight mass of a weighted sum, TIES's disjoint mean, a rescale of kept entries). theta_0
is the base, or the method's :attr:`~mmgrid.merge.methods.base.Method.bound_origin`.
``math.inf`` means no finite constant exists for those parameters (the docstring says why);
None, no per-tensor bound at all.
"""

from __future__ import annotations

import math
from typing import Any


def mass(p: Any, n: int, default: float = 1.0) -> float:
    """sum_i |w_i| of a :class:`~mmgrid.merge.methods.weights.Weights` parameter set."""
    return sum(abs(x) for x in p.per_input(n, default))


def rescale_factor(rescale: str, keep_min: float, numel: int) -> float:
    """How far a rescale of the kept entries lengthens a task vector: ``inverse_keep`` divides
    every kept entry by the keep probability (at least ``keep_min``); ``l1`` keeps the L1 norm,
    ||x||_2 <= ||x||_1 = ||tau||_1 <= sqrt(numel) ||tau||_2; ``none`` only zeroes entries."""
    if rescale == "l1":
        return math.sqrt(numel)
    if rescale == "none":
        return 1.0
    return 1.0 / keep_min


def fused(p: Any, n: int, combine: str, sum_default: float = 1.0) -> float:
    """The factor of a sign-elected combination (TIES's argument): ``sum`` only zeroes entries,
    sum_i |w_i|; ``disjoint_mean`` with non-negative weights makes each entry a weighted mean of
    agreeing entries, |out_e| <= max_i |tau_ie|, so sqrt(n) (sum_e max_i tau_ie^2 <=
    sum_i ||tau_i||^2); a negative weight can make the mean's denominator vanish: inf."""
    if combine == "sum":
        return mass(p, n, sum_default)
    return math.sqrt(n) if min(p.per_input(n)) >= 0 else math.inf
