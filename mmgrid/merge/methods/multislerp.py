"""Multi-SLERP: weighted barycentric interpolation of several models on the hypersphere
(mergekit's ``multislerp``, C. Goddard 2025, "multislerp" blog post; the tangent-space
average of Buss & Fillmore 2001, "Spherical averages and applications to spherical
splines and interpolation", ACM TOG 20(2), one step of their Sec. 3 iteration).

Per tensor, on the flattened vectors v_i = theta_i (or tau_i = theta_i - theta_0 when a
base is given: the sphere is then centred on the base), with weights w_i (divided by
their sum when ``normalize_weights``):

1. u_i = v_i / (||v_i|| + eps) on the unit sphere;
2. m = sum_i w_i u_i / ||sum_i w_i u_i|| (the weighted Euclidean mean, projected);
3. tangent vectors at m: g_i = u_i - <u_i, m> m; g = sum_i w_i g_i;
4. back to the sphere by the exponential map: p = cos(||g||') m + sin(||g||') g / ||g||',
   with ||g||' = ||g|| + eps;
5. theta* - centre = (sum_i w_i ||v_i||) p (the weighted norm).

Our reading: step 3 gives g = 0 in exact arithmetic (sum_i w_i <u_i, m> m = ||sum_i w_i
u_i|| m = sum_i w_i u_i), so p = m and theta* - centre = (sum_i w_i ||v_i||) m: the
weighted mean direction at the weighted mean norm. mmgrid computes that directly
(mergekit's g is rounding noise, ~1e-8 relative), with one accumulator per tensor
instead of a unit copy of every input.

One input gives that input. If ||sum_i w_i u_i|| < eps (weights balancing antipodal
inputs), two inputs are interpolated linearly, more raise MergeParamError (mergekit's
rules). eps = 1e-8.

Bound, per tensor, around the centre theta_0 (the base, or 0): g is orthogonal to m, so
||p||^2 = cos^2 + sin^2 (||g|| / ||g||')^2 <= 1, and |sum_i w_i ||v_i||| <=
sum_i |w_i| max_i ||v_i||: c = 1, mass sum_i |w_i| of the (normalized) weights.

Streaming (version 2): theta* - centre = sum_i k_i v_i with k_i = w_i / (||v_i|| + eps) *
(sum_j w_j ||v_j||) / ||sum_j w_j u_j||, and every norm there comes from the Gram matrix
G_ij = <v_i, v_j> (||sum_j a_j v_j||^2 = a^T G a). G is taken in a first streaming pass in
float64 (:class:`mmgrid.merge.methods.spherical.BlockedGram`: fixed blocks summed exactly, the
same for any chunking); the merge pass is then the linear combination of each tensor's own
coefficients (with a base: (1 - sum_i k_i) theta_0 + sum_i k_i theta_i), on the fast file pass
(chunks, never a whole tensor in float32). Version 1 built the mean direction from whole
float32 copies (3.1 GB for two models with a Qwen3-0.6B embedding, against 0.6 GB); the results
differ in the last bits, so stored multislerp merges of version 1 are recomputed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from mmgrid.merge.errors import MergeParamError
from mmgrid.merge.pipeline import Kernel
from mmgrid.merge.methods import bounds as bd
from mmgrid.merge.methods import spherical as sp
from mmgrid.merge.methods.base import Method, TensorView, ViewStream
from mmgrid.merge.methods.registry import register
from mmgrid.merge.methods.weights import Weights

EPS = 1e-8


@dataclass
class MultiSlerpParams(Weights):
    """Parameters of ``multislerp``: :class:`Weights` (1.0 each), and

    Attributes:
        normalize_weights: divide the weights by their sum (mergekit's default).
    """

    normalize_weights: bool = True


@register
class MultiSlerp(Method):
    name = "multislerp"
    pretty = "Multi-SLERP (weighted spherical barycentre)"
    paper = "mergekit multislerp (Goddard 2025); Buss & Fillmore 2001 Sec. 3"
    Params = MultiSlerpParams
    needs_base = False
    optional_base = True
    version = 2  # streaming statistics (module docstring)
    elementwise = True  # after prepare: each tensor is a linear combination with its own coefficients

    @staticmethod
    def update_bound(p, n: int, numel: int) -> float | None:  # c of the docstring's bound
        if not p.normalize_weights:
            return bd.mass(p, n)
        total = abs(sum(p.per_input(n)))
        return bd.mass(p, n) / total if total else math.inf  # weights summing to 0: no normalization

    def __init__(self, params) -> None:
        super().__init__(params)
        self._coefs: dict[str, tuple[float | None, list[float]]] = {}

    def weights(self, n: int) -> list[float]:
        w = list(self.params.per_input(n))
        if self.params.normalize_weights:
            total = sum(w)
            if abs(total) < 1e-12:
                raise MergeParamError(f"multislerp weights {w} sum to 0 and cannot be normalized; "
                                      "change them or set normalize_weights=false")
            w = [x / total for x in w]
        return w

    def check_inputs(self, n: int) -> None:
        super().check_inputs(n)
        self.weights(n)

    def coefs(self, name: str, gram: list[list[float]]) -> list[float]:
        """k_i of theta* - centre = sum_i k_i v_i for one tensor, from the Gram matrix of its v_i."""
        n = len(gram)
        if n == 1:
            return [1.0]
        w = self.weights(n)
        norms = [math.sqrt(max(gram[i][i], 0.0)) for i in range(n)]
        a = [wi / (r + EPS) for wi, r in zip(w, norms)]  # sum_i w_i u_i = sum_i a_i v_i
        mean_norm = math.sqrt(max(math.fsum(a[i] * gram[i][j] * a[j] for i in range(n) for j in range(n)), 0.0))
        if mean_norm < EPS:
            if n == 2:  # mergekit: linear interpolation of the two
                return list(w)
            raise MergeParamError(f"multislerp: tensor {name!r}: the weighted sum of the unit inputs is 0 "
                                  "(antipodal inputs with balancing weights); use other weights")
        # Steps 3-4 in exact arithmetic: sum_i w_i <u_i, m> = ||sum_i w_i u_i||, so g = 0 and the
        # exponential map returns m (cos(eps) = 1, sin(eps) / eps = 1 in float32).
        scale = sum(wi * r for wi, r in zip(w, norms)) / mean_norm
        return [ai * scale for ai in a]

    def _linear(self, ks: list[float]) -> tuple[float | None, list[float]]:
        return ((1.0 - sum(ks)) if self.needs_base else None, ks)

    def prepare(self, stream: ViewStream) -> None:
        acc: dict[str, sp.BlockedGram] = {}
        for view in stream():  # consecutive pieces of each tensor, in order
            vs = view.deltas() if view.raw_base is not None else view.raw
            acc.setdefault(view.name, sp.BlockedGram(len(vs))).add(vs)
        self._coefs = {name: self._linear(self.coefs(name, g.result())) for name, g in acc.items()}

    def kernel(self, n: int) -> Kernel:
        return Kernel(coefs=self._coefs)

    def merge_tensor(self, view: TensorView) -> torch.Tensor:
        # added vocabulary rows (a view of their own): their own Gram matrix and coefficients
        base = view.base if view.raw_base is not None else None
        vs = view.deltas() if base is not None else view.models
        g = sp.BlockedGram(len(vs))
        g.add(vs)
        ks = self.coefs(view.name, g.result())
        out = vs[0].clone()
        if ks[0] != 1.0:
            out.mul_(ks[0])
        for v, k in zip(vs[1:], ks[1:]):
            out.add_(v, alpha=k)
        return out.add_(base) if base is not None else out
