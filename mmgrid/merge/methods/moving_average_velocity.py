"""Moving-average-velocity extrapolation (MMGRid's
``TemporalModelFuser.extrapolate_moving_average_velocity``).

Inputs M_1..M_t in time order (t >= 2): theta* = M_t + alpha V_avg with V_avg the mean of the
last k velocities M_i - M_{i-1}. MMGRid averages all of them, i = 2..t (k = t - 1, the
default ``window``); the sum telescopes, V_avg = (M_t - M_{t-k}) / k, so the result is
(1 + alpha / k) M_t - (alpha / k) M_{t-k} and only those two inputs are read. ``window`` = k
limits the average to the last k velocities (an addition of ours; MMGRid has none).

Bound, per tensor and around any theta_0 (coefficients summing to 1, :mod:`affine`):
||theta* - theta_0|| <= c max_i ||M_i - theta_0||, c = |1 + alpha / k| + |alpha / k|.
"""

from __future__ import annotations

from dataclasses import dataclass

from mmgrid.merge.errors import MergeParamError
from mmgrid.merge.methods.affine import AffineMethod, check_finite
from mmgrid.merge.methods.registry import register


@dataclass
class MovingAverageVelocityParams:
    """Parameters of ``moving_average_velocity``.

    Attributes:
        alpha: the step along the mean velocity (MMGRid's ``scaling_coefficient``, 1.0); any
            finite real.
        window: how many of the latest velocities to average (k >= 1; None: all t - 1, as
            MMGRid).
    """

    alpha: float = 1.0
    window: int | None = None

    def __post_init__(self) -> None:
        check_finite("moving_average_velocity", "alpha", self.alpha, "e.g. --set alpha=0.5")
        if self.window is not None and (isinstance(self.window, bool) or not isinstance(self.window, int)
                                        or self.window < 1):
            raise MergeParamError(f"merge method 'moving_average_velocity': window={self.window!r} must be an "
                                  "integer >= 1 (the number of latest velocities averaged), or omitted for all")


def _k(p: MovingAverageVelocityParams, n: int) -> int:
    return max(1, n - 1) if p.window is None else p.window


@register
class MovingAverageVelocity(AffineMethod):
    name = "moving_average_velocity"
    pretty = "Moving-average-velocity extrapolation"
    paper = "MMGRid code (TemporalModelFuser.extrapolate_moving_average_velocity)"
    Params = MovingAverageVelocityParams
    min_inputs = 2

    @staticmethod
    def update_bound(p, n: int, numel: int) -> float | None:  # c of the docstring's bound
        s = p.alpha / _k(p, n)
        return abs(1.0 + s) + abs(s)

    def coefficients(self, n: int) -> list[float]:
        k = _k(self.params, n)
        if k > n - 1:
            raise MergeParamError(f"merge method 'moving_average_velocity': window={k} averages {k} velocities and "
                                  f"needs at least {k + 1} inputs, got {n}; give more checkpoints or a smaller window")
        s = float(self.params.alpha) / k
        cs = [0.0] * n
        cs[-1] = 1.0 + s
        cs[n - 1 - k] = -s
        return cs
