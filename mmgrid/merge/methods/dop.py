"""DOP, dual orthogonal projections for data-free continual merging ("Continual Model
Merging without Data: Dual Projections for Balancing Stability and Plasticity",
NeurIPS 2025; FusionBench ``dop``), solved in closed form (our reading, below).

Inputs: the ordered sequence theta_1, ..., theta_T, base theta_0. The running merge
M_1 = theta_1; step t merges M_{t-1} (stability) with theta_t (plasticity). For a 2-D
weight, each of the two, X_i in {M_{t-1}, theta_t}, defines the subspaces of its task
vector tau_i = X_i - theta_0 = U_i S_i V_i^T, truncated to the top k_i singular triplets that
hold ``energy`` of sum_j s_j, and a loss that measures a candidate W against X_i inside
both of them (the "dual" projections, FusionBench's ``svd_proj_space="uv"``):

    L_i(W) = ||S_i U_i^T (W - X_i)||_F^2 + ||(W - X_i) V_i S_i||_F^2,
    M_t = argmin_W  a L_stab(W) + (1 - a) L_plas(W),       a = ``stability`` (FusionBench's alpha).

With P_i = U_i S_i^2 U_i^T and Q_i = V_i S_i^2 V_i^T the gradient vanishes where

    P W + W Q = C,   P = sum_i c_i P_i,  Q = sum_i c_i Q_i,  C = sum_i c_i (P_i X_i + X_i Q_i)

(a Sylvester equation; c = (a, 1 - a)). In the eigenbases P = E diag(p) E^T, Q = F diag(q) F^T
it is entrywise: (E^T W F)_ab = (E^T C F)_ab / (p_a + q_b). Where p_a + q_b = 0 the loss does
not see W; there M_t keeps the average (M_{t-1} + theta_t) / 2, the point FusionBench's
optimiser starts from. ``space="u"`` / ``"v"`` keep one of the two terms (Q = 0 / P = 0).
Every other tensor (biases, norms, vocabulary rows) is the average (M_{t-1} + theta_t) / 2,
as in FusionBench.

Our reading: FusionBench minimises the same loss by 200 Adam steps (lr 1e-4) from the
average, weighting the two losses by MGDA with an exponential moving average started at
alpha (decay 0.999, so the weights stay near alpha); mmgrid solves the fixed-weight
problem exactly, which is deterministic and needs no step size. The loss weights S (not
S^{1/2}, as FusionBench's docs write): its code multiplies by diag(s). Rank: FusionBench
keeps the singular triplets *before* the one at which the cumulative share reaches its
epsilon; mmgrid keeps the smallest k that reaches ``energy`` (or exactly ``rank``).

No per-tensor norm bound holds in general: the solution operator (L_s + L_p)^+ L_s (L_i the
weighted maps D -> c_i (P_i D + D Q_i)) has eigenvalues in [0, 1] but is not a contraction when
the two subspaces are not aligned. The tests check what holds instead: the optimality condition
(the gradient vanishes at the result), identical inputs (the result is that input), one input,
and aligned task vectors (shared singular vectors), where each singular value of the result is
the a-weighted mean of the two weighted by s^2 (hand-computed case).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from mmgrid.merge.errors import MergeParamError
from mmgrid.merge.methods.base import Method, TensorView, check_range
from mmgrid.merge.methods.continual import energy_rank, is_matrix
from mmgrid.merge.methods.registry import register

NULL = 1e-12  # p_a + q_b below NULL * max: a direction the loss does not see


@dataclass
class DopParams:
    """Parameters of ``dop``.

    Attributes:
        stability: a, the weight of the running merge's loss (FusionBench's alpha), in [0, 1] (0.8).
        energy: share of sum_j s_j the kept singular triplets of each task vector hold, in (0, 1]
            (0.99999, FusionBench's svd_epsilon).
        rank: keep exactly this many triplets instead (>= 1; None: by ``energy``).
        space: uv (both projections, default) | u (left) | v (right).
    """

    stability: float = 0.8
    energy: float = 0.99999
    rank: int | None = None
    space: Literal["uv", "u", "v"] = "uv"

    def __post_init__(self) -> None:
        check_range("stability", self.stability, 0.0, 1.0, False, False, "the weight of the merged-so-far loss, e.g. stability=0.8")
        check_range("energy", self.energy, 0.0, 1.0, True, False, "the share of singular-value mass kept, e.g. energy=0.99999")
        if self.rank is not None and self.rank < 1:
            raise MergeParamError(f"parameter rank={self.rank} must be >= 1 (or left out to use energy)")


def subspace(tau: torch.Tensor, energy: float, rank: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(P, Q) = (U S^2 U^T, V S^2 V^T) of the truncated SVD of ``tau`` (float64)."""
    u, s, vh = torch.linalg.svd(tau, full_matrices=False)
    k = min(rank, s.numel()) if rank is not None else energy_rank(s, energy)
    u, s2, v = u[:, :k], s[:k] ** 2, vh[:k].T
    return (u * s2) @ u.T, (v * s2) @ v.T


def dop_step(base: torch.Tensor, stab: torch.Tensor, plas: torch.Tensor, p: DopParams) -> torch.Tensor:
    """argmin_W a L_stab + (1 - a) L_plas for one 2-D weight (all float64)."""
    c = (p.stability, 1.0 - p.stability)
    pq = [subspace(x - base, p.energy, p.rank) for x in (stab, plas)]
    if p.space == "u":
        pq = [(pp, torch.zeros_like(qq)) for pp, qq in pq]
    elif p.space == "v":
        pq = [(torch.zeros_like(pp), qq) for pp, qq in pq]
    big_p = c[0] * pq[0][0] + c[1] * pq[1][0]
    big_q = c[0] * pq[0][1] + c[1] * pq[1][1]
    rhs = sum(ci * (pp @ x + x @ qq) for ci, (pp, qq), x in zip(c, pq, (stab, plas)))
    pe, e = torch.linalg.eigh(big_p)
    qe, f = torch.linalg.eigh(big_q)
    pe, qe = pe.clamp(min=0.0), qe.clamp(min=0.0)
    denom = pe[:, None] + qe[None, :]
    seen = denom > NULL * max(float(denom.max()), 1e-300)
    start = e.T @ ((stab + plas) / 2) @ f
    sol = torch.where(seen, (e.T @ rhs @ f) / torch.where(seen, denom, 1.0), start)
    return e @ sol @ f.T


@register
class Dop(Method):
    name = "dop"
    pretty = "DOP (continual, dual orthogonal projections)"
    paper = "Continual Model Merging without Data: Dual Projections (NeurIPS 2025); FusionBench dop"
    Params = DopParams
    symmetric = False

    @staticmethod
    def update_bound(p, n: int, numel: int) -> float | None:  # c of the docstring's bound
        return None  # no per-tensor bound: see the module docstring

    def merge_tensor(self, view: TensorView) -> torch.Tensor:
        if not is_matrix(view):
            merged = view.models[0].clone()
            for x in view.models[1:]:
                merged.add_(x).mul_(0.5)
            return merged
        base = view.required_base.double()
        merged = view.models[0].double()
        for x in view.models[1:]:
            merged = dop_step(base, merged, x.double(), self.params)
        return merged.float()
