"""DARE (Yu et al., 2024; MMGRid Sec. 2): drop each task-vector entry with probability
p, rescale the survivors by 1/(1-p), then task arithmetic.

theta* = theta_0 + scale * sum_i w_i DARE_p(tau_i). The mask of input i and tensor
t comes from a generator seeded by (seed, t, i), so a seed reproduces the merge and
E[DARE_p(tau)] = tau.

``rescale`` says what happens to the kept entries: ``inverse_keep`` (default, the
paper's Eq. 2) divides them by 1 - p; ``l1`` is mergekit's ``rescale: true``: the masked
task vector m * tau is multiplied by ||tau||_1 / ||m * tau||_1 (its L1 norm kept, per
tensor; unscaled where a norm is below 1e-7); ``none`` keeps them as they are (mergekit's
``rescale: false``). The masks are :func:`mmgrid.merge.masks.keep_mask`'s (injectable).

Bound, per tensor and per draw: ||theta* - theta_0|| <= c sum_i |w_i| max_i ||tau_i||
with c = |scale| / (1 - p): each kept entry is tau/(1-p), a dropped one 0, so
||DARE_p(tau)|| <= ||tau|| / (1 - p) (all kept); on average E||DARE_p(tau)||^2 =
||tau||^2 / (1 - p), i.e. 1/sqrt(1 - p) in root mean square. ``none``: c = |scale| (entries only zeroed);
``l1``: ||l1(m tau)||_2 <= ||l1(m tau)||_1 = ||tau||_1 <= sqrt(numel) ||tau||_2, a constant
that grows with the tensor (a single kept entry carries the whole L1 mass).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mmgrid.merge import pipeline as pl
from mmgrid.merge.methods import bounds as bd
from mmgrid.merge.methods.base import check_range
from mmgrid.merge.methods.pipeline_method import PipelineMethod
from mmgrid.merge.methods.registry import register
from mmgrid.merge.methods.ties import OMIT_DEFAULT
from mmgrid.merge.ops import Rescale
from mmgrid.merge.methods.weights import Weights


@dataclass
class DareParams(Weights):
    """Parameters of ``dare``: :class:`Weights` (default 1.0 each), and

    Attributes:
        p: drop probability, in [0, 1) (MMGRid: 0.1).
        scale: a factor on the summed task vector.
        seed: seed of the drop masks.
        rescale: inverse_keep (1/(1-p), default) | l1 (mergekit) | none.
    """

    p: float = 0.1
    scale: float = 1.0
    seed: int = 0
    rescale: Rescale = field(default="inverse_keep", metadata=OMIT_DEFAULT)

    def __post_init__(self) -> None:
        check_range("p", self.p, 0.0, 1.0, False, True, "DARE drops a fraction of entries, e.g. p=0.1")


@register
class Dare(PipelineMethod):
    name = "dare"
    pretty = "DARE (drop and rescale)"
    paper = "Yu et al. 2024 (DARE); MMGRid (paper 004) Sec. 2"
    Params = DareParams
    symmetric = False  # input i's mask depends on i

    @staticmethod
    def update_bound(p, n: int, numel: int) -> float | None:  # c of the docstring's bound
        return abs(p.scale) * bd.mass(p, n) * bd.rescale_factor(p.rescale, 1.0 - p.p, numel)

    def pipeline(self, n: int) -> pl.Pipeline:
        p = self.params
        return pl.Pipeline(sparsify="dare", p=p.p, weights=p.per_input(n),
                           scale=p.scale, seed=p.seed, rescale=p.rescale)
