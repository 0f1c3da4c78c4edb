"""L2 towards the initial weights: a loss penalty ``lam * ||theta - theta_init||_2^2``
(the continual-learning baseline "L2 weight decay" of the Orbit paper, section 5.3)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from mmgrid.configtools import ranged
from mmgrid.train.origin import Origin, distance
from mmgrid.train.regularizers.names import register


@dataclass
class L2InitParams:
    lam: float = ranged(0)  # penalty weight (paper: 1e-4)
    log_every: int = ranged(1, default=50)  # log the distance every this many steps
    distance: Literal["sign", "l2"] = "l2"

    def __post_init__(self) -> None:
        if self.lam < 0:
            raise ValueError(f"lam must be >= 0, got {self.lam}")


@register("l2_init", L2InitParams)
class L2Init:
    name = "l2_init"

    def __init__(self, params: L2InitParams, origin: Origin) -> None:
        self.p, self.origin = params, origin

    def penalty(self, model: torch.nn.Module) -> torch.Tensor:
        """Added to the task loss before ``backward`` (the views share the parameters' autograd)."""
        live = dict(model.named_parameters())
        total = None
        for name, view, o in zip(self.origin.names, self.origin.params, self.origin.init):
            p = live[name][: view.shape[0]] if view.dim() else live[name]
            term = (p - o).pow(2).sum()
            total = term if total is None else total + term
        return self.p.lam * total if total is not None else torch.zeros(())

    def on_step_end(self, model: torch.nn.Module, step: int) -> dict[str, float]:
        if step % self.p.log_every:
            return {}
        return {"distance": distance(self.origin, self.p.distance)}
