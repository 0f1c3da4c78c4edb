"""OrthoMerge: merging on the orthogonal group with Orthogonal-Residual Decoupling
(Eq. 2-14, Algorithm 1).

For every 2-D weight that is not a vocabulary matrix, in the paper's orientation
W in R^{d_in x d_out} (the PyTorch ``(out, in)`` weight transposed, so that R rotates
the input space as OFT does; ``side="out"`` rotates the output space instead):

1. targets: W_i (global, Eq. 9) or W_0 + tau_i^conf keeping only the columns
   (neurons) whose update opposes the mean update (conflict-aware, Eq. 10-11);
2. R_i = U V^T from SVD(W_i^target W_0^T) (Procrustes, Eq. 4/12; the minimal rotation when
   that product is rank-deficient, see below);
3. Q_i = (R_i - I)(R_i + I)^{-1} (inverse Cayley, Eq. 5);
4. Q = c mean_i Q_i, c = sum_i ||Q_i|| / ||sum_i Q_i|| (Eq. 7-8), shortened if needed to stay
   within the inputs' reach (below); R = Cayley(Q) (Eq. 2);
5. rho_i = W_i - R_i W_0 (Eq. 13) merged by a Euclidean method (task arithmetic, TIES
   or DARE, residuals taken as task vectors on a zero base, TIES per tensor);
6. W = R W_0 + rho_merged (Eq. 14).

1-D tensors and vocabulary rows (embeddings, LM head) are merged in Euclidean space
by the residual method.

Well-posed on every shape (version 2). A matrix of d rotated rows and m < d columns (the
input space of a wide PyTorch weight with ``side="in"``, the output space of a tall one with
``side="out"``) gives a cross-covariance W_i W_0^T of rank <= m < d, and step 2 fixes R_i only
on the subspaces the data determine; R_i is then the minimal rotation, the identity on the rest
(:func:`mmgrid.merge.geometry.procrustes`). Step 4 keeps the merged rotation within the inputs'
reach: when ||(R - I) W_0||_F exceeds a = 2 max_i ||tau_i||_F, the most any input's own
rotation can move W_0 (see the bound), Q is shortened to the angle where ||(R - I) W_0||_F = a
(:func:`mmgrid.merge.geometry.cayley_reach`; the tensors this happens to are listed in
``report["rotation_capped"]``). The magnitude correction of Eq. 8 can otherwise send a nearly
cancelling mean of generators far along a direction no input moved W_0 in (on a square (4, 4)
weight too); the cap measures the R actually applied, so it also covers an R_i with the
eigenvalue -1, which no generator reaches (:func:`mmgrid.merge.geometry.inverse_cayley`).
Where the cross-covariances have full rank and the cap does not act, the result is the
paper's and version 1's, bit for bit. Version 1 took the Procrustes completion the SVD happened to give:
on a (4, 6) weight with three inputs 0.1 N(0, 1) away from a N(0, 1) base it moved the base
4.8 where no input moved it more than 0.56. Merges stored by version 1 are recomputed.

Bound, per tensor: ||theta* - theta_0|| <= c max_i ||tau_i|| with
c = 2 + k F (:meth:`OrthoMerge.update_bound`), where F is the residual method's factor on
rho_1..rho_n (task arithmetic sum_i |w_i|; DARE sum_i |w_i| / (1 - p); TIES with non-negative
weights sqrt(n), inf with a negative one) and k = 1 for ``global``, sqrt(2) for ``conflict_aware``. Derivation:
theta* - theta_0 = (R - I) W_0 + rho. Global: R = I is feasible in Procrustes, so
||rho_i|| <= ||tau_i||, and ||(R_i - I) W_0|| <= ||R_i W_0 - W_i|| + ||tau_i|| <= 2 ||tau_i||;
the cap gives ||(R - I) W_0|| <= a = 2 max_i ||tau_i||. Conflict-aware: R_i fits the target
T_i = W_0 + tau_i^c (tau_i^c: tau_i's conflicting columns), so ||(R_i - I) W_0|| <=
2 ||tau_i^c|| <= 2 ||tau_i|| and ||rho_i|| <= ||tau_i - tau_i^c|| + ||tau_i^c|| <= sqrt(2)
||tau_i|| (the two parts are column-disjoint). 1-D tensors and vocabulary rows get F alone.
Merging PEFT OFT adapters directly in the Lie algebra: :func:`mmgrid.merge.oft.merge_oft_adapters`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

from mmgrid.merge import geometry as geo
from mmgrid.merge import pipeline as pl
from mmgrid.merge.methods.base import Method, TensorView, check_range
from mmgrid.merge.methods.registry import register
from mmgrid.merge.methods.weights import Weights


@dataclass
class OrthoMergeParams(Weights):
    """Parameters of ``orthomerge``: :class:`Weights` of the residuals (default 1.0 each), and

    Attributes:
        strategy: global (Eq. 9) | conflict_aware (Eq. 10-11) target.
        residual_method: task_arithmetic | ties | dare, for rho_i and Euclidean tensors.
        density: TIES density of the residuals, in (0, 1].
        p: DARE drop probability of the residuals, in [0, 1).
        side: in (rotate the input space, OFT's convention) | out.
        seed: DARE seed.
    """

    strategy: Literal["global", "conflict_aware"] = "global"
    residual_method: Literal["task_arithmetic", "ties", "dare"] = "task_arithmetic"
    density: float = 0.2
    p: float = 0.1
    side: Literal["in", "out"] = "in"
    seed: int = 0

    def __post_init__(self) -> None:
        check_range("density", self.density, 0.0, 1.0, True, False, "e.g. density=0.2")
        check_range("p", self.p, 0.0, 1.0, False, True, "e.g. p=0.1")


@register
class OrthoMerge(Method):
    name = "orthomerge"
    pretty = "OrthoMerge (orthogonal-residual decoupling)"
    paper = "OrthoMerge Eq. 2-14, Algorithm 1"
    Params = OrthoMergeParams
    version = 2  # 1: an arbitrary Procrustes completion on rank-deficient matrices, no reach cap

    @staticmethod
    def update_bound(p: OrthoMergeParams, n: int, numel: int) -> float:
        """c = 2 + k F of the module docstring's bound (inf: TIES residuals with a negative weight)."""
        w = p.per_input(n)
        if p.residual_method == "ties":
            f = math.sqrt(n) if min(w) >= 0 else math.inf
        else:
            f = sum(abs(x) for x in w) / (1.0 - p.p if p.residual_method == "dare" else 1.0)
        return 2.0 + (math.sqrt(2.0) if p.strategy == "conflict_aware" else 1.0) * f

    def check_inputs(self, n: int) -> None:
        super().check_inputs(n)
        self._pipe = self._residual_pipeline(n)
        if self.params.residual_method == "dare":
            self.symmetric = False  # type: ignore[misc]  # this instance's own value: the dare residual is seeded per input

    def _residual_pipeline(self, n: int) -> pl.Pipeline:
        p = self.params
        w = p.per_input(n)
        if p.residual_method == "ties":
            return pl.Pipeline(sparsify="magnitude", density=p.density, elect_sign=True,
                               combine="disjoint_mean", weights=w, scope="tensor")
        if p.residual_method == "dare":
            return pl.Pipeline(sparsify="dare", p=p.p, weights=w, seed=p.seed)
        return pl.Pipeline(weights=w)

    def merge_tensor(self, view: TensorView) -> torch.Tensor:
        assert view.base is not None
        if view.base.ndim != 2 or view.vocab:
            return pl.combine(self._pipe, view.key, view.deltas()).add_(view.base)
        # Paper orientation: rows index the rotated space.
        flip = self.params.side == "in"
        w0 = view.base.T if flip else view.base
        ws = [m.T if flip else m for m in view.models]
        w_final, angles = self.merge_matrix(view.name, w0, ws)
        self.report.setdefault("rotation_norm", {})[view.name] = angles
        return w_final.T.contiguous() if flip else w_final

    def merge_matrix(self, name: str, w0: torch.Tensor, ws: list[torch.Tensor]) -> tuple[torch.Tensor, float]:
        """Algorithm 1 on one matrix in the paper's orientation (rows are rotated)."""
        taus = [w - w0 for w in ws]
        if self.params.strategy == "conflict_aware":
            targets = [w0 + t for t in geo.conflict_columns(taus)]
        else:
            targets = ws
        rs = [geo.procrustes(t, w0) for t in targets]
        q = geo.magnitude_corrected_mean([geo.inverse_cayley(r) for r in rs])
        reach = 2.0 * max(float(torch.linalg.matrix_norm(t)) for t in taus)
        q, capped = geo.cayley_reach(q, w0, reach)
        if capped:
            self.report.setdefault("rotation_capped", []).append(name)
        r_merged = geo.cayley(q)
        rhos = [w - r @ w0 for w, r in zip(ws, rs)]
        rho = pl.combine(self._pipe, name, rhos)
        return r_merged @ w0 + rho, float(torch.linalg.matrix_norm(q))
