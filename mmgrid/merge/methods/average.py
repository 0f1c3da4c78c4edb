"""Weight averaging (MMGRid Sec. 2, WA; Wortsman et al., 2022, "Model soups").

theta* = sum_i w_i theta_i / sum_i w_i. Needs no base.

Bound, for any reference theta_0 and per tensor: ||theta* - theta_0|| <= max_i ||theta_i -
theta_0|| (c = 1 on normalized non-negative weights: a convex combination).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mmgrid.merge import ops
from mmgrid.merge.errors import MergeParamError
from mmgrid.merge.methods.base import Method, TensorView
from mmgrid.merge.methods.registry import register
from mmgrid.merge.methods.weights import Weights
from mmgrid.merge.pipeline import Kernel


@dataclass
class AverageParams(Weights):
    """Parameters of ``average``: :class:`Weights`, non-negative with a positive sum
    (uniform if omitted; ``alpha`` in [0, 1])."""

    def __post_init__(self) -> None:
        if self.weights is not None and (any(w < 0 for w in self.weights) or sum(self.weights) <= 0):
            raise MergeParamError(f"average weights {self.weights} must be >= 0 with a positive sum")
        if self.alpha is not None and not 0.0 <= self.alpha <= 1.0:
            raise MergeParamError(f"average alpha={self.alpha} is outside [0, 1]; it weighs two inputs (alpha, 1 - alpha)")


@register
class Average(Method):
    name = "average"
    pretty = "Weight averaging"
    paper = "MMGRid Sec. 2; Wortsman et al. 2022 (model soups)"
    Params = AverageParams
    needs_base = False

    @staticmethod
    def update_bound(p, n: int, numel: int) -> float | None:  # c of the docstring's bound
        return 1.0

    def check_inputs(self, n: int) -> None:
        super().check_inputs(n)
        self._weights(n)  # raises on weights that do not fit n inputs

    elementwise = True

    def kernel(self, n: int) -> Kernel:
        w = self._weights(n) or [1.0] * n
        return Kernel(coefs=(None, [x / sum(w) for x in w]))  # sum_i (w_i / sum_j w_j) theta_i

    def _weights(self, n: int) -> list[float] | None:
        p = self.params
        return None if p.weights is None and p.alpha is None else list(p.per_input(n))

    def merge_tensor(self, view: TensorView) -> torch.Tensor:
        return ops.average(view.models, self._weights(len(view.models)))
