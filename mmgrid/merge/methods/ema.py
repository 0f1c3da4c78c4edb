"""Exponential moving average of checkpoints (TIME: "How to Merge Your Multimodal Models Over
Time", Dziadzio et al., CVPR 2025, arXiv 2412.06712).

Inputs M_1..M_t in time order (t >= 1). Convention: E_1 = M_1, E_i = (1 - beta) E_{i-1} +
beta M_i, so beta is the weight of the NEWEST checkpoint at each step (beta = 1 gives M_t,
beta = 0 gives M_1). Unrolled: theta* = E_t = (1 - beta)^(t-1) M_1 + sum_{i=2..t} beta
(1 - beta)^(t-i) M_i, computed in one pass over the inputs. Needs no base. Default beta = 0.5
(ours).

Bound, per tensor and around any theta_0: a convex combination (beta in [0, 1]),
||theta* - theta_0|| <= c max_i ||M_i - theta_0|| with c = 1.
"""

from __future__ import annotations

from dataclasses import dataclass

from mmgrid.merge.methods.affine import AffineMethod, check_finite
from mmgrid.merge.methods.base import check_range
from mmgrid.merge.methods.registry import register


@dataclass
class EmaParams:
    """Parameters of ``ema``.

    Attributes:
        beta: the newest checkpoint's weight at each step, in [0, 1] (0.5).
    """

    beta: float = 0.5

    def __post_init__(self) -> None:
        check_finite("ema", "beta", self.beta, "e.g. --set beta=0.5")
        check_range("ema beta", self.beta, 0.0, 1.0, False, False,
                    "beta is the newest checkpoint's weight at each step (E_i = (1 - beta) E_{i-1} + beta M_i)")


@register
class Ema(AffineMethod):
    name = "ema"
    pretty = "Exponential moving average of checkpoints"
    paper = "TIME (Dziadzio et al., CVPR 2025, arXiv 2412.06712)"
    Params = EmaParams
    min_inputs = 1

    @staticmethod
    def update_bound(p, n: int, numel: int) -> float | None:  # c of the docstring's bound
        return 1.0

    def coefficients(self, n: int) -> list[float]:
        b = float(self.params.beta)
        return [(1.0 - b) ** (n - 1)] + [b * (1.0 - b) ** (n - 1 - i) for i in range(1, n)]
