"""Task arithmetic (MMGRid Eq. 2-3; Ilharco et al., 2023).

theta* = theta_0 + scale * sum_i lambda_i (theta_i - theta_0). With ``alpha`` and two
inputs the weights are (alpha, 1 - alpha): MMGRid Eq. 7 without the TRIM.

Bound, per tensor: ||theta* - theta_0|| <= c sum_i |lambda_i| max_i ||tau_i|| with
c = |scale| (the triangle inequality on the weighted sum).
"""

from __future__ import annotations

from dataclasses import dataclass

from mmgrid.merge import pipeline as pl
from mmgrid.merge.methods.base import input_weights
from mmgrid.merge.methods.pipeline_method import PipelineMethod
from mmgrid.merge.methods.registry import register


@dataclass
class TaskArithmeticParams:
    """Parameters of ``task_arithmetic``.

    Attributes:
        lambdas: one weight per input (lambda_n of Eq. 3); default 1.0 each.
        alpha: two inputs only: weights (alpha, 1 - alpha) (Eq. 7).
        scale: a factor on the summed task vector.
    """

    lambdas: list[float] | None = None
    alpha: float | None = None
    scale: float = 1.0


@register
class TaskArithmetic(PipelineMethod):
    name = "task_arithmetic"
    pretty = "Task arithmetic"
    paper = "MMGRid (paper 004) Eq. 3; Ilharco et al. 2023"
    Params = TaskArithmeticParams

    def pipeline(self, n: int) -> pl.Pipeline:
        p = self.params
        return pl.Pipeline(weights=input_weights(p.lambdas, p.alpha, n), scale=p.scale)
