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

Streaming (version 2): every iterate u is a linear combination sum_j c_j u_j of the unit
inputs (the mean, the log map's T and the exponential map only add and scale them), so the
whole iteration runs on the coefficients c, with every inner product and norm taken from the
inputs' Gram matrix G_ij = <theta_i, theta_j> (<u, u_i> = (U c)_i, ||T||^2 = s^T U s,
U_ij = G_ij / (r_i r_j)). G comes from a first streaming pass in float64
(:class:`mmgrid.merge.methods.spherical.BlockedGram`: fixed blocks summed exactly, the same for
any chunking); the merge pass is then theta* = sum_j k_j theta_j with k_j = (sum_i w_i r_i)
c_j / r_j, on the fast file pass (chunks, never a whole tensor in float32). Version 1 iterated
on whole float32 tensors (one float32 copy per input, a unit copy per input and the iterate:
4.6 GB and 46 s for two models with a Qwen3-0.6B embedding, against 0.6 GB and about 5 s);
the results differ in the last bits (float64 inner products instead of float32 iterates),
so stored karcher merges of version 1 are recomputed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from mmgrid.merge.errors import MergeParamError
from mmgrid.merge.pipeline import Kernel
from mmgrid.merge.methods import spherical as sp
from mmgrid.merge.methods.base import MAX_ITERATIONS, Method, TensorView, ViewStream, check_range
from mmgrid.merge.methods.registry import register
from mmgrid.merge.methods.weights import Weights


@dataclass
class KarcherParams(Weights):
    """Parameters of ``karcher``: :class:`Weights` (equal; >= 0 with a positive sum), and

    Attributes:
        max_iter: iterations of the fixed-point update, in [0, MAX_ITERATIONS].
        tol: stop when ||T|| < tol; inputs with norm <= tol have no direction.
    """

    max_iter: int = 10
    tol: float = 1e-5

    def __post_init__(self) -> None:
        if not isinstance(self.max_iter, int) or not 0 <= self.max_iter <= MAX_ITERATIONS:
            raise MergeParamError(f"karcher max_iter={self.max_iter!r} must be an integer in [0, {MAX_ITERATIONS}] "
                                  "(each iteration is a pass over the input directions); e.g. max_iter=10")
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
    bound_origin = "origin"
    needs_base = False
    version = 2  # streaming statistics, the iteration on coefficients (module docstring)
    elementwise = True  # after prepare: each tensor is a linear combination with its own coefficients

    @staticmethod
    def update_bound(p, n: int, numel: int) -> float | None:  # c of the docstring's bound
        return 1.0

    def __init__(self, params) -> None:
        super().__init__(params)
        self._coefs: dict[str, tuple[None, list[float]]] = {}

    def weights(self, n: int) -> list[float]:
        w = self.params.per_input(n)
        return [x / sum(w) for x in w]

    def check_inputs(self, n: int) -> None:
        super().check_inputs(n)
        self.weights(n)

    def coefs(self, gram: list[list[float]]) -> list[float]:
        """k_j of theta* = sum_j k_j theta_j for one tensor, from its inputs' Gram matrix (the
        module docstring's iteration, run on the coefficients of the unit inputs)."""
        n = len(gram)
        if n == 1:
            return [1.0]
        tol, w = self.params.tol, self.weights(n)
        norms = [math.sqrt(max(gram[i][i], 0.0)) for i in range(n)]
        valid = [i for i, r in enumerate(norms) if r > tol]
        if not valid:
            return [0.0] * n
        asum = sum(w[i] for i in valid)
        a = [w[i] / asum for i in valid]
        m = len(valid)
        unit = [[gram[i][j] / (norms[i] * norms[j]) for j in valid] for i in valid]  # U = <u_i, u_j>

        def inner(x: list[float], y: list[float]) -> float:
            return math.fsum(x[p] * unit[p][q] * y[q] for p in range(m) for q in range(m))

        def size(x: list[float]) -> float:
            return math.sqrt(max(inner(x, x), 0.0))

        c = list(a)  # u = sum_i a_i u_i
        nu = size(c)
        c = [1.0] + [0.0] * (m - 1) if nu < tol else [x / nu for x in c]
        for _ in range(self.params.max_iter):
            uc = [math.fsum(unit[p][q] * c[q] for q in range(m)) for p in range(m)]  # <u_p, u>
            step = [0.0] * m
            for p in range(m):
                cos = max(-1.0, min(1.0, uc[p]))
                omega = math.acos(cos)
                if omega < tol:
                    continue
                k = a[p] * omega / math.sin(omega)
                step[p] += k  # + k u_p
                for q in range(m):
                    step[q] -= k * cos * c[q]  # - k cos u
            ns = size(step)
            if ns < tol:
                break
            c = [math.cos(ns) * x + math.sin(ns) / ns * y for x, y in zip(c, step)]
            nu = size(c)
            if nu > tol:
                c = [x / nu for x in c]
        scale = sum(wi * r for wi, r in zip(w, norms))
        out = [0.0] * n
        for p, i in enumerate(valid):
            out[i] = scale * c[p] / norms[i]
        return out

    def prepare(self, stream: ViewStream) -> None:
        acc: dict[str, sp.BlockedGram] = {}
        for view in stream():  # consecutive pieces of each tensor, in order
            acc.setdefault(view.name, sp.BlockedGram(len(view.raw))).add(view.raw)
        self._coefs = {name: (None, self.coefs(g.result())) for name, g in acc.items()}

    def kernel(self, n: int) -> Kernel:
        return Kernel(coefs=self._coefs)

    def merge_tensor(self, view: TensorView) -> torch.Tensor:
        # added vocabulary rows (a view of their own): their own Gram matrix and coefficients
        g = sp.BlockedGram(len(view.raw))
        g.add(view.raw)
        ks = self.coefs(g.result())
        ms = view.models
        out = ms[0].clone()
        if ks[0] != 1.0:
            out.mul_(ks[0])
        for x, k in zip(ms[1:], ks[1:]):
            out.add_(x, alpha=k)
        return out
