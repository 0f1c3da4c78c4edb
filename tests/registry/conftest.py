"""Shared fixtures: a fresh registry and tiny random state dicts (nothing is downloaded)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest
import torch

from mmgrid.registry.api import Registry
from mmgrid.registry.store import forget_verified


def tiny_state(seed: int = 0, dtype: torch.dtype = torch.float32, layers: int = 2) -> dict[str, torch.Tensor]:
    """A 'model' with an embedding, a few layers and an integer buffer."""
    g = torch.Generator().manual_seed(seed)
    sd = {"model.embed_tokens.weight": torch.randn(16, 8, generator=g).to(dtype)}
    for i in range(layers):
        sd[f"model.layers.{i}.mlp.weight"] = torch.randn(8, 8, generator=g).to(dtype)
        sd[f"model.layers.{i}.norm.weight"] = torch.ones(8, dtype=dtype)
    sd["model.position_ids"] = torch.arange(6)
    return sd


@pytest.fixture
def reg(tmp_path: Path) -> Registry:
    forget_verified()
    r = Registry.open(tmp_path / "reg")
    yield r
    r.close()


@pytest.fixture
def state() -> Callable[..., dict[str, torch.Tensor]]:
    return tiny_state


COORDS = {"paradigm": "text", "domain": "Books", "period": "p0"}
