"""NearSwap: move the base toward a secondary model only where the two are already close
(mergekit's ``nearswap``; alchemonaut, QuartetAnemoi-70B-t0.0001 model card, 2024).

Inputs: [theta_1] (the secondary model) and base theta_0 (the primary: mergekit's
``base_model``). Entrywise, with d = |theta_1 - theta_0|:

    w = clamp(t / max(d, 1e-6), 0, 1),   theta* = w theta_1 + (1 - w) theta_0,

so entries within t of each other are swapped to the secondary's value (w = 1) and the
others move by t toward it (w d = t). t = 0 gives the base; t >= max d gives theta_1.

Bound, per tensor: theta* - theta_0 = w (theta_1 - theta_0) with w in [0, 1] entrywise:
||theta* - theta_0|| <= ||tau_1||, c = 1, mass 1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from mmgrid.merge.errors import MergeParamError
from mmgrid.merge.methods.base import Method, TensorView
from mmgrid.merge.methods.registry import register
from mmgrid.merge.pipeline import Kernel, Work

DIFF_FLOOR = 1e-6  # mergekit's floor of |theta_1 - theta_0|


@dataclass
class NearSwapParams:
    """Parameters of ``nearswap``.

    Attributes:
        t: the distance below which an entry is swapped (>= 0; mergekit requires it,
            mmgrid's default is the 1e-4 of the method's reference model).
    """

    t: float = 1e-4

    def __post_init__(self) -> None:
        if not (math.isfinite(self.t) and self.t >= 0):
            raise MergeParamError(f"nearswap t={self.t} must be a finite number >= 0 (0 gives the base)")


@register
class NearSwap(Method):
    name = "nearswap"
    pretty = "NearSwap"
    paper = "mergekit nearswap (alchemonaut 2024)"
    Params = NearSwapParams
    symmetric = False  # one input; primary (base) and secondary have different roles
    min_inputs = 1
    max_inputs = 1

    elementwise = True

    @staticmethod
    def update_bound(p, n: int, numel: int) -> float | None:  # c of the docstring's bound
        return 1.0

    def kernel(self, n: int) -> Kernel:
        return Kernel(fn=self.entries)

    def entries(self, name: str, parts: Sequence[torch.Tensor], work: Work | None = None) -> torch.Tensor:
        """The merged entries (``parts``: theta_0, theta_1 as stored), on either route, in
        ``work``'s buffers: w = clamp(t * (1 / max(|a - b|, 1e-6)), 0, 1) (how ``t / x``
        evaluates), w b + (1 - w) a."""
        w = work if work is not None else Work.fresh(parts[0].shape, len(parts))
        a = w.base32(parts[0])
        b = w.deltas[0].copy_(parts[1])
        wt = torch.sub(a, b, out=w.tmp).abs_().clamp_(min=DIFF_FLOOR)
        torch.reciprocal(wt, out=wt).mul_(self.params.t).clamp_(0.0, 1.0)
        out = torch.mul(wt, b, out=w.acc)
        return out.add_(torch.neg(wt, out=w.den).add_(1.0).mul_(a))

    def merge_tensor(self, view: TensorView) -> torch.Tensor:
        assert view.raw_base is not None
        return self.entries(view.name, [view.raw_base, view.raw[0]])
