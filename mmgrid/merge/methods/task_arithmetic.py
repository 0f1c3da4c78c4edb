"""Task arithmetic (MMGRid Eq. 2-3; Ilharco et al., 2023).

theta* = theta_0 + scale * sum_i w_i (theta_i - theta_0) (w_i = lambda_i of Eq. 3). With
``alpha`` and two inputs the weights are (alpha, 1 - alpha): MMGRid Eq. 7 without the TRIM.

Bound, per tensor: ||theta* - theta_0|| <= c sum_i |w_i| max_i ||tau_i|| with
c = |scale| (the triangle inequality on the weighted sum).
"""

from __future__ import annotations

from dataclasses import dataclass

from mmgrid.merge import pipeline as pl
from mmgrid.merge.methods import bounds as bd
from mmgrid.merge.methods.pipeline_method import PipelineMethod
from mmgrid.merge.methods.registry import register
from mmgrid.merge.methods.weights import Weights


@dataclass
class TaskArithmeticParams(Weights):
    """Parameters of ``task_arithmetic``: :class:`Weights` (default 1.0 each), and

    Attributes:
        scale: a factor on the summed task vector.
    """

    scale: float = 1.0


@register
class TaskArithmetic(PipelineMethod):
    name = "task_arithmetic"
    pretty = "Task arithmetic"
    paper = "MMGRid Eq. 3; Ilharco et al. 2023"
    Params = TaskArithmeticParams


    @staticmethod
    def update_bound(p, n: int, numel: int) -> float | None:  # c of the docstring's bound
        return abs(p.scale) * bd.mass(p, n)

    def pipeline(self, n: int) -> pl.Pipeline:
        p = self.params
        return pl.Pipeline(weights=p.per_input(n), scale=p.scale)
