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
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mmgrid.merge.errors import MergeParamError
from mmgrid.merge.methods import spherical as sp
from mmgrid.merge.methods.base import Method, TensorView
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

    def merge_tensor(self, view: TensorView) -> torch.Tensor:
        base = view.base if view.raw_base is not None else None
        vs = view.deltas() if base is not None else view.models
        if len(vs) == 1:
            return vs[0].add_(base) if base is not None else vs[0].clone()
        w = self.weights(len(vs))
        norms = [sp.norm(v) for v in vs]
        mean = torch.zeros_like(vs[0])  # sum_i w_i u_i, without a unit copy of each input
        for wi, v, n in zip(w, vs, norms):
            mean.add_(v, alpha=wi / (n + EPS))
        mean_norm = sp.norm(mean)
        if mean_norm < EPS:
            if len(vs) == 2:  # mergekit: linear interpolation of the two
                out = vs[0] * w[0] + vs[1] * w[1]
                return out.add_(base) if base is not None else out
            raise MergeParamError(f"multislerp: tensor {view.name!r}: the weighted sum of the unit inputs is 0 "
                                  "(antipodal inputs with balancing weights); use other weights")
        # Steps 3-4 in exact arithmetic: sum_i w_i <u_i, m> = ||sum_i w_i u_i||, so g = 0 and the
        # exponential map returns m (cos(eps) = 1, sin(eps) / eps = 1 in float32).
        out = mean.mul_(sum(wi * n for wi, n in zip(w, norms)) / mean_norm)
        return out.add_(base) if base is not None else out
