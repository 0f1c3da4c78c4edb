"""Typed config of training and its variants (the ``train:`` and ``variants:`` sections of a grid YAML)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from mmgrid.configtools import ranged


@dataclass
class TrainConfig:
    stages: list[str] = field(default_factory=lambda: ["pretrain", "p1", "p2"])  # phases trained in order
    epochs: dict[str, int] = ranged(0, default_factory=lambda: {"pretrain": 3, "p1": 2, "p2": 2})  # paper: 3 / 2 / 2
    lr: float = ranged(0, lo_open=True, default=1e-3)  # AdamW, fixed
    weight_decay: float = ranged(0, default=0.0)
    batch_size: int = ranged(1, default=32)
    seed: int = ranged(0, default=0)
    max_examples: int | None = ranged(1, default=None)  # cap per stage (quick runs); None = all
    device: str = "auto"  # auto | cpu | cuda
    threads: int | None = ranged(1, default=None)  # torch intra-op CPU threads (None = torch default; 1 is fastest for tiny models)
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"  # auto: bf16 on CUDA, fp32 on CPU


@dataclass
class VariantConfig:
    name: str = "default"  # a row of the grid, e.g. orbit-sd-0.007
    regularizer: str = "none"  # none | l2_init | soup_to_go | orbit
    params: dict[str, Any] = field(default_factory=dict)  # the regularizer's own parameters
    paradigms: list[str] | None = None  # restrict this variant to some paradigms (None = all)
