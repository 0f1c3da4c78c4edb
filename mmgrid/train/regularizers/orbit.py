"""Orbit: origin-regulated back-merging (Orbit paper, section 4.2, Algorithm 1).

After every optimizer step, while ``d(theta, theta_init) > epsilon``:
``theta = (theta + theta_init) / 2``. ``d`` is the L2 distance or the sign dissimilarity
(Eq. 1); added-vocabulary rows are excluded. Appendix D shows that repeated merges drive
the sign dissimilarity to zero in finitely many steps; ``max_merges`` bounds the loop
anyway, after which theta is set to theta_init (distance 0), so the guarantee
``d <= epsilon`` after every step always holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from mmgrid.configtools import ranged
from mmgrid.train.origin import Origin, average_with_origin, distance
from mmgrid.train.regularizers.names import register


@dataclass
class OrbitParams:
    epsilon: float = ranged(0)  # maximum distance to the origin (paper: SD 0.007 or 0.0075; L2 5 / 50 / 500)
    distance: Literal["sign", "l2"] = "sign"  # sign dissimilarity (Eq. 1) or L2 distance
    max_merges: int = ranged(1, 10**6, default=200)  # safety bound on consecutive back-merges in one step

    def __post_init__(self) -> None:
        if self.epsilon < 0:
            raise ValueError(f"epsilon must be >= 0, got {self.epsilon}")


@register("orbit", OrbitParams)
class Orbit:
    name = "orbit"

    def __init__(self, params: OrbitParams, origin: Origin) -> None:
        self.p, self.origin = params, origin

    @torch.no_grad()
    def on_step_end(self, model: torch.nn.Module, step: int) -> dict[str, float]:
        d_before = d = distance(self.origin, self.p.distance)
        merges = 0
        while d > self.p.epsilon:
            if merges >= self.p.max_merges:
                average_with_origin(self.origin, weight=1.0)
                d = distance(self.origin, self.p.distance)
                break
            average_with_origin(self.origin, 0.5)
            merges += 1
            d = distance(self.origin, self.p.distance)
        return {"distance": d, "distance_before": d_before, "merges": float(merges)}
