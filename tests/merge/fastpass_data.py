"""Shared data of the fast-pass and interpolation tests: small bf16/float32 models with
exact zeros, and bitwise comparison."""

from __future__ import annotations

import pytest
import torch

SHAPES = {"embed_tokens.weight": (37, 8), "layers.0.q.weight": (8, 8), "layers.0.norm.weight": (8,),
          "layers.0.up.weight": (12, 8)}


def _state(seed: int, base: dict | None = None, dtype: torch.dtype = torch.bfloat16) -> dict:
    g = torch.Generator().manual_seed(seed)
    if base is None:
        return {k: (torch.randn(s, generator=g) * 0.02).to(dtype) for k, s in SHAPES.items()}
    out = {}
    for k, v in base.items():
        d = torch.randn(v.shape, generator=g) * 0.002
        d[torch.rand(v.shape, generator=g) < 0.1] = 0.0  # exact zeros: ties at the sign election
        out[k] = (v.float() + d).to(dtype)
    return out


@pytest.fixture(scope="module", params=[torch.bfloat16, torch.float32])
def trio(request) -> dict:
    base = _state(0, dtype=request.param)
    return {"base": base, "a": _state(1, base, request.param), "b": _state(2, base, request.param),
            "c": _state(3, base, request.param)}


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int16) if t.element_size() == 2 else t.view(torch.int32)


def _same(x: dict, y: dict) -> bool:
    return x.keys() == y.keys() and all(torch.equal(_bits(x[k]), _bits(y[k])) for k in x)
