"""Model Breadcrumbs (Davari & Belilovsky 2023, "Model Breadcrumbs: Scaling Multi-Task
Model Merging with Sparse Masks", arXiv 2312.06795): per tensor, mask the largest
(outlier) entries of each task vector and its smallest ones, then task arithmetic.

S(tau): of a tensor's N entries ranked by |tau|, drop the top n_top = floor(gamma N)
and the bottom n_bot = N - floor(density N) - n_top, keeping floor(density N) entries
(mergekit's ``magnitude_outliers``: ``density`` is the fraction kept, ``gamma`` the
fraction of largest entries removed; if density + gamma > 1 fewer large entries are
removed, n_top = N - floor(density N)). Equal magnitudes are ranked by position (a
stable sort). ``rescale="l1"`` is mergekit's ``rescale: true`` (kept entries scaled to
tau's L1 norm; see :func:`mmgrid.merge.ops.drop_rescale`).

theta* = theta_0 + scale * sum_i w_i S(tau_i) (mergekit's breadcrumbs: no sign
election, not normalized).

Edge case: where floor(gamma N) = 0 (gamma = 0, or a tensor of fewer than 1/gamma
entries, e.g. a 64-entry norm with gamma = 0.01) the floor(density N) largest entries are
kept. A mergekit that slices ``indices[n_bot:-n_top]`` (empty when n_top = 0) drops the
whole task vector there; mergekit 0.1.5 slices ``[n_bot:n_bot + target]`` and agrees with
this rule (tests/merge/test_mergekit_oracle.py, 8-entry norms with gamma 0.1).

Bound, per tensor: S only zeros entries, so ||theta* - theta_0|| <= c sum_i |w_i| max_i
||tau_i|| with c = |scale| (triangle inequality); with ``rescale="l1"`` c grows to
|scale| sqrt(N) (||l1(m tau)||_2 <= ||tau||_1 <= sqrt(N) ||tau||_2).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from mmgrid.merge import ops
from mmgrid.merge import pipeline as pl
from mmgrid.merge.methods import bounds as bd
from mmgrid.merge.methods.base import check_range
from mmgrid.merge.methods.registry import register
from mmgrid.merge.methods.sparsified import SparsifiedMethod
from mmgrid.merge.methods.weights import Weights


def breadcrumbs_keep(delta: torch.Tensor, density: float, gamma: float) -> torch.Tensor:
    """The bool mask of the entries Breadcrumbs keeps in one tensor (see the module docstring).

    The entries of stable ranks n_bot .. N - n_top - 1 by |tau| (ascending, ties by position),
    found by selection instead of a sort: the two boundary magnitudes by one
    ``numpy.partition`` (introselect), every
    entry strictly between them kept, and of the entries equal to a boundary those whose stable
    rank (entries below + position among the equal ones) falls in the range. The same mask as
    sorting (tests/merge/test_methods_mergekit_family.py), without the sort's float32 values and
    int64 indices of every entry (3x the tensor's float32 size) and several times faster.
    """
    n = delta.numel()
    target = int(density * n)
    n_top = int(gamma * n)
    n_bot = n - target - n_top
    if n_bot < 0:  # density + gamma > 1: remove fewer large entries to keep `target`
        n_top, n_bot = n_top + n_bot, 0
    last = n - n_top - 1  # stable rank of the last entry kept
    if last < n_bot:
        return torch.zeros(delta.shape, dtype=torch.bool)
    a = delta.detach().reshape(-1).abs().float()
    part = np.partition(a.numpy(), [n_bot, last])
    lo, hi = float(part[n_bot]), float(part[last])
    del part
    keep = a > lo
    keep &= a < hi
    for v in sorted({lo, hi}):
        eq = (a == v).nonzero().reshape(-1)  # positions of the equal entries, in order
        rank = (a < v).sum() + torch.arange(eq.numel())
        keep[eq[(rank >= n_bot) & (rank <= last)]] = True
    return keep.reshape(delta.shape)


@dataclass
class BreadcrumbsParams(Weights):
    """Parameters of ``breadcrumbs``: :class:`Weights` (default 1.0 each), and

    Attributes:
        density: fraction of each tensor's entries kept, in (0, 1] (default 0.1).
        gamma: fraction of the largest entries removed, in [0, 1) (default 0.01, mergekit's).
        scale: a factor on the merged task vector (mergekit's ``lambda``).
        rescale: none (default, the paper) | l1 (mergekit's ``rescale: true``).
    """

    density: float = 0.1
    gamma: float = 0.01
    scale: float = 1.0
    rescale: Literal["none", "l1"] = "none"

    def __post_init__(self) -> None:
        check_range("density", self.density, 0.0, 1.0, True, False, "Breadcrumbs keeps a fraction, e.g. density=0.1")
        check_range("gamma", self.gamma, 0.0, 1.0, False, True, "gamma removes the largest fraction, e.g. gamma=0.01")


@register
class Breadcrumbs(SparsifiedMethod):
    name = "breadcrumbs"
    pretty = "Model Breadcrumbs"
    paper = "Davari & Belilovsky 2023 (Model Breadcrumbs, arXiv 2312.06795); mergekit breadcrumbs"
    Params = BreadcrumbsParams


    @staticmethod
    def update_bound(p, n: int, numel: int) -> float | None:  # c of the docstring's bound
        return abs(p.scale) * bd.mass(p, n) * bd.rescale_factor(p.rescale, 1.0, numel)

    def sparsify(self, key: str, index: int, delta: torch.Tensor) -> torch.Tensor:
        p = self.params
        return ops.drop_rescale(delta, breadcrumbs_keep(delta, p.density, p.gamma), 0.0, p.rescale)

    def fuse_config(self, n: int) -> pl.Pipeline:
        p = self.params
        return pl.Pipeline(weights=p.per_input(n), scale=p.scale)
