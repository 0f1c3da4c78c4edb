"""Linear-velocity extrapolation (MMGRid's ``TemporalModelFuser.extrapolate_linear_velocity``).

Inputs M_1..M_t in time order (t >= 2): theta* = M_t + alpha (M_t - M_{t-1}), the first-order
velocity of the last two checkpoints carried one step further; only the last two are read
(the earlier ones get coefficient 0). With two inputs it is ``temporal`` with lambda =
1 + alpha. Computed as (1 + alpha) M_t - alpha M_{t-1} in float32 (equal in exact arithmetic
to MMGRid's M_t + alpha (M_t - M_{t-1}); the rounding can differ in the last bit).

Bound, per tensor and around any theta_0 (coefficients summing to 1, :mod:`affine`):
||theta* - theta_0|| <= c max_i ||M_i - theta_0||, c = |1 + alpha| + |alpha|.
"""

from __future__ import annotations

from dataclasses import dataclass

from mmgrid.merge.methods.affine import AffineMethod, check_finite
from mmgrid.merge.methods.registry import register


@dataclass
class LinearVelocityParams:
    """Parameters of ``linear_velocity``.

    Attributes:
        alpha: the step along the last velocity (MMGRid's ``scaling_coefficient``, 1.0);
            any finite real (0 gives M_t, negative steps back towards M_{t-1}).
    """

    alpha: float = 1.0

    def __post_init__(self) -> None:
        check_finite("linear_velocity", "alpha", self.alpha, "e.g. --set alpha=0.5")


@register
class LinearVelocity(AffineMethod):
    name = "linear_velocity"
    pretty = "Linear-velocity extrapolation"
    paper = "MMGRid code (TemporalModelFuser.extrapolate_linear_velocity)"
    Params = LinearVelocityParams
    min_inputs = 2

    @staticmethod
    def update_bound(p, n: int, numel: int) -> float | None:  # c of the docstring's bound
        return abs(1.0 + p.alpha) + abs(p.alpha)

    def coefficients(self, n: int) -> list[float]:
        a = float(self.params.alpha)
        return [0.0] * (n - 2) + [-a, 1.0 + a]
