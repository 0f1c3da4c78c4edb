"""Typed config of training and its variants (the ``train:`` and ``variants:`` sections of a grid YAML)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from mmgrid.configtools import ranged
from mmgrid.errors import ConfigError


@dataclass
class TrainConfig:
    stages: list[str] = field(default_factory=lambda: ["pretrain", "p1", "p2"])  # phases trained in order
    epochs: dict[str, int] = ranged(0, 10_000, default_factory=lambda: {"pretrain": 3, "p1": 2, "p2": 2})  # paper: 3 / 2 / 2
    lr: float = ranged(0, lo_open=True, default=1e-3)  # AdamW, fixed
    weight_decay: float = ranged(0, default=0.0)
    batch_size: int = ranged(1, 10**6, default=32)
    seed: int = ranged(0, default=0)  # one training seed (set to the first of ``seeds`` when those are given)
    # training seeds as a grid coordinate: every stage is trained once per seed (replicates);
    # None = [seed]. The tiny base, the evaluation's user sample and most-popular use the first.
    # A train.seed other than 0 and seeds[0] (e.g. the override train.seed=1) makes a one-seed grid.
    seeds: list[int] | None = None
    # leading stages trained once, on the first seed, and shared by every replicate (e.g. [pretrain]):
    # the replicates differ from the first shared-stage checkpoint on. [] = every stage per seed.
    shared_stages: list[str] = field(default_factory=list)
    max_examples: int | None = ranged(1, 10**10, default=None)  # cap per stage (quick runs); None = all
    device: str = "auto"  # auto | cpu | cuda
    threads: int | None = ranged(1, 4096, default=None)  # torch intra-op CPU threads (None = torch default; 1 is fastest for tiny models)
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"  # auto: bf16 on CUDA, fp32 on CPU

    def check_shared_stages(self) -> None:
        """``shared_stages`` must be a leading run of ``stages`` that leaves a stage per replicate
        (checked by the grid, after its stages are checked against the phases)."""
        shared = list(self.shared_stages)
        if shared and (shared != list(self.stages)[: len(shared)] or len(shared) >= len(self.stages)):
            raise ConfigError(
                f"train.shared_stages {shared}: must be the first stages of train.stages {list(self.stages)} "
                "(a leading run, e.g. [pretrain]) and leave at least one stage for each seed's replicate; "
                "fix it or set train.shared_stages=[]."
            )

    def __post_init__(self) -> None:
        self.shared_stages = list(self.shared_stages or [])
        if self.seeds is None:
            return
        seeds = list(self.seeds)
        if not seeds:
            raise ConfigError("train.seeds is empty; give at least one seed (e.g. [0, 1, 2]) or leave it out.")
        bad = [s for s in seeds if isinstance(s, bool) or not isinstance(s, int) or s < 0]
        if bad:
            raise ConfigError(f"train.seeds: {bad} are not integers >= 0; give e.g. [0, 1, 2].")
        if len(seeds) > 1000:
            raise ConfigError(f"train.seeds: {len(seeds):,} seeds; at most 1000 replicates are accepted (each trains "
                              "every stage of every cell).")
        if len(set(seeds)) != len(seeds):
            raise ConfigError(f"train.seeds {seeds} repeats a seed; each replicate needs its own seed.")
        if self.seed not in (0, seeds[0]):
            seeds = [self.seed]  # `train.seed=N` on a grid with seeds: that one seed
        self.seeds, self.seed = seeds, seeds[0]

    @property
    def seed_list(self) -> list[int]:
        """The training seeds of the grid's replicates: ``seeds``, else ``[seed]``."""
        return list(self.seeds) if self.seeds is not None else [self.seed]


@dataclass
class VariantConfig:
    name: str = "default"  # a row of the grid, e.g. orbit-sd-0.007
    regularizer: str = "none"  # none | l2_init | soup_to_go | orbit
    params: dict[str, Any] = field(default_factory=dict)  # the regularizer's own parameters
    paradigms: list[str] | None = None  # restrict this variant to some paradigms (None = all)
