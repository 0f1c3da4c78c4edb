"""Dot products and norms in float64 for the sphere methods (slerp, nuslerp, multislerp,
karcher, model_stock), accumulated over chunks so that no float64 copy of a whole tensor
is made (a big embedding would otherwise take twice its float32 size per input)."""

from __future__ import annotations

import math

import torch

CHUNK = 1 << 20  # entries per float64 chunk


def dot(a: torch.Tensor, b: torch.Tensor) -> float:
    """<a, b> over all entries, accumulated in float64."""
    a, b = a.reshape(-1), b.reshape(-1)
    return math.fsum(float(torch.dot(a[i:i + CHUNK].double(), b[i:i + CHUNK].double()))
                     for i in range(0, a.numel(), CHUNK))


def norm(a: torch.Tensor) -> float:
    """||a|| over all entries, accumulated in float64."""
    return math.sqrt(dot(a, a))


def row_dots(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """<a[..., :], b[..., :]> along the last dimension, float64, shape a.shape[:-1]."""
    d = a.shape[-1]
    a2, b2 = a.reshape(-1, d), b.reshape(-1, d)
    step = max(1, CHUNK // max(1, d))
    parts = [torch.linalg.vecdot(a2[i:i + step].double(), b2[i:i + step].double()) for i in range(0, a2.shape[0], step)]
    out = torch.cat(parts) if parts else torch.zeros(0, dtype=torch.float64)
    return out.reshape(a.shape[:-1])
