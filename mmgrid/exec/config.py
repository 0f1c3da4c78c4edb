"""Typed config of job execution (the ``exec:`` section of a grid YAML)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass
class ExecConfig:
    executor: Literal["local", "ray"] = "local"
    address: str | None = None  # Ray cluster address; None starts a local Ray
    num_gpus_per_train: float = 0.0  # resources asked for each training job on Ray
