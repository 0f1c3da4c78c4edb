"""Passthrough: one model's tensors as they are, optionally scaled (mergekit's
``passthrough``).

theta* = scale theta_1 (scale = 1: a bit-exact copy, in the input's dtype). No base.
mergekit uses passthrough mostly with ``slices:`` / ``layer_range`` to stack layers of
several models into a new, deeper model ("frankenmerges"); that changes the
architecture and is not supported here: mmgrid's passthrough copies one whole model
(one input; more raise a MergeParamError saying so). mergekit's per-tensor ``scale`` is
one scale for every tensor here.

Bound, per tensor, around theta_0 = 0: ||theta*|| = |scale| ||theta_1||: c = |scale|, mass 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from mmgrid.merge.errors import MergeParamError
from mmgrid.merge.methods.base import Method, TensorView
from mmgrid.merge.methods.registry import register
from mmgrid.merge.pipeline import Kernel


@dataclass
class PassthroughParams:
    """Parameters of ``passthrough``.

    Attributes:
        scale: a factor on every tensor (1.0: an exact copy).
    """

    scale: float = 1.0

    def __post_init__(self) -> None:
        if not math.isfinite(self.scale):
            raise MergeParamError(f"passthrough scale={self.scale} must be finite")


@register
class Passthrough(Method):
    name = "passthrough"
    pretty = "Passthrough (copy of one model)"
    paper = "mergekit passthrough"
    Params = PassthroughParams
    bound_origin = "origin"
    needs_base = False
    min_inputs = 1
    max_inputs = 1

    elementwise = True

    @staticmethod
    def update_bound(p, n: int, numel: int) -> float | None:  # c of the docstring's bound
        return abs(p.scale)

    def check_inputs(self, n: int) -> None:
        if n != 1:
            raise MergeParamError(f"method 'passthrough' copies exactly 1 input model, got {n}; mergekit's layer "
                                  "slicing (slices: / layer_range, stacking layers of several models) is not supported")

    def kernel(self, n: int) -> Kernel:
        return Kernel(coefs=(None, [float(self.params.scale)]))

    def merge_tensor(self, view: TensorView) -> torch.Tensor:
        out = view.models[0]
        return out.clone() if self.params.scale == 1.0 else out * self.params.scale
