"""The origin theta_init of a training run and the distances to it.

Orbit (Orbit paper, section 4.1) measures how far the current parameters are from the
initial LLM parameters, either as the L2 distance ``||theta_init - theta||_2`` or as the
sign dissimilarity (Eq. 1): the fraction of parameters whose sign differs. Rows of added
vocabulary (semantic-ID tokens) are randomly initialised, so they are excluded from
distances and from back-merging (section 4.1 and 5.1).

Coordinates whose origin value is exactly zero are left out of the sign dissimilarity
(numerator and denominator): Appendix D assumes ``theta_init(i) != 0`` for every counted
coordinate, and without that assumption back-merging could never restore their sign.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import torch

from mmgrid.merge import geometry as merge_geometry


@dataclass
class Origin:
    """Live parameter views (added rows cut off) and their origin values, in the same order."""

    names: list[str]
    params: list[torch.Tensor]  # views into the model's parameters (in-place edits reach the model)
    init: list[torch.Tensor]  # origin values, same shapes as ``params``
    init_nonzero: list[torch.Tensor]  # masks of origin coordinates counted by the sign dissimilarity

    @property
    def numel(self) -> int:
        return sum(p.numel() for p in self.params)


def make_origin(model: torch.nn.Module, origin_state: Mapping[str, torch.Tensor],
                added_rows: Mapping[str, Sequence] | None = None) -> Origin:
    """Pair the model's trainable parameters with their origin values.

    Args:
        model: the model being trained (its parameters are edited in place by back-merging).
        origin_state: parameter name -> origin value (``model.named_parameters()`` names).
            Parameters missing here have no origin and are skipped.
        added_rows: tensor name -> (first added row, token names) as in
            ``Checkpoint.added_rows``; those rows are excluded.

    Returns:
        An :class:`Origin`.
    """
    first_rows = _first_added_rows(model, added_rows or {})
    names, params, init, nonzero = [], [], [], []
    for name, p in model.named_parameters():
        if not p.requires_grad or name not in origin_state:
            continue
        o = origin_state[name].to(device=p.device, dtype=p.dtype)
        r0 = first_rows.get(name)
        view, o = (p.data[:r0], o[:r0]) if r0 is not None else (p.data, o)
        if view.shape != o.shape:
            continue  # the origin has fewer rows than the model (vocabulary grew): compare the shared ones
        names.append(name)
        params.append(view)
        init.append(o.clone())
        nonzero.append(o != 0)
    return Origin(names, params, init, nonzero)


def _first_added_rows(model: torch.nn.Module, added_rows: Mapping[str, Sequence]) -> dict[str, int]:
    """Map checkpoint tensor names of added rows onto parameter names (exact or suffix match)."""
    out: dict[str, int] = {}
    pnames = [n for n, _ in model.named_parameters()]
    for key, spec in added_rows.items():
        first = int(spec[0])
        for n in pnames:
            if n == key or n.endswith("." + key) or key.endswith("." + n):
                out[n] = first
    return out


@torch.no_grad()
def l2_distance(origin: Origin) -> float:
    """``||theta - theta_init||_2`` over the included coordinates (Orbit paper, section 4.1)."""
    total = torch.zeros((), dtype=torch.float64)
    for p, o in zip(origin.params, origin.init):
        total += (p.double() - o.double()).pow(2).sum().cpu()
    return float(total.sqrt())


@torch.no_grad()
def sign_dissimilarity(origin: Origin) -> float:
    """Fraction of included coordinates whose sign differs from the origin's (Orbit paper, Eq. 1;
    :func:`mmgrid.merge.geometry.sign_dissimilarity`, counted where the origin is nonzero)."""
    return merge_geometry.sign_dissimilarity(origin.params, origin.init, origin.init_nonzero)


def distance(origin: Origin, kind: str) -> float:
    """``l2`` or ``sign`` distance of the model to its origin."""
    return l2_distance(origin) if kind == "l2" else sign_dissimilarity(origin)


@torch.no_grad()
def average_with_origin(origin: Origin, weight: float = 0.5) -> None:
    """In place: ``theta = (1 - weight) * theta + weight * theta_init`` (weight 0.5: Orbit Eq. 4)."""
    for p, o in zip(origin.params, origin.init):
        p.mul_(1.0 - weight).add_(o, alpha=weight)
