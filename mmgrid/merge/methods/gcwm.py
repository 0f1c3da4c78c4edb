"""GCWM: geometry-conflict-gated Wasserstein merging -- mmgrid's documented reading.

The seed paper (paper 001, "Geometry Conflict") states the method at abstract level:
per-update covariance geometry, a state-relative geometry conflict as a forgetting
signal, a shared metric from Gaussian (Bures-)Wasserstein barycenters, and a
conflict-gated geometry-aware correction. The authors' public code (read, not copied)
uses low-rank right-singular covariances, a W2 barycenter, a normalized Bures conflict
and a per-layer optimiser; mmgrid replaces the optimiser by its closed-form minimiser.
Our reading, for every 2-D weight that is not a vocabulary matrix:

1. Updates tau_i = W_i - W_0 (rows x cols). Geometry of tau_i: the zero-mean Gaussian
   whose covariance is the (trace-normalized) second moment of its rows,
   Sigma_i = tau_i^T tau_i, taken in the span U (cols x k) of the union of each
   update's top right-singular vectors (r <= ``rank``, capturing ``energy`` of the
   spectrum): B_i = U^T Sigma_i U / tr(.) + ``reg`` I.
2. State: the plain task-arithmetic update tau_TA = sum_i lambda_i tau_i (the state the
   model would reach without correction), with covariance B_state built the same way.
3. Conflict of update i against the state: the normalized squared Bures-Wasserstein
   distance c_i = d_BW^2(B_i, B_state) / (tr B_i + tr B_state), in [0, 1]; the layer's
   score is the lambda-weighted mean of the c_i. All scores are reported in
   ``report["conflict"]`` (layer -> score, per-input scores, branch taken).
4. Shared metric: M = the Bures-Wasserstein barycenter of {B_i} (fixed-point
   iteration, :func:`mmgrid.merge.geometry.bw_barycenter`).
5. Gate: score > ``threshold`` -> the geometry-aware combination; otherwise plain task
   arithmetic (``gate="hard"``, the issue's rule). ``gate="soft"`` blends them with
   the authors' sigmoid weight a = sigmoid(sharpness (score - threshold)).
6. Geometry-aware combination: whiten the updates' in-span coordinates
   z_i = tau_i U M^{-1/2}; take the minimiser of the authors' relation loss
   sum_i ||(m - z_i) z_i^T||^2 / ||z_i||^2, i.e. m = (sum_i z_i G_i / n_i)
   (sum_i G_i / n_i + eps I)^{-1} with G_i = z_i^T z_i, n_i = ||z_i||^2; recolor
   m M^{1/2} U^T, scale by sum_i lambda_i (so identical updates give task arithmetic's
   result), and add the task-arithmetic sum of the out-of-span remainders.

1-D tensors and vocabulary rows (embeddings, LM head: the authors skip them) use task
arithmetic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

from mmgrid.merge import geometry as geo
from mmgrid.merge import ops
from mmgrid.merge.methods.base import Method, TensorView, check_range, input_weights, register


@dataclass
class GcwmParams:
    """Parameters of ``gcwm``.

    Attributes:
        lambdas: task-arithmetic weights, one per input (default 1.0).
        threshold: conflict score above which the geometry-aware combination is used, in [0, 1].
        gate: hard (threshold) | soft (sigmoid blend).
        sharpness: slope of the soft gate.
        rank: at most this many singular directions per update.
        energy: fraction of spectral energy those directions capture, in (0, 1].
        reg: ridge added to the normalized covariances.
        barycenter_iters: fixed-point iterations of the barycenter.
    """

    lambdas: list[float] | None = None
    threshold: float = 0.12
    gate: Literal["hard", "soft"] = "hard"
    sharpness: float = 12.0
    rank: int = 8
    energy: float = 0.9
    reg: float = 1e-6
    barycenter_iters: int = 50

    def __post_init__(self) -> None:
        check_range("threshold", self.threshold, 0.0, 1.0, False, False, "a normalized conflict score")
        check_range("energy", self.energy, 0.0, 1.0, True, False, "e.g. energy=0.9")
        check_range("rank", self.rank, 1, 1 << 20, False, False, "e.g. rank=8")


@register
class Gcwm(Method):
    name = "gcwm"
    pretty = "GCWM (geometry-conflict-gated Wasserstein merging)"
    paper = "Geometry Conflict (paper 001, abstract); our reading in docs/merging.md"
    Params = GcwmParams

    def check_inputs(self, n: int) -> None:
        super().check_inputs(n)
        self._w = input_weights(self.params.lambdas, None, n)
        self.report.setdefault("conflict", {})

    def merge_tensor(self, view: TensorView) -> torch.Tensor:
        taus = view.deltas()
        plain = ops.weighted_sum(taus, self._w)
        if view.base.ndim != 2 or view.vocab or min(view.base.shape) < 2 or float(plain.abs().sum()) == 0.0:
            return plain.add_(view.base)
        score, per_input, basis, covs = self.conflict(taus, plain)
        a = self.gate(score)
        entry = {"score": score, "inputs": per_input, "geometry_weight": a,
                 "branch": "geometry" if a >= 0.5 else "task_arithmetic"}
        self.report["conflict"][view.name] = entry
        if a == 0.0:
            return plain.add_(view.base)
        geom = self.geometry_combination(taus, basis, covs)
        return (a * geom + (1.0 - a) * plain).add_(view.base)

    def gate(self, score: float) -> float:
        """Weight of the geometry-aware branch (1/0 for the hard gate)."""
        p = self.params
        if p.gate == "hard":
            return 1.0 if score > p.threshold else 0.0
        return 1.0 / (1.0 + math.exp(-p.sharpness * (score - p.threshold)))

    def conflict(self, taus: list[torch.Tensor], state: torch.Tensor):
        """Layer score, per-input scores, the shared span U and the updates' covariances."""
        p = self.params
        bases = [geo.right_basis(t, p.rank, p.energy) for t in taus if float(t.abs().sum()) > 0]
        basis = geo.union_basis(bases)
        covs = [self._cov(t, basis) for t in taus]
        cs = self._cov(state, basis)
        per = [geo.bures_distance_sq(c, cs) / float(torch.trace(c) + torch.trace(cs)) for c in covs]
        wsum = sum(abs(w) for w in self._w) or 1.0
        return sum(abs(w) * s for w, s in zip(self._w, per)) / wsum, per, basis, covs

    def _cov(self, t: torch.Tensor, basis: torch.Tensor) -> torch.Tensor:
        z = t.double() @ basis
        c = z.T @ z
        tr = float(torch.trace(c))
        c = c / tr if tr > 0 else c
        return c + self.params.reg * torch.eye(c.shape[0], dtype=c.dtype)

    def geometry_combination(self, taus: list[torch.Tensor], basis: torch.Tensor, covs: list[torch.Tensor]) -> torch.Tensor:
        """Whiten in the barycentric metric, closed-form relation merge, recolor (step 6)."""
        p = self.params
        nonneg = [max(w, 0.0) for w in self._w]
        m = geo.bw_barycenter(covs, nonneg if sum(nonneg) > 0 else [1.0] * len(covs), p.barycenter_iters)
        whiten, color = geo.inv_sqrtm_psd(m), geo.sqrtm_psd(m)
        zs = [t.double() @ basis @ whiten for t in taus]
        k = basis.shape[1]
        lhs = torch.zeros(k, k, dtype=torch.float64)
        rhs = torch.zeros(taus[0].shape[0], k, dtype=torch.float64)
        for z in zs:
            n = float((z * z).sum())
            if n == 0.0:
                continue
            g = z.T @ z / n
            lhs += g
            rhs += z @ g
        eps = 1e-9 * float(torch.trace(lhs)) + 1e-30
        merged_z = torch.linalg.solve(lhs + eps * torch.eye(k, dtype=lhs.dtype), rhs.T).T
        inside = merged_z @ color @ basis.T * sum(self._w)
        outside = ops.weighted_sum([t.double() - (t.double() @ basis) @ basis.T for t in taus], self._w)
        return (inside + outside).float()
