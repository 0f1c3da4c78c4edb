"""TIES merging (Yadav et al., 2023; MMGRid Eq. 4 and Sec. 2).

1. trim: keep the top ``density`` fraction of each task vector by magnitude, over the
   whole model (``scope="model"``, the TIES and MMGRid code; two streaming passes) or
   per tensor (``scope="tensor"``, mergekit and PEFT). k = max(1, floor(density * n));
   entries whose magnitude equals the k-th largest are kept too.
2. elect sign: gamma = sign(sum_i TRIM(tau_i)) (total mass; +1 where it is 0), the TIES
   paper's rule (``sign_rule="unweighted"``, the default), or gamma =
   sign(sum_i w_i TRIM(tau_i)) (``sign_rule="weighted"``, mergekit's: its sign consensus
   sees the weighted task vectors). Equal positive weights give the same sign.
3. combine: ``disjoint_mean`` (TIES) = sum_i w_i tau_i [sign agrees] / sum_i w_i [agrees]
   (mergekit's rule; with equal weights PEFT's count rule), or ``sum`` =
   sum_i w_i TRIM(tau_i) with disagreeing entries dropped (MMGRid Eq. 4 with w_i = 1/N,
   Eq. 7 with alpha).
4. scale: theta* = theta_0 + scale * combined.

Bound, per tensor: trimming and the sign mask only zero entries, so with ``sum``
||theta* - theta_0|| <= |scale| sum_i |w_i| max_i ||tau_i|| (c = |scale|); with
``disjoint_mean`` and non-negative weights each entry is a weighted mean of agreeing
entries, |out_e| <= max_i |tau_ie|, so ||theta* - theta_0|| <= |scale| sqrt(n) max_i ||tau_i||
(c = |scale| sqrt(n) on a weight mass of 1; sum_e max_i tau_ie^2 <= sum_i ||tau_i||^2).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from mmgrid.merge import pipeline as pl
from mmgrid.merge.methods import bounds as bd
from mmgrid.merge.methods.base import check_range
from mmgrid.merge.methods.pipeline_method import PipelineMethod
from mmgrid.merge.methods.registry import register
from mmgrid.merge.methods.weights import Weights
from mmgrid.merge.ops import Rescale, SignRule


# A parameter added after results were stored: left out of a method's recorded parameters
# while it has its default (:func:`mmgrid.merge.methods.params_dict`), so those stay as they were.
OMIT_DEFAULT = {"omit_default": True}


@dataclass
class TiesParams(Weights):
    """Parameters of ``ties``: :class:`Weights` (default 1.0 each; 1/N with ``sum``), and

    Attributes:
        density: fraction X of entries kept per task vector, in (0, 1] (MMGRid: 0.2).
        scope: model (top-X% over the whole model) | tensor (per tensor).
        combine: disjoint_mean (TIES) | sum (MMGRid Eq. 4/7 weighted sum); default:
            sum when ``alpha`` is given (Eq. 7 as written), else disjoint_mean.
        scale: lambda of TIES: a factor on the merged task vector.
        sign_rule: unweighted (TIES paper, default) | weighted (mergekit): the mass whose
            sign is elected, sum_i TRIM(tau_i) or sum_i w_i TRIM(tau_i).
    """

    density: float = 0.2
    scope: Literal["model", "tensor"] = "model"
    combine: Literal["disjoint_mean", "sum"] | None = None
    scale: float = 1.0
    sign_rule: SignRule = field(default="unweighted", metadata=OMIT_DEFAULT)

    def __post_init__(self) -> None:
        check_range("density", self.density, 0.0, 1.0, True, False, "TIES keeps a fraction of entries, e.g. density=0.2")


def ties_pipeline(p, n: int, sparsify: pl.Sparsify = "magnitude", p_drop: float = 0.0, seed: int = 0,
                  rescale: Rescale = "inverse_keep") -> pl.Pipeline:
    """The TIES preset (shared with ties_dare)."""
    combine: pl.Combine = p.combine or ("sum" if p.alpha is not None else "disjoint_mean")
    default = 1.0 if combine == "disjoint_mean" else 1.0 / n
    return pl.Pipeline(
        sparsify=sparsify, density=p.density, p=p_drop, elect_sign=True, combine=combine,
        weights=p.per_input(n, default), scale=p.scale, scope=p.scope, seed=seed,
        sign_rule=p.sign_rule, rescale=rescale,
    )


@register
class Ties(PipelineMethod):
    name = "ties"
    pretty = "TIES merging"
    paper = "Yadav et al. 2023 (TIES-Merging); MMGRid Eq. 4"
    Params = TiesParams


    @staticmethod
    def update_bound(p, n: int, numel: int) -> float | None:  # c of the docstring's bound
        return abs(p.scale) * bd.fused(p, n, p.combine or ("sum" if p.alpha is not None else "disjoint_mean"), 1.0 / n)

    def pipeline(self, n: int) -> pl.Pipeline:
        return ties_pipeline(self.params, n)
