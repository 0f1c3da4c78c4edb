"""Temporal merge (MMGRid Eq. 9-10): theta = theta_t1 + lambda (theta_t2 - theta_t1).

Inputs: [theta_t1, theta_t2] of one domain. tau_temp = theta_t2 - theta_t1 is the
temporal preference-shift vector (Eq. 9); lambda is any real number: 0 gives theta_t1,
1 gives theta_t2, above 1 extrapolates. A base, if given, is ignored (theta_t1 is it).
Every path computes :func:`mmgrid.merge.ops.interpolate` (``torch.lerp`` in float32,
one rounding to the output dtype), so a merge, a sweep point, an in-place evaluation and
a re-run recipe give the same bits. Bound, per tensor, on theta_0 = theta_t1:
||theta - theta_t1|| = |lambda| ||theta_t2 - theta_t1|| (c = 1 on the weight |lambda|). For many lambdas use
:class:`mmgrid.merge.interpolation.TemporalSweep`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from mmgrid.merge import ops
from mmgrid.merge.errors import MergeParamError
from mmgrid.merge.methods.base import Method, TensorView
from mmgrid.merge.methods.registry import register
from mmgrid.merge.pipeline import Kernel


@dataclass
class TemporalParams:
    """Parameters of ``temporal``.

    Attributes:
        lam: lambda_temp of Eq. 10 (``lambda=`` is accepted too); any finite real.
    """

    lam: float = 1.0

    def __post_init__(self) -> None:
        if not math.isfinite(self.lam):
            raise MergeParamError(f"temporal lambda must be finite, got {self.lam}")


@register
class Temporal(Method):
    name = "temporal"
    pretty = "Temporal preference-shift scaling"
    paper = "MMGRid Eq. 9-10"
    Params = TemporalParams
    bound_origin = "first_input"
    needs_base = False
    symmetric = False
    min_inputs = 2
    max_inputs = 2

    elementwise = True

    @staticmethod
    def update_bound(p, n: int, numel: int) -> float | None:  # c of the docstring's bound
        return abs(p.lam)

    def kernel(self, n: int) -> Kernel:
        return Kernel(lerp=float(self.params.lam))

    def merge_tensor(self, view: TensorView) -> torch.Tensor:
        return ops.interpolate(view.models[0], view.models[1], self.params.lam)
