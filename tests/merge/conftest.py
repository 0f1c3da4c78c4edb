"""Tiny generated models for the merge tests (nothing downloaded)."""

from __future__ import annotations

import pytest
import torch


def tiny_state(seed: int, dtype: torch.dtype = torch.float32, noise: float = 0.0, base: dict | None = None) -> dict:
    """A 2-layer-ish state dict: 2-D weights, a bias, an embedding, an int buffer."""
    g = torch.Generator().manual_seed(seed)
    if base is None:
        shapes = {"embed_tokens.weight": (10, 4), "layers.0.q.weight": (4, 4), "layers.0.up.weight": (6, 4),
                  "layers.0.down.weight": (4, 6), "layers.0.norm.weight": (4,)}
        st = {k: torch.randn(s, generator=g).to(dtype) for k, s in shapes.items()}
    else:
        st = {k: (v.float() + noise * torch.randn(v.shape, generator=g)).to(v.dtype) if v.is_floating_point() else v.clone()
              for k, v in base.items() if k != "codes"}
    st["codes"] = torch.arange(5, dtype=torch.int64)
    return st


@pytest.fixture(scope="session")
def models() -> dict:
    base = tiny_state(0)
    return {"base": base, "a": tiny_state(1, base=base, noise=0.1), "b": tiny_state(2, base=base, noise=0.1),
            "c": tiny_state(3, base=base, noise=0.1)}
