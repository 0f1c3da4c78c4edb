"""OPCM, orthogonal projection-based continual merging (Tang, Yang, Shen & Du, "Merging
Models on the Fly Without Retraining: A Sequential Approach to Scalable Continual Model
Merging", arXiv 2501.09522, Sec. 3; FusionBench ``opcm``).

Inputs: the ordered sequence theta_1, ..., theta_T, base theta_0, tau_t = theta_t - theta_0.
The running (unscaled) merged task vector S_t of each tensor:

    S_1 = tau_1,
    S_t = S_{t-1} + P_{t-1}(tau_t),                                  (projected update)

where, for a 2-D weight, U Sigma V^T = SVD(S_{t-1}) (full U, V), r = the first index
at which sum_{j<=r} sigma_j / sum_j sigma_j exceeds ``energy`` (the paper's / FusionBench's
alpha), and P_{t-1}(tau) = U M V^T with M = U^T tau V whose diagonal and top-left r x r block
are set to 0: the part of tau_t that lies in the subspace the earlier checkpoints use is
removed, so the new update does not overwrite it. Other tensors (biases, norms,
vocabulary rows) take P = identity. Adaptive scaling then keeps the merged task vector's
norm at the mean of the inputs' (whole model):

    lambda_T = ||S_T|| / mean_t ||tau_t||,    theta* = theta_0 + S_T / lambda_T.

FusionBench rescales after every step and multiplies the previous lambda back in
(lambda_{t-1} * (S_{t-1} / lambda_{t-1}) = S_{t-1}), which is this recursion; the subspaces
of S_{t-1} and of S_{t-1} / lambda_{t-1} are the same. Memory: one running S per tensor,
constant in T. One input gives theta_1 exactly. Where S_{t-1} of a tensor is 0 there is
nothing to protect and P is the identity (FusionBench would take arbitrary singular
vectors there and zero a diagonal); where S_T is 0 over the whole model the result is theta_0.

Invariant (checked by the tests in place of a per-tensor bound, which the global rescale
does not give): ||theta* - theta_0|| over the whole model = mean_t ||tau_t||. Two passes:
the first (:meth:`prepare`) sums the norms, the second merges; each computes S_T per tensor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from mmgrid.merge.methods.base import Method, TensorView, ViewStream, check_range
from mmgrid.merge.methods.continual import is_matrix
from mmgrid.merge.methods.registry import register


@dataclass
class OpcmParams:
    """Parameters of ``opcm``.

    Attributes:
        energy: alpha of OPCM / FusionBench: the fraction of the running merge's
            singular-value mass whose top subspace is protected from the next update,
            in [0, 1) (0.5, FusionBench's default).
    """

    energy: float = 0.5

    def __post_init__(self) -> None:
        check_range("energy", self.energy, 0.0, 1.0, False, True, "OPCM protects the top subspace holding this fraction, e.g. energy=0.5")


def project_out(merged: torch.Tensor, tau: torch.Tensor, energy: float) -> torch.Tensor:
    """P(tau): tau without the components in the top subspace of ``merged`` (float64 in, out)."""
    if not bool(merged.any()):
        return tau.clone()
    u, s, vh = torch.linalg.svd(merged, full_matrices=True)
    frac = s.cumsum(0) / s.sum()
    over = (frac > energy).nonzero()
    r = int(over[0]) if over.numel() else 0  # FusionBench's argmax of (frac > alpha)
    m = u.T @ tau @ vh.T
    m.diagonal().zero_()
    m[:r, :r] = 0.0
    return u @ m @ vh


@register
class Opcm(Method):
    name = "opcm"
    pretty = "OPCM (continual, orthogonal projections)"
    paper = "Tang et al. 2025 (OPCM, arXiv 2501.09522) Sec. 3; FusionBench opcm"
    Params = OpcmParams
    symmetric = False

    @staticmethod
    def update_bound(p, n: int, numel: int) -> float | None:  # c of the docstring's bound
        return None  # no per-tensor bound: see the module docstring

    def __init__(self, params) -> None:
        super().__init__(params)
        self._factor: float | None = None

    def running(self, view: TensorView) -> tuple[torch.Tensor, list[float]]:
        """S_T of one tensor (float64) and the squared norms ||tau_t||^2 of its inputs."""
        taus = [d.double() for d in view.deltas()]
        sq = [float((t * t).sum()) for t in taus]
        s = taus[0].clone()
        for tau in taus[1:]:
            s += project_out(s, tau, self.params.energy) if is_matrix(view) else tau
        return s, sq

    def prepare(self, stream: ViewStream) -> None:
        sq_in: list[float] = []
        sq_out = 0.0
        for view in stream():
            s, sq = self.running(view)
            sq_in = sq if not sq_in else [a + b for a, b in zip(sq_in, sq)]
            sq_out += float((s * s).sum())
        mean_in = sum(math.sqrt(x) for x in sq_in) / max(len(sq_in), 1)
        norm_out = math.sqrt(sq_out)
        self._factor = mean_in / norm_out if norm_out > 0.0 else 0.0
        self.report["opcm"] = {"lambda": (norm_out / mean_in) if mean_in > 0.0 else None,
                               "mean_task_vector_norm": mean_in, "merged_norm_unscaled": norm_out}

    def merge_tensor(self, view: TensorView) -> torch.Tensor:
        assert self._factor is not None, "OPCM needs its first pass (prepare)"
        s, _ = self.running(view)
        return s.mul_(self._factor).float().add_(view.required_raw_base)
