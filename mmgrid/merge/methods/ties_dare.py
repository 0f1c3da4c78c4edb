"""TIES-DARE: DARE, then TIES (MMGRid's subspace merge, Sec. 2: p = 0.1, X = 20%).

TRIM(tau) = top-X% by magnitude of DARE_p(tau), then sign election and the TIES
combine (see :mod:`mmgrid.merge.methods.ties`); ``sign_rule`` as in ties, ``rescale``
as in dare (applied to DARE's survivors, before the top-X%).

Bound, per tensor: TIES's constant (|scale| with ``sum``, |scale| sqrt(n) with
``disjoint_mean``) divided by (1 - p), DARE's rescale of the kept entries (with
``rescale="none"`` not divided; with ``l1`` see dare).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from mmgrid.merge import pipeline as pl
from mmgrid.merge.methods import bounds as bd
from mmgrid.merge.methods.base import check_range
from mmgrid.merge.methods.dare import StreamedL1
from mmgrid.merge.methods.registry import register
from mmgrid.merge.methods.ties import OMIT_DEFAULT, SignRule, ties_pipeline
from mmgrid.merge.ops import Rescale
from mmgrid.merge.methods.weights import Weights


@dataclass
class TiesDareParams(Weights):
    """Parameters of ``ties_dare``: :class:`Weights` (as ``ties``), and

    Attributes:
        p: DARE drop probability, in [0, 1).
        density: TIES fraction kept, in (0, 1].
        scope: model | tensor (where the top-X% is taken).
        combine: disjoint_mean | sum (see ties; default sum with ``alpha``, else disjoint_mean).
        scale: a factor on the merged task vector.
        seed: seed of the DARE masks.
        sign_rule: unweighted (default) | weighted (see ties).
        rescale: inverse_keep (default) | l1 | none (see dare).
    """

    p: float = 0.1
    density: float = 0.2
    scope: Literal["model", "tensor"] = "model"
    combine: Literal["disjoint_mean", "sum"] | None = None
    scale: float = 1.0
    seed: int = 0
    sign_rule: SignRule = field(default="unweighted", metadata=OMIT_DEFAULT)
    rescale: Rescale = field(default="inverse_keep", metadata=OMIT_DEFAULT)

    def __post_init__(self) -> None:
        check_range("p", self.p, 0.0, 1.0, False, True, "DARE drops a fraction of entries, e.g. p=0.1")
        check_range("density", self.density, 0.0, 1.0, True, False, "TIES keeps a fraction, e.g. density=0.2")


@register
class TiesDare(StreamedL1):
    name = "ties_dare"
    pretty = "TIES after DARE"
    paper = "MMGRid Sec. 2 (p=0.1, X=20); Yadav et al. 2023; Yu et al. 2024"
    Params = TiesDareParams
    symmetric = False
    version = 2  # mergekit's L1 rescale streamed: exact float64 norms (mmgrid.merge.methods.dare.StreamedL1)

    @staticmethod
    def update_bound(p, n: int, numel: int) -> float | None:  # c of the docstring's bound
        return abs(p.scale) * bd.fused(p, n, p.combine or ("sum" if p.alpha is not None else "disjoint_mean"), 1.0 / n) * bd.rescale_factor(p.rescale, 1.0 - p.p, numel)

    def pipeline(self, n: int) -> pl.Pipeline:
        p = self.params
        return ties_pipeline(p, n, "dare_magnitude", p.p, p.seed, p.rescale)
