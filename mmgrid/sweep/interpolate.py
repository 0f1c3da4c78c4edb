"""theta(lambda) = theta_t1 + lambda * (theta_t2 - theta_t1) applied in place to a live model.

MMGRid Eq. 9-10. The two checkpoints are read once and kept as stored; each sweep point
then writes theta(lambda) into the model's own tensors with one fused ``torch.lerp`` per
tensor (:func:`mmgrid.merge.ops.lerp_into`: float32 arithmetic, one rounding), skipping
tensors the last stage did not change. Nothing is written to disk and nothing is rebuilt
per point. :func:`interpolate_state` computes the same values as a new state dict.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from mmgrid.errors import MergeError


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
        live = model.state_dict(keep_vars=True)
        self.targets: dict[str, torch.Tensor] = {}
        self.pairs: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        for name, t1 in theta1.items():
            t2 = theta2[name]
            if t1.shape != t2.shape:
                raise MergeError(f"temporal sweep: tensor {name} is {tuple(t1.shape)} at t1 and {tuple(t2.shape)} at t2.")
            if not t1.is_floating_point() or torch.equal(t1, t2):
                continue  # lambda cannot change it
            target = live.get(name)
            if target is None or target.shape != t1.shape:
                raise MergeError(
                    f"temporal sweep: the model has no tensor {name} of shape {tuple(t1.shape)}; "
                    "the paradigm's state_dict names must match its checkpoint names."
                )
            self.targets[name] = target
            # own copies as stored (the model may share the checkpoint's storage, and a
            # lerp into it must not change theta_t1): 2 x the stored bytes, not 2 x float32
            self.pairs[name] = (t1.detach().clone(), t2.detach().clone())

    @property
    def n_changed(self) -> int:
        """How many tensors lambda moves."""
        return len(self.pairs)

    @torch.no_grad()
    def apply(self, lam: float) -> None:
        """Write theta_t1 + lam (theta_t2 - theta_t1) into the model's tensors."""
        from mmgrid.merge.ops import lerp_into

        for name, target in self.targets.items():
            t1, t2 = self.pairs[name]
            if target.device == t1.device:
                lerp_into(t1, t2, float(lam), target.data)
            else:  # computed where the checkpoints are, moved in the model's dtype
                target.data.copy_(lerp_into(t1, t2, float(lam), torch.empty(t1.shape, dtype=target.dtype)))


def interpolate_state(theta1: Mapping[str, torch.Tensor], theta2: Mapping[str, torch.Tensor], lam: float) -> dict[str, torch.Tensor]:
    """theta(lambda) as a new state dict (MMGRid Eq. 10) in theta1's dtypes: the bits
    :class:`InPlaceInterpolator` writes into a model of those dtypes and
    ``merge("temporal", [theta1, theta2], lam=lambda)`` returns; non-float tensors are
    taken from t2."""
    from mmgrid.merge.ops import lerp_into

    out = {}
    for name, t2 in theta2.items():
        t1 = theta1[name]
        if t2.is_floating_point():
            out[name] = lerp_into(t1, t2, float(lam), torch.empty(t1.shape, dtype=t1.dtype))
        else:
            out[name] = t2.clone()
    return out


@torch.no_grad()
def assign_state(model: torch.nn.Module, state: Mapping[str, torch.Tensor]) -> bool:
    """Copy ``state`` into the model's own tensors when every tensor has a same-shaped slot.

    Returns:
        False (and changes nothing) when a name is missing or a shape differs (e.g. a
        merge that appended another domain's token rows): the caller then rebuilds.
    """
    live = model.state_dict(keep_vars=True)
    for name, t in state.items():
        target = live.get(name)
        if target is None or target.shape != t.shape:
            return False
    for name, t in state.items():
        live[name].data.copy_(t.to(device=live[name].device, dtype=live[name].dtype))
    return True
