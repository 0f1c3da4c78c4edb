"""OrthoMerge: merging on the orthogonal group with Orthogonal-Residual Decoupling
(paper 003, Eq. 2-14, Algorithm 1).

For every 2-D weight that is not a vocabulary matrix, in the paper's orientation
W in R^{d_in x d_out} (the PyTorch ``(out, in)`` weight transposed, so that R rotates
the input space as OFT does; ``side="out"`` rotates the output space instead):

1. targets: W_i (global, Eq. 9) or W_0 + tau_i^conf keeping only the columns
   (neurons) whose update opposes the mean update (conflict-aware, Eq. 10-11);
2. R_i = U V^T from SVD(W_i^target W_0^T) (Procrustes, Eq. 4/12);
3. Q_i = (R_i - I)(R_i + I)^{-1} (inverse Cayley, Eq. 5);
4. Q = c mean_i Q_i, c = sum_i ||Q_i|| / ||sum_i Q_i|| (Eq. 7-8); R = Cayley(Q) (Eq. 2);
5. rho_i = W_i - R_i W_0 (Eq. 13) merged by a Euclidean method (task arithmetic, TIES
   or DARE, residuals taken as task vectors on a zero base, TIES per tensor);
6. W = R W_0 + rho_merged (Eq. 14).

1-D tensors and vocabulary rows (embeddings, LM head) are merged in Euclidean space
by the residual method.

Bound, per tensor (task-arithmetic residuals): ||rho_i|| <= ||tau_i|| (R = I is feasible in
the Procrustes problem), so ||theta* - theta_0|| <= sum_i |w_i| max_i ||tau_i|| +
||(R - I) W_0||, and on matrices ||(R - I) W_0||_F <= 2 mean_i ||Q_i||_F ||W_0||_2 (Cayley:
R - I = 2 Q (I - Q)^{-1}, ||(I - Q)^{-1}||_2 <= 1 for skew Q; Eq. 7-8 make ||Q||_F the
mean of the ||Q_i||_F). The rotation part is not bounded by the task vectors alone: an
R_i with eigenvalue -1 (a reflection or half turn) has no generator (see
:func:`mmgrid.merge.geometry.inverse_cayley`). Merging PEFT OFT adapters directly in the Lie algebra:
:func:`mmgrid.merge.oft.merge_oft_adapters`.
"""

from __future__ import annotations

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
    paper = "OrthoMerge (paper 003) Eq. 2-14, Algorithm 1"
    Params = OrthoMergeParams

    def check_inputs(self, n: int) -> None:
        super().check_inputs(n)
        self._pipe = self._residual_pipeline(n)
        if self.params.residual_method == "dare":
            self.symmetric = False

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
        r_merged = geo.cayley(q)
        rhos = [w - r @ w0 for w, r in zip(ws, rs)]
        rho = pl.combine(self._pipe, name, rhos)
        return r_merged @ w0 + rho, float(torch.linalg.matrix_norm(q))
