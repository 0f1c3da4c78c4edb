"""theta(lambda) = theta_t1 + lambda * (theta_t2 - theta_t1) applied in place to a live model.

MMGRid Eq. 9-10, for the temporal study: a thin use of the one implementation,
:class:`mmgrid.merge.interpolation.TemporalSweep` (each point one fused ``torch.lerp`` per
tensor, :func:`mmgrid.merge.ops.lerp_into`: float32 arithmetic, one rounding), skipping
tensors the last stage did not change. Nothing is written to disk and nothing is rebuilt
per point. :func:`interpolate_state` computes the same values as a new state dict.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from mmgrid.errors import MergeError
from mmgrid.merge.inplace import module_tensors
from mmgrid.merge.interpolation import TemporalSweep


def _floats(theta: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The float tensors (lambda moves only those; integer buffers are left as they are)."""
    return {k: v for k, v in theta.items() if v.is_floating_point()}


class InPlaceInterpolator:
    """Writes theta(lambda) into ``model`` for any lambda (MMGRid Eq. 10).

    Args:
        model: a module holding the tensors named like the checkpoints (``state_dict`` names).
        theta1: the t1 checkpoint's state.
        theta2: the t2 checkpoint's state (same names and shapes).

    Raises:
        MergeError: when a changed tensor of the checkpoints has no same-shaped tensor in
            the model, or the checkpoints' names or shapes differ.
    """

    def __init__(self, model: torch.nn.Module, theta1: Mapping[str, torch.Tensor], theta2: Mapping[str, torch.Tensor]) -> None:
        if set(theta1) != set(theta2):
            only = sorted(set(theta1) ^ set(theta2))[:5]
            raise MergeError(f"temporal sweep: the t1 and t2 checkpoints hold different tensors (e.g. {only}).")
        self.sweep = TemporalSweep(_floats(theta1), _floats(theta2))
        live = module_tensors(model)
        for name, (t1, _) in self.sweep.pairs.items():
            target = live.get(name)
            if name not in self.sweep.unchanged and (target is None or target.shape != t1.shape):
                raise MergeError(
                    f"temporal sweep: the model has no tensor {name} of shape {tuple(t1.shape)}; "
                    "the paradigm's state_dict names must match its checkpoint names."
                )
        self.model = model

    @property
    def n_changed(self) -> int:
        """How many tensors lambda moves."""
        return len(self.sweep.pairs) - len(self.sweep.unchanged)

    def apply(self, lam: float) -> None:
        """Write theta_t1 + lam (theta_t2 - theta_t1) into the model's tensors."""
        self.sweep.apply_to(self.model, float(lam), changed_only=True)


def interpolate_state(theta1: Mapping[str, torch.Tensor], theta2: Mapping[str, torch.Tensor], lam: float) -> dict[str, torch.Tensor]:
    """theta(lambda) as a new state dict (MMGRid Eq. 10) in theta1's dtypes: the bits
    :class:`InPlaceInterpolator` writes into a model of those dtypes and
    ``merge("temporal", [theta1, theta2], lam=lambda)`` returns; non-float tensors are
    taken from t2."""
    sweep = TemporalSweep(_floats(theta1), _floats(theta2))
    floats = sweep.state_at(float(lam))
    # a passthrough tensor (rotary buffers) is theta1's own: copy it, as every other one is new
    return {name: (floats[name].clone() if name in sweep.fixed else floats[name]) if name in floats else t2.clone()
            for name, t2 in theta2.items()}
