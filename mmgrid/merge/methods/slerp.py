"""SLERP: spherical linear interpolation of two models, tensor by tensor (Shoemake 1985,
"Animating rotation with quaternion curves", SIGGRAPH, Sec. 3; mergekit's ``slerp``).

Inputs [A, B] (mergekit's ``base_model`` is A); per tensor, on the flattened weights
v_0 = A, v_1 = B, with u_i = v_i / ||v_i|| (v_i kept as is when ||v_i|| <= eps = 1e-8) and
cos(Omega) = <u_0, u_1>:

    slerp(t) = sin((1 - t) Omega) / sin(Omega) v_0 + sin(t Omega) / sin(Omega) v_1,

and, when the two are nearly colinear (|cos Omega| > 0.9995, mergekit's DOT_THRESHOLD,
antiparallel included), the linear (1 - t) v_0 + t v_1. t = 0 gives A and t = 1 gives B
exactly (the coefficients are then 1 and 0). The norms are not interpolated: the
coefficients act on the unnormalized tensors, as in mergekit.

Bound, per tensor, around the sphere's centre theta_0 = 0 (no base: ||theta*|| <= c
max_i ||theta_i||, weight mass (1 - t) + t = 1): both coefficients are >= 0 and
s_0 + s_1 = cos((1 - 2t) Omega / 2) / cos(Omega / 2) <= 1 / cos(Omega / 2); the arc is
only taken for cos Omega >= -0.9995, so cos(Omega / 2) >= sqrt((1 - 0.9995) / 2) and
c = sqrt(2 / 0.0005) = 63.25 (the lerp branch has c = 1). On inputs at most 90 degrees
apart the factor is <= sqrt(2).

Streaming (version 2): the dot product and the norms of each tensor are taken in a first pass
over the inputs in chunks (:class:`mmgrid.merge.methods.spherical.BlockedDots`: fixed blocks,
summed exactly, so the statistics do not depend on how the tensor is cut); the merge pass is
then the linear s_0 A + s_1 B of each tensor's own coefficients, on the fast file pass (chunks,
never a whole tensor in float32). Version 1 took the statistics from whole float32 copies
(chunks of 2^20 entries); the coefficients may differ in the last bits, so stored slerp merges
of version 1 are recomputed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from mmgrid.merge.methods import spherical as sp
from mmgrid.merge.methods.base import Method, TensorView, ViewStream, check_range
from mmgrid.merge.methods.registry import register
from mmgrid.merge.pipeline import Kernel

DOT_THRESHOLD = 0.9995  # |cos Omega| above this: linear interpolation (mergekit's constant)
EPS = 1e-8
BOUND_C = math.sqrt(2.0 / (1.0 - DOT_THRESHOLD))  # 1 / cos(Omega_max / 2), see the module docstring


@dataclass
class SlerpParams:
    """Parameters of ``slerp``.

    Attributes:
        t: the interpolation factor in [0, 1]: 0 gives the first input, 1 the second
            (mergekit requires it; mmgrid's default is the midpoint).
    """

    t: float = 0.5

    def __post_init__(self) -> None:
        check_range("t", self.t, 0.0, 1.0, False, False, "t=0 gives the first input, t=1 the second")


def slerp_coefs(t: float, v0: torch.Tensor, v1: torch.Tensor) -> tuple[float, float]:
    """(s_0, s_1) of slerp(t) = s_0 v_0 + s_1 v_1 on the flattened tensors (module docstring)."""
    acc = sp.BlockedDots()
    acc.add(v0, v1)
    return coefs_from(t, *acc.result())


def coefs_from(t: float, dot: float, n0: float, n1: float) -> tuple[float, float]:
    """(s_0, s_1) from <v_0, v_1>, ||v_0||, ||v_1||."""
    dot = dot / ((n0 if n0 > EPS else 1.0) * (n1 if n1 > EPS else 1.0))
    if abs(dot) > DOT_THRESHOLD:
        return 1.0 - t, t
    omega = math.acos(max(-1.0, min(1.0, dot)))
    sin_omega = math.sin(omega)
    return math.sin(omega - t * omega) / sin_omega, math.sin(t * omega) / sin_omega


@register
class Slerp(Method):
    name = "slerp"
    pretty = "SLERP (spherical linear interpolation)"
    paper = "Shoemake 1985 Sec. 3; mergekit slerp"
    Params = SlerpParams
    bound_origin = "origin"
    needs_base = False
    symmetric = False  # slerp(A, B, t) = slerp(B, A, 1 - t)
    min_inputs = 2
    max_inputs = 2
    version = 2  # streaming statistics (module docstring)
    elementwise = True  # after prepare: each tensor is a linear combination with its own coefficients

    @staticmethod
    def update_bound(p, n: int, numel: int) -> float | None:  # c of the docstring's bound
        return BOUND_C

    def __init__(self, params) -> None:
        super().__init__(params)
        self._coefs: dict[str, tuple[None, list[float]]] = {}

    def prepare(self, stream: ViewStream) -> None:
        acc: dict[str, sp.BlockedDots] = {}
        for view in stream():  # consecutive pieces of each tensor, in order
            acc.setdefault(view.name, sp.BlockedDots()).add(view.raw[0], view.raw[1])
        self._coefs.clear()
        for name, a in acc.items():
            self._coefs[name] = (None, list(coefs_from(self.params.t, *a.result())))

    def kernel(self, n: int) -> Kernel:
        return Kernel(coefs=self._coefs)

    def merge_tensor(self, view: TensorView) -> torch.Tensor:
        # added vocabulary rows (a view of their own): their own statistics
        v0, v1 = view.models
        s0, s1 = slerp_coefs(self.params.t, v0, v1)
        out = v0.clone()
        if s0 != 1.0:
            out.mul_(s0)
        return out.add_(v1, alpha=s1)
