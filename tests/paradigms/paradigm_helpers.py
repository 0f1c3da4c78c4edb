"""Helpers shared by the paradigm tests (imported by name; tests/paradigms is on sys.path)."""

from __future__ import annotations

from typing import Any

import torch


def fit_batch(paradigm: Any, model: torch.nn.Module, batch: dict[str, torch.Tensor], steps: int, lr: float) -> float:
    """Train ``model`` on one batch for ``steps`` AdamW steps; returns the loss before training."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    first = paradigm.loss(model, batch)
    assert torch.isfinite(first)
    for _ in range(steps):
        opt.zero_grad()
        paradigm.loss(model, batch).backward()
        opt.step()
    return float(first.detach())
