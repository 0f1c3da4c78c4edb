"""Arcee Fusion (mergekit's ``arcee_fusion``, Arcee AI 2025; no paper): keep the base
except where the other model's change matters most.

Inputs: [theta_1] (the other model) and base theta_0 (mergekit's ``base_model``). Per
tensor, with tau = theta_1 - theta_0 and the softmax taken along the last dimension
(a 1-D tensor as one row):

    I_e = |tau_e| * KL(p || q) of e's row,  p = softmax(theta_1 row) + 1e-8,  q = softmax(theta_0 row) + 1e-8,
    T   = Q_0.5(I) + 1.5 (Q_0.75(I) - Q_0.25(I))     (an outlier fence: median + 1.5 IQR),
    theta* = theta_0 + [I >= T] ⊙ tau,

Q_q the element at index floor(q (N - 1)) of the sorted importances (mergekit's rule). Where
mergekit estimates the quantiles of a tensor of more than 10^6 entries from 10^6 random
draws, mmgrid takes them exactly (deterministic; the same value up to the sampling error).

Bound, per tensor: the mask only zeros entries, ||theta* - theta_0|| <= ||tau||, c = 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from mmgrid.merge.methods.base import Method, TensorView
from mmgrid.merge.methods.registry import register

EPS = 1e-8  # mergekit's floor added to both softmaxes
ROW_CHUNK = 1 << 22  # entries per row chunk of the importances


@dataclass
class ArceeFusionParams:
    """``arcee_fusion`` has no parameters (as in mergekit)."""


def importance(theta: torch.Tensor, base: torch.Tensor) -> torch.Tensor:
    """I = |theta - base| * KL(softmax(theta) || softmax(base)) per row (float32)."""
    rows = theta.reshape(-1, theta.shape[-1]) if theta.ndim >= 1 else theta.reshape(1, 1)
    brows = base.reshape(rows.shape)
    p = torch.softmax(rows, dim=-1).add_(EPS)
    q = torch.softmax(brows, dim=-1).add_(EPS)
    kl = (p * torch.log(p / q)).sum(-1, keepdim=True)
    return (rows - brows).abs_().mul_(kl).reshape(theta.shape)


def fence(scores: torch.Tensor) -> float:
    """median + 1.5 IQR, quantiles at index floor(q (N - 1)) of the sorted scores.

    The three order statistics come from one ``numpy.partition`` (introselect: the same values
    as indexing the sorted scores, about 4x faster than a full sort, measured).
    """
    flat = scores.detach().reshape(-1).float().contiguous()
    qs = [int(i) for i in (torch.tensor([0.25, 0.5, 0.75]) * (flat.numel() - 1)).long()]
    part = np.partition(flat.numpy(), qs)
    q1, med, q3 = (torch.tensor(part[i]) for i in qs)
    return float(med + 1.5 * (q3 - q1))


@register
class ArceeFusion(Method):
    name = "arcee_fusion"
    pretty = "Arcee Fusion"
    paper = "mergekit arcee_fusion (Arcee AI 2025)"
    Params = ArceeFusionParams
    symmetric = False  # one input; the base and the other model have different roles
    min_inputs = 1
    max_inputs = 1

    @staticmethod
    def update_bound(p, n: int, numel: int) -> float | None:  # c of the docstring's bound
        return 1.0

    def merge_tensor(self, view: TensorView) -> torch.Tensor:
        # The importances are row-local (a softmax and a KL per row): computed in row chunks from
        # the stored tensors into one float32 buffer, which then takes the result in place, so a
        # tensor costs one float32 copy (and the fence's selection copy) instead of the base, the
        # model, both softmaxes, their ratio and log, and the scores (the same bits, tested).
        b, a = view.raw[0], view.required_raw_base
        rb = b.reshape(-1, b.shape[-1]) if b.ndim >= 1 else b.reshape(1, 1)
        ra = a.reshape(rb.shape)
        scores = torch.empty(rb.shape, dtype=torch.float32)
        step = max(1, ROW_CHUNK // max(1, rb.shape[1]))
        for i in range(0, rb.shape[0], step):
            scores[i:i + step] = importance(rb[i:i + step].float(), ra[i:i + step].float())
        t = fence(scores)
        for i in range(0, rb.shape[0], step):
            bc, ac = rb[i:i + step].float(), ra[i:i + step].float()
            scores[i:i + step] = torch.where(scores[i:i + step] >= t, bc, ac)
        return scores.reshape(b.shape)
