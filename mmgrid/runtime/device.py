"""Device, dtype and seeding for training and evaluation."""

from __future__ import annotations

import contextlib
import hashlib
import random
from typing import Any, ContextManager

import numpy as np
import torch

from mmgrid.errors import ConfigError


def resolve_device(device: str = "auto") -> torch.device:
    """``auto`` -> CUDA when present, else CPU; ``cuda`` without a GPU is a ConfigError."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"train.device={device!r} but no CUDA device is visible; use auto or cpu.")
    return torch.device(device)


def autocast(device: torch.device, dtype: str = "auto") -> ContextManager[Any]:
    """bfloat16 autocast on CUDA (``auto`` or ``bfloat16``); plain float32 otherwise."""
    if device.type == "cuda" and dtype in ("auto", "bfloat16"):
        return torch.autocast("cuda", dtype=torch.bfloat16)
    if device.type == "cpu" and dtype == "bfloat16":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def seed_everything(seed: int) -> dict[str, int]:
    """Seed torch, numpy and random; returns the seeds recorded with the checkpoint."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    return {"torch": seed, "numpy": seed % 2**32, "random": seed}


def derive_seed(seed: int, *parts: str) -> int:
    """A stable per-job seed from the grid seed and names (paradigm, domain, stage...)."""
    h = hashlib.sha256("/".join([str(seed), *parts]).encode()).hexdigest()
    return int(h[:8], 16)


def to_device(batch: dict[str, Any], device: torch.device) -> dict[str, Any]:
    """Move the tensors of a batch to ``device`` (other values pass through)."""
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


def set_threads(threads: int | None) -> None:
    """Set torch's intra-op CPU threads (tiny models run fastest on one; None leaves the default)."""
    if threads is not None:
        if threads < 1:
            raise ConfigError(f"train.threads must be >= 1, got {threads}.")
        torch.set_num_threads(threads)
