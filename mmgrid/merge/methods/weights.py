"""The one spelling of how a method weighs its inputs: :class:`Weights`, the parameter
dataclass every weighing method's ``Params`` extends.

* ``weights``: one real weight per input, w_i (the lambda_i of MMGRid Eq. 3; for
  ``average`` the non-negative w_i of sum_i w_i theta_i / sum_i w_i);
* ``alpha``: two inputs only, the weights (alpha, 1 - alpha) of MMGRid Eq. 7.

Studies ask a method directly whether it weighs its inputs (:func:`weighs`) and pass
Eq. 7's alpha as :func:`eq7` gives it, instead of guessing a field name. The old
spelling ``lambdas`` (and ``lambdas_``) still works in YAML, recipes and ``--set``, with a
deprecation message (:data:`DEPRECATED`); a stored recipe keeps its spelling, so its id
does not change. The temporal merge's ``lam`` is not an input weighting but Eq. 10's
scalar along theta_t1 -> theta_t2 (any real: it extrapolates), and keeps the paper's name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mmgrid.merge.errors import MergeParamError

# deprecated spelling -> the field it means now
DEPRECATED = {"lambdas": "weights", "lambdas_": "weights"}


@dataclass
class Weights:
    """Per-input weights (see the module docstring).

    Attributes:
        weights: one weight per input (default: the method's, 1.0 each for most).
        alpha: two inputs only: weights (alpha, 1 - alpha) (MMGRid Eq. 7).
    """

    weights: list[float] | None = None
    alpha: float | None = None

    def per_input(self, n: int, default: float = 1.0) -> tuple[float, ...]:
        """The n weights: ``weights``, or (alpha, 1 - alpha), or ``default`` each.

        Raises:
            MergeParamError: both given, alpha with n != 2, or a weight count != n.
        """
        if self.weights is not None and self.alpha is not None:
            raise MergeParamError("give either weights or alpha, not both")
        if self.alpha is not None:
            if n != 2:
                raise MergeParamError(f"alpha (MMGRid Eq. 7) merges exactly 2 inputs, got {n}; use weights for {n}")
            return (float(self.alpha), 1.0 - float(self.alpha))
        if self.weights is not None:
            if len(self.weights) != n:
                raise MergeParamError(f"weights has {len(self.weights)} values for {n} inputs; give one per input")
            return tuple(float(x) for x in self.weights)
        return (default,) * n


def weighs(params_cls: type) -> bool:
    """Whether a method with this ``Params`` class weighs its inputs."""
    return isinstance(params_cls, type) and issubclass(params_cls, Weights)


def eq7(alpha: float) -> dict[str, Any]:
    """The parameters that give a weighing method MMGRid Eq. 7's weights (alpha, 1 - alpha)."""
    return {"alpha": float(alpha)}
