"""Exponential-decay fusion of task vectors (MMGRid's ``TemporalModelFuser.fuse_exponential_decay``).

Inputs M_1..M_t in time order (t >= 1), base M_0: theta* = M_0 + sum_i w_i (M_i - M_0) with
w_i = decay^(t-i) / sum_j decay^(t-j) (the newest weighs most for decay < 1; decay = 1 is the
uniform average; decay = 0 keeps M_t alone, 0^0 = 1). The weights sum to 1, so the base
cancels: theta* = sum_i w_i M_i, which is what is computed, and a base, if given, is not read
(in exact arithmetic the same as MMGRid's task-vector form; the rounding can differ in the
last bit). Default decay 0.8, as MMGRid.

Bound, per tensor and around any theta_0: a convex combination, ||theta* - theta_0|| <=
c max_i ||M_i - theta_0|| with c = 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mmgrid.merge.errors import MergeParamError
from mmgrid.merge.methods.affine import AffineMethod
from mmgrid.merge.methods.registry import register


@dataclass
class ExpDecayParams:
    """Parameters of ``exp_decay``.

    Attributes:
        decay: the weight ratio of each checkpoint to the next newer one (MMGRid's
            ``decay_rate``, 0.8); a finite number >= 0 (> 1 weighs older checkpoints more).
    """

    decay: float = 0.8

    def __post_init__(self) -> None:
        if isinstance(self.decay, bool) or not isinstance(self.decay, (int, float)) or not math.isfinite(self.decay) \
                or self.decay < 0:
            raise MergeParamError(f"merge method 'exp_decay': decay={self.decay!r} must be a finite number >= 0 "
                                  "(the weight ratio of a checkpoint to the next newer one, e.g. 0.8)")


@register
class ExpDecay(AffineMethod):
    name = "exp_decay"
    pretty = "Exponential-decay fusion"
    paper = "MMGRid code (TemporalModelFuser.fuse_exponential_decay)"
    Params = ExpDecayParams
    min_inputs = 1

    @staticmethod
    def update_bound(p, n: int, numel: int) -> float | None:  # c of the docstring's bound
        return 1.0

    def coefficients(self, n: int) -> list[float]:
        d = float(self.params.decay)
        w = [d ** (n - 1 - i) for i in range(n)]
        total = sum(w)
        if not math.isfinite(total) or total <= 0:
            raise MergeParamError(f"merge method 'exp_decay': decay={d} over {n} inputs gives weights that overflow; "
                                  "use a decay closer to 1")
        return [x / total for x in w]
