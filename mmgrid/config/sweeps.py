"""Typed config of the merge studies (the ``sweeps:`` section of a grid YAML)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from mmgrid.configtools import ranged
from mmgrid.errors import ConfigError

# Bounds of the knobs that set an amount of work, checked when the grid is read (before any work):
# lambda beyond +-LAMBDA_BOUND is far outside anything Eq. 10 is studied on (MMGRid: 0 to 1.5), and a grid of
# more than MAX_LAMBDA_POINTS points (each a merge and an evaluation per domain and seed) is a typo.
LAMBDA_BOUND = 100.0
MIN_LAMBDA_STEP = 1e-6  # lambdas are rounded to 1e-9 (lambda*'s tie tolerance)
MAX_LAMBDA_POINTS = 10_000
MAX_ALPHAS = 1_000
MAX_REPLICATES = 10_000


def lambda_points(start: float, stop: float, step: float) -> int:
    """Points of the lambda grid ``start, start + step, ... <= stop`` (without building it)."""
    return int((stop - start) / step + 1e-6) + 1


@dataclass
class TemporalSweepConfig:
    paradigm: str = "emb"
    variant: str = "default"
    start: float = ranged(-LAMBDA_BOUND, LAMBDA_BOUND, default=0.0)  # lambda grid: start, start + step, ... up to stop
    stop: float = ranged(-LAMBDA_BOUND, LAMBDA_BOUND, default=1.5)  # inclusive
    step: float = ranged(MIN_LAMBDA_STEP, 2 * LAMBDA_BOUND, default=0.05)
    metric: str = "ndcg@10"  # lambda* = argmax of this; ties go to the value closest to 1
    domains: list[str] | None = None
    # lambda* = argmax of the seed-averaged curve smoothed by a centred running mean over this many grid
    # points (odd; 1 = no smoothing, today's behaviour); docs/studies.md, "Statistics"
    smooth: int = ranged(1, 1001, default=1)
    # when a domain's lambda* sits on the grid's first or last point, add this many points beyond that edge
    # (same step) and sweep them, repeatedly, up to extend_min / extend_max; 0 = never extend (the default)
    extend_steps: int = ranged(0, MAX_LAMBDA_POINTS, default=0)
    extend_min: float = ranged(-LAMBDA_BOUND, LAMBDA_BOUND, default=-1.0)  # the extended grid never goes below this lambda
    extend_max: float = ranged(-LAMBDA_BOUND, LAMBDA_BOUND, default=3.0)  # ... nor above this one

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
        for what, lo, hi in (("grid", self.start, self.stop), ("extended grid", self.extend_min, self.extend_max)):
            if what == "extended grid" and not self.extend_steps:
                continue
            n = lambda_points(lo, hi, self.step)
            if n > MAX_LAMBDA_POINTS:
                raise ConfigError(
                    f"sweeps.temporal: the {what} from {lo:g} to {hi:g} in steps of {self.step:g} has {n:,} lambda points "
                    f"(each a merge and an evaluation per domain and seed); at most {MAX_LAMBDA_POINTS:,} are accepted. "
                    "Give a larger step or a narrower range (MMGRid: 0 to 1.5 in steps of 0.05).")


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
    alphas: list[float] = ranged(-LAMBDA_BOUND, LAMBDA_BOUND, default_factory=lambda: [0.0, 0.25, 0.5, 0.75, 1.0])  # Eq. 7 weight of the pair's first domain
    metric: str = "ndcg@10"  # relative change against each domain's own t2 checkpoint (Figures 3-4)

    def __post_init__(self) -> None:
        if len(self.alphas) > MAX_ALPHAS:
            raise ConfigError(f"sweeps.cross_domain.alphas: {len(self.alphas):,} alphas; at most {MAX_ALPHAS:,} are "
                              "accepted (each a merge and an evaluation per pair, method and base).")


@dataclass
class PredictLambdaConfig:
    features: list[str] = field(default_factory=lambda: ["avg_gap_days"])  # domain statistics used as regressors
    group: str = "non_active"  # whose lambda* is regressed (the paper: non-active users)
    level: float = ranged(0, 1, lo_open=True, hi_open=True, default=0.9)  # coverage of the prediction interval given for a new domain

    def __post_init__(self) -> None:
        if not self.features:
            raise ConfigError("sweeps.predict_lambda.features: empty; name at least one domain statistic, e.g. "
                              "[avg_gap_days] (the paper's regressor).")


CALIBRATE_FINDINGS = ("lambda_star", "t4_rho", "f5_not1", "f5_varies", "t2_popular")
PLANT_KNOBS = ("turnover", "trend", "trend_contrast", "domain_contrast", "personalization", "recency", "text_signal")


@dataclass
class CalibrateConfig:
    """``mmgrid calibrate`` (docs/calibration.md): replicate worlds under planted sizes of the world's
    mechanisms, each run through the grid's own pipeline at the grid's budget, judged like the report judges."""

    findings: list[str] = field(default_factory=lambda: list(CALIBRATE_FINDINGS))  # which findings to calibrate
    replicates: int = ranged(1, MAX_REPLICATES, default=20)  # replicate worlds per planted size (world seed x the grid's train.seeds)
    world_seed: int = ranged(0, 2**31 - 1, default=1000)  # replicate r has world seed world_seed + r (the demo's 1014 is replicate 14)
    # planted sizes: every knob of `knobs` is the size times the grid's own world.plant value (0 = the null world,
    # 1 = the grid's world); the power curve is drawn over them
    sizes: list[float] = ranged(0, 4, default_factory=lambda: [0.0, 1.0])
    knobs: list[str] = field(default_factory=lambda: ["turnover", "trend", "trend_contrast", "domain_contrast",
                                                        "personalization", "recency"])
    # the GR paradigms of the Table 2 finding "every GR paradigm beats most-popular" (None: the swept paradigm
    # only, sweeps.temporal.paradigm; each more paradigm adds its training to every replicate)
    t2_paradigms: list[str] | None = None
    population_worlds: int = ranged(1, 1000, default=2)  # worlds (and the grid's seeds) behind each population value
    population_user_scale: float = ranged(1, 10_000, default=4.0)  # users x this in the population worlds
    # the Table 2 difference's population value for coverage and bias: "world" = each replicate's own world with
    # population_user_scale x the users (world.extend_users: same items, trends and users, plus more users), one
    # more run per replicate; "config" = the population worlds' value (over world seeds)
    t2_population: Literal["world", "config"] = "world"
    # the non-active lambda*'s target for coverage and bias: "world" = each replicate's own world (the same
    # own-world run as t2_population "world", which then also runs the temporal sweep: about two replicates more
    # per own world); "config" = the population worlds' value (over world seeds)
    lambda_population: Literal["world", "config"] = "world"
    # with an own-world target: own-world runs for the first this-many replicates of each size (None: every
    # replicate); the own-world coverage is then measured on these replicates only. Each costs about two
    # replicates, so the default keeps the demo's full study near 2 h on 2 cores (docs/calibration.md).
    own_world_replicates: int | None = ranged(1, MAX_REPLICATES, default=10)
    # also run the grid's own world (its world.seed and world.plant) through the same replicate pipeline and show
    # where its estimates fall among the replicates': is the world a report was made on a typical draw?
    grid_world: bool = True
    level: float = ranged(0, 1, lo_open=True, hi_open=True, default=0.95)  # coverage of every interval
    power: float = ranged(0, 1, lo_open=True, hi_open=True, default=0.8)  # the power of the minimum detectable effect
    keep_runs: bool = False  # keep each replicate's world, prepared data and registry (else only its result)

    def __post_init__(self) -> None:
        bad = [f for f in self.findings if f not in CALIBRATE_FINDINGS]
        if bad or not self.findings:
            raise ConfigError(f"sweeps.calibrate.findings: {bad or 'empty'}; choose from {list(CALIBRATE_FINDINGS)}.")
        bad = [k for k in self.knobs if k not in PLANT_KNOBS]
        if bad or not self.knobs:
            raise ConfigError(f"sweeps.calibrate.knobs: {bad or 'empty'}; choose from {list(PLANT_KNOBS)} "
                              "(world.plant, docs/calibration.md).")
        if len(self.sizes) > 100:
            raise ConfigError(f"sweeps.calibrate.sizes: {len(self.sizes)} planted sizes; at most 100 are accepted "
                              "(each runs every replicate).")
        if not self.sizes or len(set(self.sizes)) != len(self.sizes):
            raise ConfigError(f"sweeps.calibrate.sizes: {self.sizes}; give distinct planted sizes, e.g. [0.0, 1.0].")
        if any(k in ("personalization", "text_signal") for k in self.knobs) and max(self.sizes) > 1:
            raise ConfigError(f"sweeps.calibrate.sizes: {max(self.sizes)} > 1 for a knob that is a share "
                              "(personalization, text_signal); keep sizes in [0, 1] or drop those knobs.")


@dataclass
class SweepConfig:
    temporal: TemporalSweepConfig = field(default_factory=TemporalSweepConfig)
    cross_domain: CrossDomainSweepConfig = field(default_factory=CrossDomainSweepConfig)
    predict_lambda: PredictLambdaConfig = field(default_factory=PredictLambdaConfig)
    calibrate: CalibrateConfig = field(default_factory=CalibrateConfig)
