"""Typed config of the merge studies (the ``sweeps:`` section of a grid YAML)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mmgrid.configtools import ranged
from mmgrid.errors import ConfigError


@dataclass
class TemporalSweepConfig:
    paradigm: str = "emb"
    variant: str = "default"
    start: float = ranged(default=0.0)  # lambda grid: start, start + step, ... up to stop
    stop: float = ranged(default=1.5)  # inclusive
    step: float = ranged(0, lo_open=True, default=0.05)
    metric: str = "ndcg@10"  # lambda* = argmax of this; ties go to the value closest to 1
    domains: list[str] | None = None
    # lambda* = argmax of the seed-averaged curve smoothed by a centred running mean over this many grid
    # points (odd; 1 = no smoothing, today's behaviour); docs/studies.md, "Statistics"
    smooth: int = ranged(1, default=1)
    # when a domain's lambda* sits on the grid's first or last point, add this many points beyond that edge
    # (same step) and sweep them, repeatedly, up to extend_min / extend_max; 0 = never extend (the default)
    extend_steps: int = ranged(0, default=0)
    extend_min: float = ranged(default=-1.0)  # the extended grid never goes below this lambda
    extend_max: float = ranged(default=3.0)  # ... nor above this one

    def __post_init__(self) -> None:
        if self.smooth % 2 == 0:
            raise ConfigError(f"sweeps.temporal.smooth: {self.smooth} must be odd (1 = no smoothing, 3, 5, ...).")
        if self.extend_min > self.start or self.extend_max < self.stop:
            raise ConfigError(f"sweeps.temporal: extend_min {self.extend_min} / extend_max {self.extend_max} must lie "
                              f"outside the grid [{self.start}, {self.stop}]; widen them or set extend_steps: 0.")
        if not self.step > 0:
            raise ConfigError(f"sweeps.temporal.step: {self.step} must be > 0 (for example 0.05).")
        if self.start > self.stop:
            raise ConfigError(f"sweeps.temporal: start {self.start} is after stop {self.stop}; give start <= stop.")


@dataclass
class CrossDomainSweepConfig:
    paradigms: list[str] = field(default_factory=lambda: ["emb"])
    variant: str = "default"
    pairs: list[list[str]] | None = None  # None = all pairs of domains
    methods: dict[str, dict[str, Any]] = field(
        default_factory=lambda: {
            "average": {},
            "ties_dare": {"p": 0.1, "density": 0.2},
            "orthomerge": {},
            "gcwm": {},
        }
    )
    bases: list[str] = field(default_factory=lambda: ["original", "historical", "neutral"])
    alphas: list[float] = ranged(default_factory=lambda: [0.0, 0.25, 0.5, 0.75, 1.0])  # Eq. 7 weight of the pair's first domain
    metric: str = "ndcg@10"  # relative change against each domain's own t2 checkpoint (Figures 3-4)


@dataclass
class PredictLambdaConfig:
    features: list[str] = field(default_factory=lambda: ["avg_gap_days"])  # domain statistics used as regressors
    group: str = "non_active"  # whose lambda* is regressed (the paper: non-active users)
    level: float = ranged(0, 1, lo_open=True, hi_open=True, default=0.9)  # coverage of the prediction interval given for a new domain


@dataclass
class SweepConfig:
    temporal: TemporalSweepConfig = field(default_factory=TemporalSweepConfig)
    cross_domain: CrossDomainSweepConfig = field(default_factory=CrossDomainSweepConfig)
    predict_lambda: PredictLambdaConfig = field(default_factory=PredictLambdaConfig)
