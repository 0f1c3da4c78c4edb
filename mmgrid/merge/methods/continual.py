"""Shared pieces of the continual-merging methods (``magmax``, ``opcm``, ``dop``).

A continual merge takes an *ordered* sequence of checkpoints theta_1, ..., theta_T that
arrived one after another (the grid's p1 -> p2 of a domain, each period fine-tuned from
the last; or domains in the order they arrived) and a base theta_0 (the pretrained
checkpoint the sequence started from). Its task vectors are tau_t = theta_t - theta_0
(MMGRid Eq. 2). The merge of step t sees only the running merge of steps < t and
theta_t, so memory does not grow with T.

Which tensors get the subspace treatment (OPCM's projection, DOP's dual projections):
the 2-D weights that are not vocabulary matrices (embedding / LM-head rows), the
``nn.Linear`` weights of FusionBench's implementations; every other tensor (biases,
norms, embeddings) takes the method's plain rule.
"""

from __future__ import annotations

import torch

from mmgrid.merge.methods.base import TensorView


def is_matrix(view: TensorView) -> bool:
    """Whether the subspace rule applies: a 2-D weight that is not a vocabulary matrix."""
    return view.raw[0].ndim == 2 and not view.vocab and min(view.raw[0].shape) > 1


def energy_rank(s: torch.Tensor, energy: float) -> int:
    """The smallest k whose top-k singular values hold ``energy`` of sum_j s_j
    (k in [0, len(s)]; 0 for a zero matrix, len(s) for energy >= 1)."""
    total = float(s.sum())
    if total <= 0.0:
        return 0
    if energy >= 1.0:
        return int((s > 0).sum())
    frac = s.double().cumsum(0) / total
    return min(int((frac < energy).sum()) + 1, s.numel())
