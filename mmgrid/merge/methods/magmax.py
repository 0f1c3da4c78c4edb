"""MagMax (Marczak, Twardowski, Trzciński & Cygert, "MagMax: Leveraging Model Merging for
Seamless Continual Learning", ECCV 2024, arXiv 2407.06322, Sec. 3).

The checkpoints theta_1, ..., theta_T come from *sequential* fine-tuning (theta_t starts
from theta_{t-1}; the grid's periods are trained so), tau_t = theta_t - theta_0 against the
pretrained base. MagMax keeps, per parameter, the task-vector entry of largest magnitude:

    tau_MagMax[j] = tau_{t*(j)}[j],   t*(j) = argmax_t |tau_t[j]|
    theta* = theta_0 + lambda tau_MagMax

``scale`` is lambda (the paper tunes it; its released 8-task script and FusionBench use
0.5; mmgrid's default 1.0 keeps the selected entries as they are). Ties in magnitude go
to the later checkpoint (the released ``merge_max_abs`` and FusionBench compare with >=),
so the result does not depend on the order of the sequence except at exact ties.

Bound, per tensor: |out_j| = |lambda| max_t |tau_tj|, so ||theta* - theta_0|| <=
|lambda| sqrt(T) max_t ||tau_t|| (sum_j max_t tau_tj^2 <= sum_t ||tau_t||^2; c = |lambda| sqrt(T)),
and >= |lambda| max_t ||tau_t|| (every t's entries are dominated). Elementwise: row chunks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from mmgrid.merge.errors import MergeParamError
from mmgrid.merge.methods.base import Method, TensorView
from mmgrid.merge.methods.registry import register


@dataclass
class MagMaxParams:
    """Parameters of ``magmax``.

    Attributes:
        scale: lambda, a factor on the selected task vector (1.0; the paper's code 0.5).
    """

    scale: float = 1.0

    def __post_init__(self) -> None:
        if not math.isfinite(self.scale):
            raise MergeParamError(f"parameter scale={self.scale} must be finite (MagMax lambda)")


@register
class MagMax(Method):
    name = "magmax"
    pretty = "MagMax (continual, max-magnitude selection)"
    paper = "Marczak et al. 2024 (MagMax, ECCV, arXiv 2407.06322) Sec. 3"
    Params = MagMaxParams
    symmetric = False  # order-robust except at exact magnitude ties (the later input wins)
    elementwise = True

    @staticmethod
    def update_bound(p, n: int, numel: int) -> float | None:  # c of the docstring's bound
        return abs(p.scale) * n ** 0.5

    def merge_tensor(self, view: TensorView) -> torch.Tensor:
        ds = view.deltas()
        best = ds[0]
        for d in ds[1:]:
            best = torch.where(d.abs() >= best.abs(), d, best)
        if self.params.scale != 1.0:
            best = best * self.params.scale
        return best.add_(view.required_base)
