"""Shared body of the time-axis fusers (``linear_velocity``, ``moving_average_velocity``,
``acceleration``, ``exp_decay``, ``ema``): each merges checkpoints M_1..M_n given in time
order into theta* = sum_i c_i M_i with coefficients that sum to 1 (an affine combination).

Because sum_i c_i = 1, theta* - theta_0 = sum_i c_i (M_i - theta_0) for ANY reference
theta_0, so every fuser is bounded per tensor by ||theta* - theta_0|| <= (sum_i |c_i|)
max_i ||M_i - theta_0||: the same c around the base, the first checkpoint or any other
point. A base, if given, cancels (MMGRid's task-vector form base + sum_i c_i (M_i - base) is
the same sum) and is not read.

The coefficients depend only on the parameters and n, so each fuser is entrywise: both merge
paths evaluate one :func:`mmgrid.merge.ops.linear_combination` per chunk (same bits).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from mmgrid.merge import ops
from mmgrid.merge.errors import MergeParamError
from mmgrid.merge.methods.base import Method, TensorView
from mmgrid.merge.pipeline import Kernel


def check_finite(method: str, name: str, value: float, hint: str) -> None:
    """Raise MergeParamError unless ``value`` is a finite real."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise MergeParamError(f"merge method {method!r}: parameter {name}={value!r} must be a finite real; {hint}")


def coefficient_mass(cs: Sequence[float]) -> float:
    """sum_i |c_i|: the bound's c of an affine combination (module docstring)."""
    return float(sum(abs(c) for c in cs))


class AffineMethod(Method):
    """theta* = sum_i c_i M_i, sum_i c_i = 1; subclasses give :meth:`coefficients`."""

    needs_base = False
    symmetric = False  # the inputs are a time order
    bound_origin = "base"  # any reference point (module docstring); the test's base is one
    elementwise = True

    def coefficients(self, n: int) -> list[float]:
        """c_1..c_n for n inputs in time order (oldest first)."""
        raise NotImplementedError

    def check_inputs(self, n: int) -> None:
        super().check_inputs(n)
        self.coefficients(n)  # raises on parameters that do not fit n inputs (a window too long)

    def kernel(self, n: int) -> Kernel:
        return Kernel(coefs=(None, self.coefficients(n)))

    def merge_tensor(self, view: TensorView) -> torch.Tensor:
        return ops.linear_combination(view.raw, (None, self.coefficients(len(view.raw))))
