"""Typed config of job execution (the ``exec:`` section of a grid YAML).

Nothing here changes what is computed, only where: checkpoint ids must not depend on
this section (a build on Ray gives the same ids as a local one).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from mmgrid.configtools import ranged
from mmgrid.errors import ConfigError


@dataclass
class ExecConfig:
    executor: Literal["local", "ray"] = "local"  # `--executor` on the command line wins
    # local processes running jobs side by side (executor local only): 1 = one at a time in this process,
    # N > 1 = a pool of N worker processes (each loads its own data: memory ~ N x one job), 0 = one per usable CPU
    workers: int = ranged(0, 4096, default=1)
    address: str | None = None  # Ray cluster address (auto, ray://head:10001); None starts a local Ray
    num_cpus: int | None = ranged(1, 65536, default=None)  # CPUs of a local Ray started by mmgrid (None: all of this machine)
    num_cpus_per_job: float = 1.0  # Ray resources asked for every job
    num_gpus_per_train: float = 0.0  # Ray GPUs asked for each training stage (1 at paper scale)
    num_gpus_per_eval: float = 0.0  # Ray GPUs asked for each evaluation / sweep point

    def __post_init__(self) -> None:
        for name in ("num_cpus_per_job", "num_gpus_per_train", "num_gpus_per_eval"):
            if not getattr(self, name) >= 0:  # NaN fails too
                raise ConfigError(f"exec.{name}: {getattr(self, name)} is negative; use 0 or more.")
