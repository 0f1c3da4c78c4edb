"""Soup-to-Go: average with the origin every ``k`` steps (Kleiman et al. 2025, as used in
the Orbit paper, section 5.3: "we specify Soup-to-Go baselines by their cadence with k steps")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from mmgrid.configtools import ranged
from mmgrid.train.origin import Origin, average_with_origin, distance
from mmgrid.train.regularizers.names import register


@dataclass
class SoupToGoParams:
    every: int = ranged(1)  # k: average after every k-th optimizer step
    weight: float = ranged(0, 1, default=0.5)  # weight of the origin in the average (0.5 = plain mean)
    distance: Literal["sign", "l2"] = "sign"  # logged at each averaging event

    def __post_init__(self) -> None:
        if self.every < 1:
            raise ValueError(f"every must be >= 1, got {self.every}")
        if not 0.0 <= self.weight <= 1.0:
            raise ValueError(f"weight must be in [0, 1], got {self.weight}")


@register("soup_to_go", SoupToGoParams)
class SoupToGo:
    name = "soup_to_go"

    def __init__(self, params: SoupToGoParams, origin: Origin) -> None:
        self.p, self.origin = params, origin

    @torch.no_grad()
    def on_step_end(self, model: torch.nn.Module, step: int) -> dict[str, float]:
        if (step + 1) % self.p.every:
            return {}
        d_before = distance(self.origin, self.p.distance)
        average_with_origin(self.origin, self.p.weight)
        return {"distance": distance(self.origin, self.p.distance), "distance_before": d_before, "merges": 1.0}
