"""DELLA without sign election (mergekit's ``della_linear``; Deep et al. 2024, arXiv
2406.11617): theta* = theta_0 + scale * sum_i w_i S(tau_i), S DELLA's MagPrune with its
rescale (:mod:`mmgrid.merge.methods.della`).

Bound, per tensor and per draw: c = |scale| / (density - epsilon) on the mass
sum_i |w_i| (``inverse_keep``: a kept entry is at most |tau_e| / k_min; ``none``: c =
|scale|; ``l1``: times sqrt(N), see dare).
"""

from __future__ import annotations

import torch

from mmgrid.merge import pipeline as pl
from mmgrid.merge.methods import bounds as bd
from mmgrid.merge.methods.della import DellaLinearParams, StreamedDella, magprune
from mmgrid.merge.methods.registry import register


@register
class DellaLinear(StreamedDella):
    name = "della_linear"
    pretty = "DELLA, linear (no sign election)"
    paper = "Deep et al. 2024 (DELLA-Merging, arXiv 2406.11617); mergekit della_linear"
    Params = DellaLinearParams
    symmetric = False

    @staticmethod
    def update_bound(p, n: int, numel: int) -> float | None:  # c of the docstring's bound
        return abs(p.scale) * bd.mass(p, n) * bd.rescale_factor(p.rescale, 1.0 if p.density >= 1.0 else p.density - p.epsilon, numel)

    def sparsify(self, key: str, index: int, delta: torch.Tensor) -> torch.Tensor:
        p = self.params
        return magprune(delta, p.density, p.epsilon, p.seed, key, index, p.rescale)

    def fuse_config(self, n: int) -> pl.Pipeline:
        p = self.params
        return pl.Pipeline(weights=p.per_input(n), scale=p.scale)
