"""NuSLERP: mergekit's generalised SLERP (``nuslerp``; Shoemake 1985 Sec. 3 for the arc).

Two inputs with weights (w_0, w_1); t = w_1 / (w_0 + w_1) (0.5 when the sum is 0, as in
mergekit). The vectors v_0, v_1 are the inputs, or with a base their task vectors
tau_i = theta_i - theta_0 (then theta* = theta_0 + nuslerp(tau_0, tau_1): mergekit's
base-model mode). They are slerped

* ``flatten=True`` (default): as one flattened vector per tensor;
* ``flatten=False``: row by row (vectors along the last dimension), or with
  ``row_wise=True`` column by column (vectors along dimension 0). As in mergekit,
  ``row_wise`` has no effect while ``flatten`` is true.

Per vector, with cos(Omega) = <v_0, v_1> / (max(||v_0||, 1e-7) max(||v_1||, 1e-7)):

    nuslerp(t) = (sin((1 - t) Omega) v_0 + sin(t Omega) v_1) / sin(Omega),

and (1 - t) v_0 + t v_1 where |sin Omega| < 1e-8 (colinear, mergekit's rule). Our
reading where mergekit is ill-conditioned: nearly antiparallel vectors (cos Omega <
-0.9995, slerp's DOT_THRESHOLD) are interpolated linearly too (the great circle through
antipodes is not unique; mergekit divides by sin(Omega) ~ 1e-7 there).

Bound, per tensor, around the sphere's centre (theta_0 = the base, or 0 without one):
weights are >= 0, so t in [0, 1] and both coefficients are >= 0 with sum
cos((1 - 2t) Omega / 2) / cos(Omega / 2) <= 1 / cos(Omega / 2) <= sqrt(2 / 0.0005), per
vector; summing the squared rows gives the same factor for the tensor:
c = 63.25 (slerp's), mass 1.

Streaming (computation version 2, ``flatten=True``): a first pass sums each tensor's dot
product and norms of v_0, v_1 over fixed blocks, exactly
(:class:`mmgrid.merge.methods.spherical.BlockedDots`); the merge pass is then the linear
s_0 v_0 + s_1 v_1 (plus the base) with each tensor's own coefficients on the fast file pass.
Version 1 computed them from whole float32 tensors; stored version-1 merges are recomputed.
``flatten=False`` (per row or column) keeps the whole-tensor path.
"""

from __future__ import annotations

from dataclasses import dataclass

import math

import torch

from mmgrid.merge.errors import MergeParamError
from mmgrid.merge.methods import spherical as sp
from mmgrid.merge.methods.base import Method, TensorView, ViewStream
from mmgrid.merge.methods.registry import register
from mmgrid.merge.methods.slerp import BOUND_C, DOT_THRESHOLD
from mmgrid.merge.methods.weights import Weights
from mmgrid.merge.pipeline import Kernel

SIN_EPS = 1e-8  # mergekit's colinearity threshold on |sin Omega|
NORM_EPS = 1e-7  # mergekit's floor of a vector's norm


@dataclass
class NuSlerpParams(Weights):
    """Parameters of ``nuslerp``: :class:`Weights` of the two inputs (1.0 each; >= 0;
    ``alpha`` gives (alpha, 1 - alpha), i.e. t = 1 - alpha), and

    Attributes:
        flatten: slerp each tensor as one flattened vector (mergekit's ``nuslerp_flatten``).
        row_wise: with ``flatten=False``, slerp columns (dimension 0) instead of rows
            (mergekit's ``nuslerp_row_wise``).
    """

    flatten: bool = True
    row_wise: bool = False

    def __post_init__(self) -> None:
        if self.weights is not None and any(w < 0 for w in self.weights):
            raise MergeParamError(f"nuslerp weights {self.weights} must be >= 0 "
                                  "(t = w_1 / (w_0 + w_1) stays in [0, 1])")
        if self.alpha is not None and not 0.0 <= self.alpha <= 1.0:
            raise MergeParamError(f"nuslerp alpha={self.alpha} is outside [0, 1]")


def nuslerp_rows(t: float, v0: torch.Tensor, v1: torch.Tensor) -> torch.Tensor:
    """Slerp ``v0``, ``v1`` (float32) along their last dimension at ``t`` (module docstring)."""
    n0 = sp.row_dots(v0, v0).sqrt_().clamp_(min=NORM_EPS)
    n1 = sp.row_dots(v1, v1).sqrt_().clamp_(min=NORM_EPS)
    cos = (sp.row_dots(v0, v1) / (n0 * n1)).clamp(-1.0, 1.0)
    omega = torch.acos(cos)
    sin = torch.sin(omega)
    linear = (sin.abs() < SIN_EPS) | (cos < -DOT_THRESHOLD)
    safe = torch.where(linear, torch.ones_like(sin), sin)
    s0 = torch.where(linear, torch.full_like(sin, 1.0 - t), torch.sin((1.0 - t) * omega) / safe)
    s1 = torch.where(linear, torch.full_like(sin, t), torch.sin(t * omega) / safe)
    return v0 * s0.float().unsqueeze(-1) + v1 * s1.float().unsqueeze(-1)


@register
class NuSlerp(Method):
    name = "nuslerp"
    pretty = "NuSLERP (weighted, row-wise or task-vector SLERP)"
    paper = "mergekit nuslerp; Shoemake 1985 Sec. 3"
    Params = NuSlerpParams
    needs_base = False
    optional_base = True
    symmetric = True  # swapping the inputs swaps their weights: t -> 1 - t on the swapped pair
    min_inputs = 2
    max_inputs = 2

    @staticmethod
    def update_bound(p, n: int, numel: int) -> float | None:  # c of the docstring's bound
        return BOUND_C

    def t(self) -> float:
        w0, w1 = self.params.per_input(2)
        return 0.5 if abs(w0 + w1) < 1e-6 else w1 / (w0 + w1)

    version = 2  # streaming statistics with flatten=True (module docstring)

    def __init__(self, params) -> None:
        super().__init__(params)
        self._coefs: dict[str, tuple[float | None, list[float]]] = {}

    def check_inputs(self, n: int) -> None:
        super().check_inputs(n)
        self.params.per_input(n)

    @property
    def elementwise(self) -> bool:
        return self.params.flatten  # per tensor: linear after the first pass

    def coefs(self, dot: float, n0: float, n1: float) -> tuple[float, float]:
        """(s_0, s_1) of one flattened vector pair (the rules of :func:`nuslerp_rows`)."""
        t = self.t()
        cos = min(1.0, max(-1.0, dot / (max(n0, NORM_EPS) * max(n1, NORM_EPS))))
        omega = math.acos(cos)
        sin = math.sin(omega)
        if abs(sin) < SIN_EPS or cos < -DOT_THRESHOLD:
            return 1.0 - t, t
        return math.sin((1.0 - t) * omega) / sin, math.sin(t * omega) / sin

    def prepare(self, stream: ViewStream) -> None:
        if not self.params.flatten:
            return
        acc: dict[str, sp.BlockedDots] = {}
        for view in stream():  # consecutive pieces of each tensor, in order
            v0, v1 = view.deltas() if view.raw_base is not None else view.raw
            acc.setdefault(view.name, sp.BlockedDots()).add(v0, v1)
        self._coefs.clear()
        for name, a in acc.items():
            s0, s1 = self.coefs(*a.result())
            self._coefs[name] = ((1.0 - s0 - s1) if self.needs_base else None, [s0, s1])

    def kernel(self, n: int):
        return Kernel(coefs=self._coefs) if self.params.flatten else None

    def merge_tensor(self, view: TensorView) -> torch.Tensor:
        base = view.base if view.raw_base is not None else None
        v0, v1 = view.deltas() if base is not None else view.models
        shape = v0.shape
        p = self.params
        if p.flatten:  # added vocabulary rows (a view of their own): their own coefficients
            a = sp.BlockedDots()
            a.add(v0, v1)
            s0, s1 = self.coefs(*a.result())
            out = v0.mul(s0).add_(v1, alpha=s1)
        elif v0.ndim < 2:
            out = nuslerp_rows(self.t(), v0.reshape(1, -1), v1.reshape(1, -1)).reshape(shape)
        elif p.row_wise:
            out = nuslerp_rows(self.t(), v0.transpose(0, -1), v1.transpose(0, -1)).transpose(0, -1)
        else:
            out = nuslerp_rows(self.t(), v0.reshape(-1, shape[-1]), v1.reshape(-1, shape[-1])).reshape(shape)
        return out.add_(base) if base is not None else out.contiguous()
