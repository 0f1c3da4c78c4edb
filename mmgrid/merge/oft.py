"""Merging OFT adapters (Hugging Face PEFT) directly in the Lie algebra so(d)
(OrthoMerge Sec. 3.2, Eq. 6-8).

PEFT stores each OFT layer's rotation as a block-diagonal Cayley map of skew-symmetric
blocks. Two layouts are read: a stack of full blocks ``(r, b, b)`` (``oft_r``, the skew
part is taken) and a stack of packed upper triangles ``(r, b(b-1)/2)`` (``oft_R.weight``
in newer PEFT). For every block the generators Q_i of the adapters are merged with the
magnitude-corrected mean Q = c mean_i Q_i (Eq. 7-8) and written back in the same
layout; every other adapter tensor (biases, scales) is averaged.

Unlike OrthoMerge's decoupling of full weights, nothing here is solved for: the generators
are read from the adapters, so there is no Procrustes problem and no rank-deficient
completion to choose. Per block, ||Q||_F = mean_i ||Q_i||_F (Eq. 8), so with
t = max_i ||Q_i||_F the merged block rotation obeys ||Cayley(Q) - I||_2 <= 2 t / sqrt(1 + t^2)
(a skew Q of spectral norm mu moves a vector by at most |e^{i phi} - 1| = 2 mu / sqrt(1 + mu^2),
and mu <= ||Q||_F). An adapter holds no base weight, so there is no move of W_0 to cap:
Eq. 7-8 are applied as written.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from mmgrid.merge import geometry as geo
from mmgrid.merge import ops
from mmgrid.merge.errors import MissingTensorError, ShapeMismatchError


def _is_oft(name: str) -> bool:
    return "oft_r" in name.lower()


def _to_blocks(t: torch.Tensor) -> tuple[torch.Tensor, str]:
    if t.ndim == 3 and t.shape[-1] == t.shape[-2]:
        q = t.double()
        return 0.5 * (q - q.transpose(-1, -2)), "full"
    if t.ndim == 2:
        m = t.shape[1]
        b = int(round((1 + math.sqrt(1 + 8 * m)) / 2))
        if b * (b - 1) // 2 != m:
            raise ShapeMismatchError(f"OFT tensor of shape {tuple(t.shape)} is not a packed upper triangle")
        rows, cols = torch.triu_indices(b, b, 1)
        q = torch.zeros(t.shape[0], b, b, dtype=torch.float64)
        q[:, rows, cols] = t.double()
        return q - q.transpose(-1, -2), "packed"
    raise ShapeMismatchError(f"unsupported OFT tensor shape {tuple(t.shape)}")


def _from_blocks(q: torch.Tensor, layout: str) -> torch.Tensor:
    if layout == "full":
        return q
    b = q.shape[-1]
    rows, cols = torch.triu_indices(b, b, 1)
    return q[:, rows, cols]


def merge_oft_adapters(adapters: Sequence[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Merge PEFT OFT adapter state dicts block by block in so(d).

    Args:
        adapters: the adapters' state dicts (same keys and shapes).

    Returns:
        The merged adapter state dict, in the first adapter's dtypes.
    """
    keys = list(adapters[0])
    for i, a in enumerate(adapters[1:], 1):
        if set(a) != set(keys):
            raise MissingTensorError(f"adapter {i} has different tensors than adapter 0; merge adapters of one configuration")
    out = {}
    for k in keys:
        ts = [a[k] for a in adapters]
        if len({tuple(t.shape) for t in ts}) != 1:
            raise ShapeMismatchError(f"adapter tensor {k!r} differs in shape between adapters")
        if _is_oft(k):
            blocks = [_to_blocks(t) for t in ts]
            layout = blocks[0][1]
            qs = [b for b, _ in blocks]
            merged = torch.stack([geo.magnitude_corrected_mean([q[r] for q in qs]).double() for r in range(qs[0].shape[0])])
            out[k] = _from_blocks(merged, layout).to(ts[0].dtype)
        elif ts[0].is_floating_point():
            out[k] = ops.average(ts).to(ts[0].dtype)
        else:
            out[k] = ts[0]
    return out
