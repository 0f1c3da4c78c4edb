"""RAM+ tensor-local (mergekit's ``ramplus_tl``; Reinforced Agent Merging, arXiv
2601.13572): RAM (:mod:`mmgrid.merge.methods.ram`) with each input's unique changes
amplified by how much of its change the other inputs share.

Per tensor, with tau_i = theta_i - theta_0, m_ie = [|tau_ie| > epsilon], c_e = sum_i m_ie:

    shared_i = #{e : m_ie, c_e > 1},   unique_i = #{e : m_ie, c_e = 1},
    rho_i = shared_i / max(unique_i, epsilon),
    lambda_i = 1 + r * clamp(rho_i, 0, rho_max),
    theta*_e = theta_0e + sum_i m_ie tau_ie ( [c_e = 1] lambda_i + [c_e > 1] / c_e ),

(rho_i = inf where unique_i = epsilon = 0 < shared_i, and 0 for an input that changes nothing;
mergekit gives NaN there at epsilon = 0), so an entry changed by one input keeps that change, scaled by lambda_i >= 1, and an entry
changed by several gets their mean (RAM). mergekit's parameter ``alpha`` is ``rho_max``
here (mmgrid's ``alpha`` is MMGRid Eq. 7's input weighting). Not elementwise: rho_i counts
over the whole tensor.

Bound, per tensor: |out_e| <= (1 + r rho_max) max_i |tau_ie|, so ||theta* - theta_0|| <=
(1 + r rho_max) sqrt(n) max_i ||tau_i|| (c = (1 + r rho_max) sqrt(n), mass 1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from mmgrid.merge.errors import MergeParamError
from mmgrid.merge.methods.base import Method, TensorView
from mmgrid.merge.methods.registry import register


@dataclass
class RamPlusParams:
    """Parameters of ``ramplus_tl`` (mergekit's names and defaults, ``alpha`` -> ``rho_max``).

    Attributes:
        r: the amplification rate of unique changes, >= 0 (0.1).
        rho_max: the cap on rho_i (mergekit's alpha), >= 0 (0.2).
        epsilon: |tau_ie| above it counts as a change, >= 0 (1e-5).
    """

    r: float = 0.1
    rho_max: float = 0.2
    epsilon: float = 1e-5

    def __post_init__(self) -> None:
        for name in ("r", "rho_max", "epsilon"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0.0):
                raise MergeParamError(f"parameter {name}={v} must be a finite number >= 0 (ramplus_tl)")


@register
class RamPlusTl(Method):
    name = "ramplus_tl"
    pretty = "RAM+ (tensor-local)"
    paper = "arXiv 2601.13572 (Reinforced Agent Merging); mergekit ramplus_tl"
    Params = RamPlusParams

    def merge_tensor(self, view: TensorView) -> torch.Tensor:
        p = self.params
        ds = view.deltas()
        on = [d.abs() > p.epsilon for d in ds]
        count = torch.zeros(ds[0].shape, dtype=torch.int32)
        for m in on:
            count += m
        unique, overlap = count == 1, count > 1
        out = torch.zeros_like(ds[0])
        share = torch.where(overlap, 1.0 / count.clamp(min=1).float(), 0.0)
        for d, m in zip(ds, on):
            shared_i = int((m & overlap).sum())
            unique_i = int((m & unique).sum())
            den = max(float(unique_i), p.epsilon)
            rho = shared_i / den if den > 0.0 else (math.inf if shared_i else 0.0)
            lam = 1.0 + p.r * min(max(rho, 0.0), p.rho_max)
            out += torch.where(m, d, 0.0) * (unique.float() * lam + share)
        return out.add_(view.raw_base)
