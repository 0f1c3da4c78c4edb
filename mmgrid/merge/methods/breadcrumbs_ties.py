"""Model Breadcrumbs with TIES sign election (mergekit's ``breadcrumbs_ties``;
Davari & Belilovsky 2023, arXiv 2312.06795, with Yadav et al. 2023's elect step).

S(tau_i) as in :mod:`mmgrid.merge.methods.breadcrumbs`; then gamma = sign(sum_i S(tau_i))
(``sign_rule="unweighted"``, the TIES paper, default) or sign(sum_i w_i S(tau_i))
(``weighted``, mergekit's), and ``combine``: ``sum`` (default, mergekit's
``normalize: false``) = sum_i w_i S(tau_i) where it agrees with gamma, or
``disjoint_mean`` (mergekit's ``normalize: true``) = sum_i w_i S_i [agree] / sum_i w_i [agree].

Bound, per tensor: with ``sum`` the sign mask only zeros entries: c = |scale| on the
mass sum_i |w_i|; with ``disjoint_mean`` and non-negative weights each entry is a mean
of agreeing entries, |out_e| <= max_i |tau_ie|: c = |scale| sqrt(n) on a mass of 1
(sum_e max_i tau_ie^2 <= sum_i ||tau_i||^2 <= n max_i ||tau_i||^2). ``rescale="l1"``:
times sqrt(N) (see breadcrumbs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from mmgrid.merge import pipeline as pl
from mmgrid.merge.methods import bounds as bd
from mmgrid.merge.methods.breadcrumbs import Breadcrumbs, BreadcrumbsParams
from mmgrid.merge.methods.registry import register
from mmgrid.merge.methods.sparsified import Combine


@dataclass
class BreadcrumbsTiesParams(BreadcrumbsParams):
    """Parameters of ``breadcrumbs_ties``: those of breadcrumbs, and

    Attributes:
        combine: sum (default, mergekit's) | disjoint_mean (TIES).
        sign_rule: unweighted (default, TIES paper) | weighted (mergekit's).
    """

    combine: Combine = "sum"
    sign_rule: Literal["unweighted", "weighted"] = "unweighted"


@register
class BreadcrumbsTies(Breadcrumbs):
    name = "breadcrumbs_ties"
    pretty = "Model Breadcrumbs with TIES sign election"
    paper = "Davari & Belilovsky 2023 (arXiv 2312.06795); Yadav et al. 2023 (TIES); mergekit breadcrumbs_ties"
    Params = BreadcrumbsTiesParams


    @staticmethod
    def update_bound(p, n: int, numel: int) -> float | None:  # c of the docstring's bound
        return abs(p.scale) * bd.fused(p, n, p.combine) * bd.rescale_factor(p.rescale, 1.0, numel)

    def fuse_config(self, n: int) -> pl.Pipeline:
        p = self.params
        return pl.Pipeline(elect_sign=True, combine=p.combine, weights=p.per_input(n), scale=p.scale,
                           sign_rule=p.sign_rule)
