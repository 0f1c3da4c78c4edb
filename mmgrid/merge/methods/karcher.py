"""Karcher mean: the Riemannian centre of mass of the models' directions on the unit
sphere, scaled by their weighted norm (Karcher 1977, "Riemannian center of mass and
mollifier smoothing", CPAM 30(5); the fixed-point iteration of Buss & Fillmore 2001,
ACM TOG 20(2), Sec. 3; mergekit's ``karcher``).

Per tensor, flattened: r_i = ||theta_i||, u_i = theta_i / r_i for the inputs with
r_i > tol; a_i their weights renormalized to sum 1. The mean direction u minimises
sum_i a_i d(u, u_i)^2 (d the great-circle distance); from the projected Euclidean mean
u = sum_i a_i u_i / ||.|| (or u_1 if that is below tol), repeat at most ``max_iter`` times:

    T = sum_{i: Omega_i >= tol} a_i Omega_i / sin(Omega_i) (u_i - cos(Omega_i) u),
        cos(Omega_i) = <u, u_i>                     (the Riemannian log map, averaged)
    stop if ||T|| < tol; else u <- cos(||T||) u + sin(||T||) T / ||T||, renormalized
                                                    (the exponential map)

theta* = (sum_i w_i r_i) u over all inputs (zero-norm ones included), w_i the weights
divided by their sum. One input gives that input; identical inputs give it (T = 0).
mergekit weighs the inputs equally (our default) and takes no base; a base given here
is not used.

Bound, per tensor, around the sphere's centre theta_0 = 0: ||u|| = 1 and
sum_i w_i r_i <= max_i r_i (non-negative weights summing to 1): c = 1, mass 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from mmgrid.merge.errors import MergeParamError
from mmgrid.merge.methods import spherical as sp
from mmgrid.merge.methods.base import Method, TensorView, check_range
from mmgrid.merge.methods.registry import register
from mmgrid.merge.methods.weights import Weights


@dataclass
class KarcherParams(Weights):
    """Parameters of ``karcher``: :class:`Weights` (equal; >= 0 with a positive sum), and

    Attributes:
        max_iter: iterations of the fixed-point update (>= 0).
        tol: stop when ||T|| < tol; inputs with norm <= tol have no direction.
    """

    max_iter: int = 10
    tol: float = 1e-5

    def __post_init__(self) -> None:
        if self.max_iter < 0:
            raise MergeParamError(f"karcher max_iter={self.max_iter} must be >= 0")
        check_range("tol", self.tol, 0.0, 1.0, True, True, "e.g. tol=1e-5")
        if self.weights is not None and (any(w < 0 for w in self.weights) or sum(self.weights) <= 0):
            raise MergeParamError(f"karcher weights {self.weights} must be >= 0 with a positive sum")
        if self.alpha is not None and not 0.0 <= self.alpha <= 1.0:
            raise MergeParamError(f"karcher alpha={self.alpha} is outside [0, 1]")


@register
class Karcher(Method):
    name = "karcher"
    pretty = "Karcher (Riemannian) mean on the sphere"
    paper = "Karcher 1977; Buss & Fillmore 2001 Sec. 3; mergekit karcher"
    Params = KarcherParams
    needs_base = False

    def weights(self, n: int) -> list[float]:
        w = self.params.per_input(n)
        return [x / sum(w) for x in w]

    def check_inputs(self, n: int) -> None:
        super().check_inputs(n)
        self.weights(n)

    def merge_tensor(self, view: TensorView) -> torch.Tensor:
        ms = view.models
        if len(ms) == 1:
            return ms[0].clone()
        tol, w = self.params.tol, self.weights(len(ms))
        norms = [sp.norm(m) for m in ms]
        valid = [i for i, r in enumerate(norms) if r > tol]
        if not valid:
            return torch.zeros_like(ms[0])
        asum = sum(w[i] for i in valid)
        a = [w[i] / asum for i in valid]
        units = [ms[i] / norms[i] for i in valid]
        u = torch.zeros_like(units[0])
        for ai, ui in zip(a, units):
            u.add_(ui, alpha=ai)
        nu = sp.norm(u)
        u = units[0].clone() if nu < tol else u.div_(nu)
        for _ in range(self.params.max_iter):
            step = torch.zeros_like(u)
            for ai, ui in zip(a, units):
                cos = max(-1.0, min(1.0, sp.dot(u, ui)))
                omega = math.acos(cos)
                if omega < tol:
                    continue
                step.add_(ui, alpha=ai * omega / math.sin(omega)).add_(u, alpha=-ai * omega / math.sin(omega) * cos)
            ns = sp.norm(step)
            if ns < tol:
                break
            u = u.mul_(math.cos(ns)).add_(step, alpha=math.sin(ns) / ns)
            nu = sp.norm(u)
            if nu > tol:
                u.div_(nu)
        return u.mul_(sum(wi * r for wi, r in zip(w, norms)))
