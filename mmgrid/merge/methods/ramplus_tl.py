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
here (mmgrid's ``alpha`` is MMGRid Eq. 7's input weighting).

Streaming: rho_i counts over the whole tensor, so a first pass over the inputs in chunks counts
shared_i and unique_i per tensor (integers: the same for any chunking); the merge pass is then
entrywise (a :class:`Kernel` of its own function), merged in chunks of the files by the fast pass
(row chunks on the reference path; never a float32 copy of a whole tensor; the same bits as
merging whole tensors).

Bound, per tensor: |out_e| <= (1 + r rho_max) max_i |tau_ie|, so ||theta* - theta_0|| <=
(1 + r rho_max) sqrt(n) max_i ||tau_i|| (c = (1 + r rho_max) sqrt(n), mass 1).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from mmgrid.merge.errors import MergeParamError
from mmgrid.merge.methods.base import Method, TensorView, ViewStream
from mmgrid.merge.methods.registry import register
from mmgrid.merge.pipeline import Kernel


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

    def __init__(self, params) -> None:
        super().__init__(params)
        self._lams: dict[str, list[float]] = {}

    @property
    def elementwise(self) -> bool:
        return True  # after prepare: lambda_i of each tensor is known

    def _masks(self, ds: list[torch.Tensor]) -> tuple[list[torch.Tensor], torch.Tensor]:
        on = [d.abs() > self.params.epsilon for d in ds]
        count = torch.zeros(ds[0].shape, dtype=torch.int32)
        for m in on:
            count += m
        return on, count

    @staticmethod
    def _counts(on: list[torch.Tensor], count: torch.Tensor) -> list[tuple[int, int]]:
        """(shared_i, unique_i) of each input over these entries."""
        unique, overlap = count == 1, count > 1
        return [(int((m & overlap).sum()), int((m & unique).sum())) for m in on]

    def _lambdas(self, counts: list[tuple[int, int]]) -> list[float]:
        p = self.params
        out = []
        for shared_i, unique_i in counts:
            den = max(float(unique_i), p.epsilon)
            rho = shared_i / den if den > 0.0 else (math.inf if shared_i else 0.0)
            out.append(1.0 + p.r * min(max(rho, 0.0), p.rho_max))
        return out

    def prepare(self, stream: ViewStream) -> None:
        acc: dict[str, list[list[int]]] = {}
        for view in stream():  # chunks of each tensor: integer counts add exactly
            got = self._counts(*self._masks(view.deltas()))
            tot = acc.setdefault(view.name, [[0, 0] for _ in got])
            for t, (sh, un) in zip(tot, got):
                t[0] += sh
                t[1] += un
        self._lams = {name: self._lambdas([(sh, un) for sh, un in c]) for name, c in acc.items()}

    def kernel(self, n: int) -> Kernel:
        return Kernel(fn=self.entries)

    def entries(self, name: str, parts: Sequence[torch.Tensor]) -> torch.Tensor:
        """The merged entries of one tensor or chunk (``parts``: theta_0, then the inputs, as
        stored) with the first pass's lambda_i of tensor ``name``: both routes call it."""
        lams = self._lams.get(name)
        if lams is None:
            raise KeyError(f"no lambda_i for tensor {name!r}: the method's first pass did not see it")
        return self._merge([t.to(torch.float32, copy=True).sub_(parts[0]) for t in parts[1:]], parts[0], lams)

    def _merge(self, ds: list[torch.Tensor], base: torch.Tensor, lams: list[float] | None) -> torch.Tensor:
        on, count = self._masks(ds)
        if lams is None:  # added vocabulary rows (a view of their own), or no first pass: their own counts
            lams = self._lambdas(self._counts(on, count))
        unique, overlap = count == 1, count > 1
        share = torch.where(overlap, 1.0 / count.clamp(min=1).float(), 0.0)
        del count
        out = torch.zeros_like(ds[0])
        uf = unique.float()
        for d, m, lam in zip(ds, on, lams):
            out += torch.where(m, d, 0.0) * (uf * lam + share)
        return out.add_(base)

    def merge_tensor(self, view: TensorView) -> torch.Tensor:
        return self._merge(view.deltas(), view.raw_base, self._lams.get(view.name))
