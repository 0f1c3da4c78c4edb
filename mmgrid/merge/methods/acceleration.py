"""Second-order (acceleration) extrapolation (MMGRid's
``TemporalModelFuser.extrapolate_with_acceleration``).

Inputs M_1..M_t in time order (t >= 3): with V_t = M_t - M_{t-1} and A_t = V_t - V_{t-1} =
M_t - 2 M_{t-1} + M_{t-2}, theta* = M_t + alpha V_t + beta A_t
= (1 + alpha + beta) M_t - (alpha + 2 beta) M_{t-1} + beta M_{t-2}; only the last three inputs
are read. Defaults are MMGRid's (velocity_scale 1.0, acceleration_scale 0.5).

Bound, per tensor and around any theta_0 (coefficients summing to 1, :mod:`affine`):
||theta* - theta_0|| <= c max_i ||M_i - theta_0||, c = |1 + alpha + beta| + |alpha + 2 beta| + |beta|.
"""

from __future__ import annotations

from dataclasses import dataclass

from mmgrid.merge.methods.affine import AffineMethod, check_finite, coefficient_mass
from mmgrid.merge.methods.registry import register


@dataclass
class AccelerationParams:
    """Parameters of ``acceleration``.

    Attributes:
        alpha: the step along the velocity V_t (MMGRid's ``velocity_scale``, 1.0); finite.
        beta: the step along the acceleration A_t (MMGRid's ``acceleration_scale``, 0.5); finite.
    """

    alpha: float = 1.0
    beta: float = 0.5

    def __post_init__(self) -> None:
        check_finite("acceleration", "alpha", self.alpha, "e.g. --set alpha=1.0")
        check_finite("acceleration", "beta", self.beta, "e.g. --set beta=0.5")


def _last_three(p: AccelerationParams) -> list[float]:
    a, b = float(p.alpha), float(p.beta)
    return [b, -(a + 2.0 * b), 1.0 + a + b]


@register
class Acceleration(AffineMethod):
    name = "acceleration"
    pretty = "Second-order (acceleration) extrapolation"
    paper = "MMGRid code (TemporalModelFuser.extrapolate_with_acceleration)"
    Params = AccelerationParams
    min_inputs = 3

    @staticmethod
    def update_bound(p, n: int, numel: int) -> float | None:  # c of the docstring's bound
        return coefficient_mass(_last_three(p))

    def coefficients(self, n: int) -> list[float]:
        return [0.0] * (n - 3) + _last_three(self.params)
