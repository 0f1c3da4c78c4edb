"""The calibration study: its performance measures against known truth, the population values by
hand, the replicates' recipes, ``--plan``, bad input, and one smoke run of ``mmgrid calibrate`` end to end."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from mmgrid.cli import main
from mmgrid.config import load_grid
from mmgrid.errors import ConfigError
from mmgrid.stats.power import z_sum
from mmgrid.sweep.calibration.measures import calibrate_finding, population_values
from mmgrid.sweep.calibration.replicate import recipe_hash, replicate_grid
from mmgrid.sweep.calibration.study import grid_identity, run_calibration

Z = sps.norm.ppf(0.975)


def _runs(truth: float, se: float, reps: int, seed: int) -> list[dict]:
    """Replicates whose estimate is N(truth, se) with a normal 95% interval: coverage 95% and P(holds) known."""
    est = np.random.default_rng(seed).normal(truth, se, reps)
    return [{"t2_popular": [e, e - Z * se, e + Z * se, 0.5, 100, 1]} for e in est]


def test_measures_of_a_known_normal_estimator():
    se, reps = 0.01, 2000
    # null: the one-sided claim "> 0" holds when the interval lies above 0, P = 2.5%
    null = calibrate_finding("t2_popular", 0.0, _runs(0.0, se, reps, 0), {"t2_popular": 0.0, "t2_popular_se": 0.001})
    assert null.is_null
    assert abs(null.holds.rate - 0.025) <= 3 * math.sqrt(0.025 * 0.975 / reps)
    assert abs(null.coverage.rate - 0.95) <= 3 * math.sqrt(0.95 * 0.05 / reps)
    assert null.mde == pytest.approx(z_sum() * se, rel=1e-9)
    assert abs(null.bias.bias) <= 3 * null.bias.mcse
    # planted at the MDE: power 80% (the wrong-side tail is negligible)
    planted = calibrate_finding("t2_popular", 1.0, _runs(z_sum() * se, se, reps, 1),
                                {"t2_popular": z_sum() * se, "t2_popular_se": 0.001})
    assert not planted.is_null
    assert abs(planted.holds.rate - 0.8) <= 3 * math.sqrt(0.8 * 0.2 / reps)
    assert planted.holds.mcse == pytest.approx(math.sqrt(planted.holds.rate * (1 - planted.holds.rate) / reps))
    # a biased estimator: coverage falls, the bias is measured
    biased = calibrate_finding("t2_popular", 1.0, _runs(0.02 + 2 * se, se, reps, 2), {"t2_popular": 0.02})
    assert biased.bias.bias == pytest.approx(2 * se, abs=3 * biased.bias.mcse)
    assert biased.coverage.rate == pytest.approx(sps.norm.cdf(Z - 2) - sps.norm.cdf(-Z - 2), abs=0.03)


def test_a_paradigm_worse_than_the_baseline_is_a_null_for_beats():
    """One-sided claim: where the population difference is below 0, "beats most-popular" is false, so its rate
    of "holds" is a type-I error; with the estimator N(-se, se) it is P(Z > z + 1) (~0.17%)."""
    se, reps = 0.01, 4000
    worse = calibrate_finding("t2_popular", 0.0, _runs(-se, se, reps, 7), {"t2_popular": -se, "t2_popular_se": 0.001})
    assert worse.is_null
    want = sps.norm.sf(Z + 1)
    assert abs(worse.holds.rate - want) <= 3 * math.sqrt(want * (1 - want) / reps) + 1e-12
    # 3 population SEs above 0 is an effect: power, not type-I
    assert not calibrate_finding("t2_popular", 1.0, _runs(0.003, se, 10, 7),
                                 {"t2_popular": 0.003, "t2_popular_se": 0.001}).is_null
    # rho's claim is "< 0": a positive population rho is no effect either
    runs = [{"t4_rho": [0.3, -0.2, 0.8, 0.5]}]
    assert calibrate_finding("t4_rho", 1.0, runs, {"t4_rho": 0.3}, knobs=["turnover"]).is_null


def _world_runs(spread: float, se: float, se_w: float, reps: int, seed: int) -> tuple[list[dict], list[dict]]:
    """Replicate worlds whose own value varies (N(0.05, spread)); each replicate's estimate is N(own, se) with a
    correct normal interval, and its own-world run estimates the own value with noise se_w."""
    rng = np.random.default_rng(seed)
    own = rng.normal(0.05, spread, reps)
    est, w = rng.normal(own, se), rng.normal(own, se_w)
    runs = [{"t2_popular": [e, e - Z * se, e + Z * se, 0.5, 100, 1], "t2_each": {"emb": [e, e - Z * se, e + Z * se, 0.5, 100, 1]}}
            for e in est]
    owns = [{"t2_popular": [x, x - Z * se_w, x + Z * se_w, 0.5, 400, 1], "t2_each": {"emb": [x, x - Z * se_w, x + Z * se_w, 0.5, 400, 1]}}
            for x in w]
    return runs, owns


def test_own_world_coverage_measures_the_interval_against_its_own_world():
    """Intervals that are right about their own world (SE 0.004) but blind to the spread between worlds (SD 0.013):
    against the configuration's value they under-cover (the defect the own-world value removes); against each
    world's own value they cover at 2 Phi(z se / sqrt(se^2 + se_w^2)) - 1, which the measure also predicts."""
    se, se_w, spread, reps = 0.004, 0.002, 0.013, 3000
    runs, owns = _world_runs(spread, se, se_w, reps, 5)
    pop = {"t2_popular": 0.05, "t2_popular_se": 0.001, "t2_each": {"emb": {"value": 0.05, "se": 0.001}}}
    config = calibrate_finding("t2_popular", 1.0, runs, pop)
    want_config = 2 * sps.norm.cdf(Z * se / math.hypot(se, spread)) - 1  # ~0.46
    assert config.coverage.rate == pytest.approx(want_config, abs=4 * config.coverage.mcse)
    assert config.coverage_of == "configuration"
    world = calibrate_finding("t2_popular", 1.0, runs, pop, own=owns)
    want = 2 * sps.norm.cdf(Z * se / math.hypot(se, se_w)) - 1  # ~0.92
    assert world.coverage_of == "own world"
    assert world.coverage.rate == pytest.approx(want, abs=4 * world.coverage.mcse)
    assert world.coverage_expected == pytest.approx(want, rel=1e-9)
    assert abs(world.bias.bias) <= 4 * world.bias.mcse
    assert world.holds.rate == config.holds.rate  # "holds" is about the replicate's own interval either way
    assert world.coverage_config == config.coverage  # the configuration's coverage stays beside it
    # with several paradigms, each paradigm's row is measured the same way
    runs2 = [{**r, "t2_each": {**r["t2_each"], "text": r["t2_each"]["emb"]}} for r in runs]
    owns2 = [{**o, "t2_each": {**o["t2_each"], "text": o["t2_each"]["emb"]}} for o in owns]
    pop2 = {**pop, "t2_each": {"emb": {"value": 0.05}, "text": {"value": 0.05}}}
    both = calibrate_finding("t2_popular", 1.0, runs2, pop2, own=owns2)
    assert both.per_domain["text"]["coverage_of"] == "own world"
    assert both.per_domain["text"]["coverage"]["rate"] == pytest.approx(world.coverage.rate)


def test_lambda_star_own_world_coverage_against_known_truth():
    """Worlds whose own non-active lambda* varies between world seeds (SD 0.3 around 0.8); each replicate's
    interval is a correct normal interval (SE 0.2) about its own world's value, and its own-world run estimates that
    value with SE 0.1. Against the configuration's single value the intervals cover at
    2 Phi(z 0.2 / hypot(0.2, 0.3)) - 1 (~72%); against each replicate's own world at
    2 Phi(z 0.2 / hypot(0.2, 0.1)) - 1 (~92%), which the measure predicts from the own-world runs' intervals."""
    rng = np.random.default_rng(21)
    se, se_w, spread, reps = 0.2, 0.1, 0.3, 2000
    own = rng.normal(0.8, spread, reps)
    est, w = rng.normal(own, se), rng.normal(own, se_w)
    runs = [{"lambda_star": {"A": {"non_active": [x, x - Z * se, x + Z * se, 100]}}} for x in est]
    owns = [{"lambda_star": {"A": {"non_active": [x, x - Z * se_w, x + Z * se_w, 400]}}} for x in w]
    pop = {"lambda_star": {"A": {"non_active": 0.8}}}
    config = calibrate_finding("lambda_star", 1.0, runs, pop)
    assert config.coverage.rate == pytest.approx(2 * sps.norm.cdf(Z * se / math.hypot(se, spread)) - 1,
                                                 abs=4 * config.coverage.mcse)
    world = calibrate_finding("lambda_star", 1.0, runs, pop, own=owns)
    want = 2 * sps.norm.cdf(Z * se / math.hypot(se, se_w)) - 1
    assert world.coverage_of == "own world" and world.per_domain["A"]["coverage_of"] == "own world"
    assert world.coverage.rate == pytest.approx(want, abs=4 * world.coverage.mcse)
    assert world.coverage_expected == pytest.approx(want, rel=1e-9)
    assert world.coverage_config == config.coverage  # the configuration's coverage stays beside it
    assert world.per_domain["A"]["coverage_config"]["rate"] == pytest.approx(config.coverage.rate)
    assert abs(world.per_domain["A"]["bias"]["bias"]) <= 4 * world.per_domain["A"]["bias"]["mcse"]
    # replicates without an own-world run (None) are left out of the own-world coverage only
    part = calibrate_finding("lambda_star", 1.0, runs[:10], pop, own=owns[:4] + [None] * 6)
    assert part.coverage.n == 4 and part.coverage_config.n == 10
    with pytest.raises(ValueError, match="aligned"):
        calibrate_finding("lambda_star", 1.0, runs, pop, own=owns[:3])


def test_own_world_runs_sweep_only_for_lambda_star(tmp_path: Path):
    """The own-world run sweeps (another recipe) only where lambda*'s target is the own world; with both targets
    on the configuration there is no own-world run at all."""
    from mmgrid.sweep.calibration.study import calibrate_job

    def own_job(*over):
        cfg = load_grid("demo", ["sweeps.calibrate.replicates=2", *over])
        return calibrate_job(cfg, 1.0, 1000, tmp_path, population=True, own_world=True), cfg

    swept, _ = own_job()
    t2only, _ = own_job("sweeps.calibrate.lambda_population=config")
    assert "sweep" not in swept.kwargs and t2only.kwargs["sweep"] is False
    assert swept.kwargs["result_path"] != t2only.kwargs["result_path"]
    _, cfg = own_job("sweeps.calibrate.findings=[lambda_star]", "sweeps.calibrate.t2_population=config")
    assert len(grid_identity(cfg, tmp_path)["runs"]["1"]["own_world"]) == 2  # lambda* alone still needs them
    _, cfg = own_job("sweeps.calibrate.lambda_population=config", "sweeps.calibrate.t2_population=config")
    assert "own_world" not in grid_identity(cfg, tmp_path)["runs"]["1"]


def test_own_world_runs_must_align_with_the_replicates():
    runs, owns = _world_runs(0.01, 0.004, 0.002, 4, 0)
    with pytest.raises(ValueError, match="aligned"):
        calibrate_finding("t2_popular", 1.0, runs, {"t2_popular": 0.05}, own=owns[:3])


def test_own_world_on_the_first_replicates_only_measures_those(tmp_path: Path):
    """``own_world_replicates: k``: the study makes own-world runs for the first k replicates of each size, names
    only those in its identity, and the coverage counts k intervals (None marks a replicate without one)."""
    runs, owns = _world_runs(0.013, 0.004, 0.002, 12, 3)
    pop = {"t2_popular": 0.05, "t2_popular_se": 0.001, "t2_each": {"emb": {"value": 0.05, "se": 0.001}}}
    part = calibrate_finding("t2_popular", 1.0, runs, pop, own=owns[:5] + [None] * 7)
    first = calibrate_finding("t2_popular", 1.0, runs[:5], pop, own=owns[:5])
    assert part.coverage.n == 5 and part.coverage.hits == first.coverage.hits
    assert part.holds.n == 12  # "holds" still counts every replicate
    cfg = load_grid("demo", ["sweeps.calibrate.replicates=6", "sweeps.calibrate.own_world_replicates=2"])
    runs_id = grid_identity(cfg, tmp_path)["runs"]["1"]
    assert len(runs_id["replicates"]) == 6 and len(runs_id["own_world"]) == 2
    full = grid_identity(load_grid("demo", ["sweeps.calibrate.replicates=6"]), tmp_path)["runs"]["1"]
    assert runs_id["own_world"] == full["own_world"][:2]  # the same runs as the first two of a full study
    assert "own_world" not in grid_identity(load_grid("demo", ["sweeps.calibrate.t2_population=config",
                                                               "sweeps.calibrate.lambda_population=config"]),
                                            tmp_path)["runs"]["1"]
    with pytest.raises(ConfigError, match="own_world_replicates"):
        load_grid("demo", ["sweeps.calibrate.own_world_replicates=0"])


def _all_users(*rows):
    return {"lambda_star": {d: {"all": list(x)} for d, x in zip("ABCDE", rows)}}


def test_f5_varies_by_hand():
    """Disjoint 95% intervals of some pair = holds (the report's rule); the estimate is the range of the domains'
    lambda*; the MDE is that of a pair's difference (half-width sqrt(w_a^2 + w_b^2) / 2)."""
    runs = [_all_users([0.2, 0.1, 0.3, 9], [0.9, 0.8, 1.0, 9]),  # disjoint: holds, range 0.7
            _all_users([0.2, 0.0, 0.6, 9], [0.5, 0.4, 0.9, 9]),  # they overlap: does not hold, range 0.3
            _all_users([0.2, None, None, 9], [0.5, 0.4, 0.9, 9])]  # one domain without an interval: skipped
    res = calibrate_finding("f5_varies", 1.0, runs, {"f5_varies": 0.5})
    assert (res.holds.hits, res.holds.n, res.n) == (1, 2, 2)
    assert res.bias.bias == pytest.approx((0.7 + 0.3) / 2 - 0.5)
    assert not res.is_null and res.coverage is None
    se = np.mean([math.hypot(0.2, 0.2), math.hypot(0.6, 0.5)]) / 2 / Z  # the two pairs' implied SEs
    assert res.mde == pytest.approx((Z + sps.norm.ppf(0.8)) * se, rel=1e-6)
    assert calibrate_finding("f5_varies", 0.0, runs, {"f5_varies": 0.0}).is_null
    # the null world's domains are exchangeable: the range is 0 by symmetry, whatever the population runs drew
    knobs = ["turnover", "trend_contrast", "domain_contrast"]
    assert calibrate_finding("f5_varies", 0.0, runs, {"f5_varies": 0.35}, knobs=knobs).population == 0.0
    assert calibrate_finding("f5_varies", 0.0, runs, {"f5_varies": 0.35}, knobs=["trend"]).population == 0.35


def test_f5_varies_type_one_error_on_alike_domains_matches_the_range_law():
    """Five domains with the same lambda* and correct normal 95% intervals (SE 1): some pair is disjoint exactly
    when the range of the five estimates exceeds 2 z SE, whose probability the range's law gives (4.4%, below the
    5% a finding may err). The simulated rate of "holds" matches it within 4 MCSE."""
    from scipy import integrate

    rng = np.random.default_rng(7)
    reps, n = 4000, 5
    x = rng.normal(0.0, 1.0, (reps, n))
    runs = [_all_users(*([v, v - Z, v + Z, 100] for v in row)) for row in x]
    res = calibrate_finding("f5_varies", 0.0, runs, {"f5_varies": 0.0})
    r = 2 * Z
    inside, _ = integrate.quad(lambda t: n * sps.norm.pdf(t) * (sps.norm.cdf(t + r) - sps.norm.cdf(t)) ** (n - 1),
                               -12, 12)
    want = 1 - inside
    assert 0.04 < want < 0.05 and res.is_null
    assert res.holds.rate == pytest.approx(want, abs=4 * math.sqrt(want * (1 - want) / reps))


def test_where_the_grid_world_ranks_among_the_replicates():
    from mmgrid.sweep.calibration.study import _rank

    assert _rank(0.5, [0.1, 0.5, 0.9, 1.2]) == "1 below, 1 equal, 2 above"
    assert _rank(2.0, [0.1, 0.5]) == "2 below, 0 equal, 0 above"


def test_rho_null_is_zero_by_symmetry_only_when_the_domains_are_exchangeable():
    runs = [{"t4_rho": [r, r - 0.5, r + 0.5, 0.5]} for r in (-0.5, 0.0, 0.5, 1.0)]
    pop = {"t4_rho": -0.4}  # an estimated population value, noisy
    exch = calibrate_finding("t4_rho", 0.0, runs, pop, knobs=["turnover", "trend_contrast", "domain_contrast"])
    assert exch.population == 0.0 and exch.is_null
    # holds = interval below 0: only the first replicate (-1.0, 0.0) does not (0.0 is not below 0)
    assert exch.holds.hits == 0
    partial = calibrate_finding("t4_rho", 0.0, runs, pop, knobs=["turnover"])
    assert partial.population == -0.4 and not partial.is_null


def _curve(lams, peak):
    return {"lambdas": list(lams), "mean": [-(x - peak) ** 2 for x in lams], "n_users": 10}


def test_population_values_by_hand():
    lams = [0.0, 0.5, 1.0, 1.5]
    runs = []
    for peaks, gap, diff, n in (((1.5, 0.0, 0.5), (10.0, 200.0, 100.0), 0.02, 100), ((1.5, 0.5, 0.0), (12.0, 180.0, 90.0), 0.04, 300)):
        runs.append({"domains": ["A", "B", "C"], "avg_gap": dict(zip("ABC", gap)),
                     "curves": {d: {"non_active": _curve(lams, p), "all": _curve(lams, 1.0)} for d, p in zip("ABC", peaks)},
                     "t2_popular": [diff, 0, 0, 0.5, n, 1]})
    pop = population_values(runs)
    # A peaks at 1.5 in both; B: mean of -(x)^2 and -(x - .5)^2 peaks at 0.25 -> grid 0.0 and 0.5 tie, 0.5 is closer to 1
    assert pop["lambda_star"]["A"]["non_active"] == 1.5
    assert pop["lambda_star"]["B"]["non_active"] == 0.5
    assert pop["lambda_star"]["C"]["non_active"] == 0.5
    assert pop["avg_gap"]["B"] == pytest.approx(190.0)
    # gaps A 11 < C 95 < B 190; lambda* A 1.5, C 0.5, B 0.5 -> rho of (1, 3, 2) with (3, 1.5, 1.5)
    assert pop["t4_rho"] == pytest.approx(sps.spearmanr([11, 190, 95], [1.5, 0.5, 0.5]).statistic)
    assert pop["f5_not1"] == 0.0
    assert pop["f5_varies"] == 0.0  # every domain's all-users curve peaks at 1
    assert pop["t2_popular"] == pytest.approx((0.02 * 100 + 0.04 * 300) / 400)
    assert pop["t2_popular_se"] == pytest.approx(np.std([0.02, 0.04], ddof=1) / math.sqrt(2))


def test_lambda_star_coverage_per_domain():
    pop = {"lambda_star": {"A": {"non_active": 1.0}, "B": {"non_active": 0.5}}}
    runs = [{"lambda_star": {"A": {"non_active": [1.0, 0.8, 1.2, 50]}, "B": {"non_active": [1.0, 0.9, 1.1, 50]}}}] * 4
    res = calibrate_finding("lambda_star", 1.0, runs, pop)
    assert res.per_domain["A"]["coverage"]["rate"] == 1.0
    assert res.per_domain["B"]["coverage"]["rate"] == 0.0
    assert res.coverage.hits == 4 and res.coverage.n == 8
    assert res.per_domain["B"]["bias"]["bias"] == pytest.approx(0.5)


def test_replicate_recipe_names_what_it_computes_not_where(tmp_path: Path):
    cfg = load_grid("demo")
    a = replicate_grid(cfg, 1.0, 5, tmp_path / "a")
    b = replicate_grid(cfg, 1.0, 5, tmp_path / "b")
    assert recipe_hash(a) == recipe_hash(b)
    assert recipe_hash(replicate_grid(cfg, 0.0, 5, tmp_path)) != recipe_hash(a)
    assert recipe_hash(replicate_grid(cfg, 1.0, 6, tmp_path)) != recipe_hash(a)
    pop = replicate_grid(cfg, 1.0, 5, tmp_path, population=True)
    assert recipe_hash(pop) != recipe_hash(a)
    assert pop["world"]["user_scale"] == cfg.sweeps.calibrate.population_user_scale and pop["eval"]["max_users"] is None
    assert a["paradigms"] == [cfg.sweeps.temporal.paradigm] and a["exec"]["workers"] == 1
    # planted sizes multiply the grid's own knobs: size 1 is the grid's world (its recipe equals the grid's own),
    # size 0.5 halves each calibrated knob, a knob outside sweeps.calibrate.knobs keeps the grid's value
    assert a["world"]["plant"]["turnover"] == cfg.world.plant.turnover
    assert recipe_hash(a) == recipe_hash(replicate_grid(cfg, None, 5, tmp_path))
    half = replicate_grid(cfg, 0.5, 5, tmp_path)["world"]["plant"]
    assert all(half[k] == pytest.approx(0.5 * getattr(cfg.world.plant, k)) for k in cfg.sweeps.calibrate.knobs)
    assert half["text_signal"] == cfg.world.plant.text_signal and "text_signal" not in cfg.sweeps.calibrate.knobs
    three = load_grid("demo", ["world.plant.turnover=3", "world.plant.trend=0.5"])
    assert replicate_grid(three, 0.5, 5, tmp_path)["world"]["plant"]["turnover"] == 1.5
    assert replicate_grid(three, 0.5, 5, tmp_path)["world"]["plant"]["trend"] == 0.25
    assert a["exec"]["workers"] == 1
    # a replicate's own world with more users (with or without the sweep) is its own recipe
    own = replicate_grid(cfg, 1.0, 5, tmp_path, population=True, own_world=True)
    assert own["world"]["extend_users"] is True and pop["world"]["extend_users"] is False
    assert len({recipe_hash(own, sweep=False), recipe_hash(own), recipe_hash(pop, sweep=False), recipe_hash(pop)}) == 4
    # the default world.extend_users (false) hashes as a grid from before the key existed: cached results stay valid
    old = {**a, "world": {k: v for k, v in a["world"].items() if k != "extend_users"}}
    assert "extend_users" in a["world"] and recipe_hash(old) == recipe_hash(a)


def test_bad_calibrate_config_is_a_named_error(tmp_path: Path):
    with pytest.raises(ConfigError, match="knobs"):
        load_grid("demo", ["sweeps.calibrate.knobs=[colour]"])
    with pytest.raises(ConfigError, match="findings"):
        load_grid("demo", ["sweeps.calibrate.findings=[t9]"])
    with pytest.raises(ConfigError, match="share"):
        load_grid("demo", ["sweeps.calibrate.sizes=[0, 2]"])
    with pytest.raises(ConfigError, match="lambda_population: 'foo' is not one of 'world', 'config'"):
        load_grid("demo", ["sweeps.calibrate.lambda_population=foo"])
    assert main(["calibrate", "demo"]) == 2  # no --out
    # a planted size times the grid's knob leaves the knob's range (turnover 3 x 1.5 > 4): named, nothing written
    with pytest.raises(ConfigError, match=r"turnover: 4\.5 is out of range"):
        run_calibration(load_grid("demo", ["world.plant.turnover=3", "sweeps.calibrate.sizes=[0, 1.5]",
                                           "sweeps.calibrate.knobs=[turnover]"]), tmp_path / "cal", progress=False)
    assert not any(tmp_path.iterdir())


def test_plan_answers_users_per_seeds(capsys):
    assert main(["calibrate", "--plan", "--effect", "0.5", "--sd", "1.0", "--seeds", "1"]) == 0
    assert "32 test users" in capsys.readouterr().out  # ceil((2.8016 / 0.5)^2) = 32
    assert main(["calibrate", "--plan", "--effect", "0.005", "--sd", "0.2", "--seed-sd", "0.01", "--seeds", "1,2"]) == 0
    out = capsys.readouterr().out
    assert "not reachable" in out and "seeds are needed" in out
    assert main(["calibrate", "--plan", "--effect", "0.5"]) == 2


def test_smoke_run_of_mmgrid_calibrate(tmp_path: Path, capsys):
    """The whole chain on tiny worlds: one planted size, one replicate, one population world; then cached."""
    out = tmp_path / "cal"
    args = ["calibrate", "demo", "--quick", "--out", str(out), "world.scale=0.3", "train.max_examples=64",
            "sweeps.temporal.step=0.5", "sweeps.calibrate.sizes=[1.0]", "sweeps.calibrate.replicates=1",
            "sweeps.calibrate.population_user_scale=1.5", "exec.workers=1"]
    assert main(args) == 0
    data = json.loads((out / "calibration.json").read_text())
    assert {f["finding"] for f in data["findings"]} == {"lambda_star", "t4_rho", "f5_not1", "f5_varies", "t2_popular"}
    t2 = next(f for f in data["findings"] if f["finding"] == "t2_popular")
    assert t2["n"] == 1 and t2["holds"]["n"] == 1 and t2["mde"] > 0
    assert (out / "power_curve.png").stat().st_size > 0
    md = (out / "calibration.md").read_text()
    assert "| t2_popular | 1 |" in md and "MDE" in md
    # a replicate, its own world with more users (the Table 2 coverage), a population world, the grid's own world
    assert len(list((out / "replicates").glob("*.json"))) == 4
    assert t2["coverage_of"] == "own world" and "own world" in md
    lam = next(f for f in data["findings"] if f["finding"] == "lambda_star")  # the own world swept: lambda* too
    assert lam["coverage_of"] == "own world" and lam["coverage_config"]["n"] == lam["coverage"]["n"]
    # the study names what it measured: every run's recipe is a cached result file
    runs = data["grid"]["runs"]["1"]
    assert {f"{h}.json" for h in runs["replicates"] + runs["population"] + runs["own_world"]
            + [data["grid"]["grid_world"]]} == {p.name for p in (out / "replicates").glob("*.json")}
    # the grid's own world, ranked among the replicates of its planted size (size 1: the demo's own knobs)
    gw = data["grid_world"]
    assert gw["world_seed"] == load_grid("demo").world.seed and gw["size"] == 1.0 and gw["replicates"] == 1
    assert set(gw["lambda_star"]) and all(v["rank"].endswith("above") for v in gw["lambda_star"].values())
    assert f"The grid's own world (world seed {gw['world_seed']}" in md
    assert data["grid"]["name"] and len(data["grid"]["recipe"]) >= 12
    popfile = out / "population" / "1" / "population.json"
    assert json.loads(popfile.read_text())["values"]["n_runs"] == 1
    # a size-1 population run is the grid's own population: its entry for the shipped table is checked by recipe
    from mmgrid.cli.calibrate import QUICK
    from mmgrid.sweep.calibration.population import known_entry, population_key

    own = load_grid("demo", QUICK + args[5:-1])  # --quick and the overrides, without --out and the executor
    key, values = known_entry(own, popfile)
    assert key == population_key(own) and values["n_runs"] == 1
    with pytest.raises(ValueError, match="not this grid's"):
        known_entry(load_grid("demo", QUICK + args[5:-1] + ["train.max_examples=65"]), popfile)
    assert not (out / "runs").exists() or not any((out / "runs").iterdir())  # worlds removed (keep_runs false)
    before = {p.name: p.stat().st_mtime_ns for p in (out / "replicates").glob("*.json")}
    assert main(args) == 0  # cached by recipe: nothing is run again
    assert {p.name: p.stat().st_mtime_ns for p in (out / "replicates").glob("*.json")} == before


def test_population_sidecar_beside_the_world(tmp_path: Path, capsys):
    """`mmgrid calibrate --population` writes <data.root>/population.json keyed by the world and budget."""
    from mmgrid.cli.calibrate import QUICK
    from mmgrid.sweep.calibration.population import population_key, read_world_population

    over = [f"data.root={tmp_path / 'world'}", "world.scale=0.3", "train.max_examples=64", "sweeps.temporal.step=0.5",
            "sweeps.calibrate.population_user_scale=1.5", "exec.workers=1"]
    assert main(["calibrate", "demo", "--population", "--quick", *over]) == 0
    cfg = load_grid("demo", QUICK + over)
    pop = read_world_population(cfg)
    assert pop is not None and pop["n_runs"] == 1 and set(pop["lambda_star"]) == {"Phones", "Books", "Games"}
    cache = json.loads((tmp_path / "world" / "population.json").read_text())
    assert list(cache) == [population_key(cfg)]
    # another budget is another key: not read back
    assert read_world_population(load_grid("demo", QUICK + over + ["train.max_examples=65"])) is None
    assert "population values" in capsys.readouterr().out


def test_shipped_population_values_are_read_by_key_only(tmp_path: Path, monkeypatch):
    """The table that ships with mmgrid answers for exactly its world and budget; a sidecar wins over it."""
    from mmgrid.sweep.calibration import population as P

    cfg = load_grid("demo", [f"data.root={tmp_path / 'world'}"])
    known = tmp_path / "known.json"
    known.write_text(json.dumps({P.population_key(cfg): {"n_runs": 2, "t4_rho": -0.5}}))
    monkeypatch.setattr(P, "KNOWN", known)
    assert P.read_world_population(cfg) == {"n_runs": 2, "t4_rho": -0.5}
    assert P.read_world_population(load_grid("demo", [f"data.root={tmp_path / 'world'}", "train.max_examples=7"])) is None
    (tmp_path / "world").mkdir()
    (tmp_path / "world" / "population.json").write_text(json.dumps({P.population_key(cfg): {"n_runs": 3}}))
    assert P.read_world_population(cfg) == {"n_runs": 3}
    known.write_text("not json")  # a damaged table is no table
    (tmp_path / "world" / "population.json").unlink()
    assert P.read_world_population(cfg) is None


def test_every_paradigm_must_beat_most_popular_when_several_are_calibrated():
    ok, bad = [0.02, 0.01, 0.03, 0.5, 100, 1], [0.01, -0.01, 0.03, 0.5, 100, 1]
    runs = [{"t2_popular": ok, "t2_each": {"emb": ok, "semid": ok}},
            {"t2_popular": ok, "t2_each": {"emb": ok, "semid": bad}}]
    pop = population_values([{"domains": ["A"], "avg_gap": {"A": 1.0}, "curves": {}, **r} for r in runs])
    assert pop["t2_each"]["semid"]["value"] == pytest.approx(0.015)
    res = calibrate_finding("t2_popular", 1.0, runs, pop)
    assert res.holds.hits == 1 and res.holds.n == 2  # the second replicate: semid's interval straddles 0
    assert set(res.per_domain) == {"emb", "semid"}
    assert res.per_domain["semid"]["coverage"]["rate"] == 1.0  # 0.015 lies in both intervals
    # one paradigm: the swept paradigm's interval alone decides
    assert calibrate_finding("t2_popular", 1.0, [{"t2_popular": bad}], {"t2_popular": 0.0}).holds.hits == 0


def test_plan_reads_the_spreads_of_a_calibrate_run(tmp_path: Path, capsys):
    (tmp_path / "calibration.json").write_text(json.dumps({"t2_sd": {"user": 1.0, "seed": None}}))
    assert main(["calibrate", "--plan", "--effect", "0.5", "--from", str(tmp_path), "--seeds", "1"]) == 0
    out = capsys.readouterr().out
    assert "assuming 0" in out and "32 test users" in out
    assert main(["calibrate", "--plan", "--effect", "0.5", "--from", str(tmp_path / "none")]) == 2


def test_target_check_against_the_issue_targets():
    from mmgrid.sweep.calibration.measures import target_check

    reps = 400
    null = calibrate_finding("t2_popular", 0.0, _runs(0.0, 0.01, reps, 7), {"t2_popular": 0.0, "t2_popular_se": 0.001})
    assert target_check(null) == "type-I ok, coverage ok"
    weak = calibrate_finding("t2_popular", 1.0, _runs(0.01, 0.01, reps, 8), {"t2_popular": 0.01, "t2_popular_se": 0.001})
    assert target_check(weak).startswith("power below 80%")  # an effect of 1 SE: power ~17%
    biased = calibrate_finding("t2_popular", 1.0, _runs(0.05, 0.01, reps, 9), {"t2_popular": 0.02})
    assert "below 90%: a defect" in target_check(biased)


def test_lambda_star_coverage_against_a_noisy_population_value():
    """Correct normal intervals (SE 0.2) around each world's lambda*, judged against a population value that is
    itself off by one draw of SE 0.15: they cover it at 2 Phi(1.96 x 0.2 / 0.25) - 1 = 88%, which the measure
    predicts from the population runs' own intervals; the target check then names the noise, not the interval.
    Against the exact value the same intervals cover at 95% and nothing is expected below it."""
    from mmgrid.sweep.calibration.measures import target_check

    rng = np.random.default_rng(11)
    se, se_p, reps, truth = 0.2, 0.15, 3000, 0.8
    est = truth + rng.normal(0, se, reps)
    runs = [{"lambda_star": {"A": {"non_active": [x, x - Z * se, x + Z * se, 100]}}} for x in est]
    # two population runs whose intervals imply SE 0.15 * sqrt(2) each: their mean has SE 0.15
    w = Z * se_p * math.sqrt(2)
    pop_runs = [{"domains": ["A"], "avg_gap": {"A": 1.0},
                 "curves": {"A": {"non_active": {"lambdas": [0.0, 0.5, 1.0], "mean": [0.0, 1.0, 0.0]}}},
                 "lambda_star": {"A": {"non_active": [0.5, 0.5 - w, 0.5 + w, 100]}}}] * 2
    pop = population_values(pop_runs)
    assert pop["lambda_star_se"]["A"]["non_active"] == pytest.approx(se_p)
    noisy = {"lambda_star": {"A": {"non_active": truth + se_p}}, "lambda_star_se": pop["lambda_star_se"]}
    # the measured rate over draws of the population's error: average the coverage over many offsets
    offsets = rng.normal(0, se_p, 40)
    rates = [calibrate_finding("lambda_star", 1.0, runs, {**noisy, "lambda_star": {"A": {"non_active": truth + o}}}
                               ).coverage.rate for o in offsets]
    want = 2 * sps.norm.cdf(Z * se / math.hypot(se, se_p)) - 1  # ~0.88
    res = calibrate_finding("lambda_star", 1.0, runs, noisy)
    assert res.coverage_expected == pytest.approx(want, rel=1e-9)
    assert res.per_domain["A"]["coverage_expected"] == pytest.approx(want, rel=1e-9)
    assert float(np.mean(rates)) == pytest.approx(want, abs=0.03)
    assert res.per_domain["A"]["spread_ratio"] == pytest.approx(1.0, abs=0.05)  # one world: no extra spread
    low = calibrate_finding("lambda_star", 1.0, runs, {**noisy, "lambda_star": {"A": {"non_active": truth}}})
    low.coverage = type(low.coverage)(int(0.876 * reps), reps, 0.876, math.sqrt(0.876 * 0.124 / reps))
    assert "within 2 MCSE" in target_check(low) and "defect" not in target_check(low)
    low.coverage = type(low.coverage)(int(0.70 * reps), reps, 0.70, math.sqrt(0.70 * 0.30 / reps))
    assert "a defect" in target_check(low)
    exact = calibrate_finding("lambda_star", 1.0, runs, {"lambda_star": {"A": {"non_active": truth}}})
    assert exact.coverage.rate == pytest.approx(0.95, abs=4 * math.sqrt(0.95 * 0.05 / reps))
    assert math.isnan(exact.coverage_expected)


def test_the_packaged_demo_has_its_population_values():
    """known_populations.json is keyed by the demo's population recipes: a change of the demo's world, budget or
    evaluation (e.g. the most-popular rule) misses it, and this fails until the values are measured again."""
    from mmgrid.sweep.calibration.population import read_world_population

    cfg = load_grid("demo")
    cfg.data.root = "/nonexistent-mmgrid-world"  # no sidecar: only the packaged table can answer
    got = read_world_population(cfg)
    assert got is not None, "re-run `mmgrid calibrate demo --population` and update known_populations.json"
    assert got["t4_rho"] < 0 and 0 < got["t2_popular"] < 0.1 and set(got["lambda_star"]) == {
        "Books", "Games", "Health", "Phones", "Sports"}
    # the preset fitted to MMGRid's Amazon statistics ships its values too (bench/results/population_amazon_table1.md)
    at1 = load_grid("demo", ["world.preset=amazon_table1", "world.n_domains=6"])
    at1.data.root = "/nonexistent-mmgrid-world"
    got = read_world_population(at1)
    assert got is not None, ("re-run `python bench/calibration.py --population --record population_amazon_table1 "
                             "world.preset=amazon_table1 world.n_domains=6` and update known_populations.json")
    assert got["t4_rho"] < 0 and 0 < got["t2_popular"] < 0.1 and len(got["lambda_star"]) == 6


def test_a_grid_world_that_is_a_replicate_is_ranked_among_the_others(tmp_path: Path):
    """The demo's world seed can be one of the replicates' (world_seed + r): its summary leaves that replicate out
    of the ranks (a world is not ranked against itself) and says which replicate it is."""
    from mmgrid.render.calibration import grid_world_lines
    from mmgrid.sweep.calibration.study import CalibrationResult, grid_world_summary

    def rep(lam: float, rho: float, t2: float) -> dict:
        return {"lambda_star": {"A": {"non_active": [lam, lam - 0.2, lam + 0.2, 50], "all": [lam, lam - 0.2, lam + 0.2, 90]},
                                "B": {"non_active": [1.0, 0.8, 1.2, 50], "all": [1.0, 0.9, 1.1, 90]}},
                "t4_rho": [rho, rho - 0.3, rho + 0.3], "t2_popular": [t2, t2 - 0.01, t2 + 0.01],
                "f5_not1": {"holds": True}}

    runs = [rep(0.1, -0.9, 0.01), rep(0.5, -0.5, 0.03), rep(0.9, -0.1, 0.05)]
    cfg = load_grid("demo")
    c = cfg.sweeps.calibrate
    cfg.world.seed = c.world_seed + 1  # the middle replicate's world: run_calibration hands over its result
    res = CalibrationResult(tmp_path, [0.0, 1.0], list(c.knobs), 3, {}, [], 1.0, {1.0: runs}, runs[1])
    s = grid_world_summary(res, cfg)
    assert s["is_replicate"] == 1 and s["replicates"] == 2
    assert s["lambda_star"]["A"]["rank"] == "1 below, 0 equal, 1 above"  # not "1 equal": itself is left out
    assert s["t4_rho_rank"] == "1 below, 0 equal, 1 above" and s["t2_rank"] == "1 below, 0 equal, 1 above"
    assert s["f5_varies"] is True  # A's [0.3, 0.7] and B's [0.9, 1.1] are disjoint
    assert "the 2 other replicate worlds" in "\n".join(grid_world_lines(s))
    cfg.world.seed = c.world_seed + 3  # past the replicates: its own run, ranked among all of them
    res.grid_world = rep(0.5, -0.5, 0.03)
    s = grid_world_summary(res, cfg)
    assert s["is_replicate"] is None and s["replicates"] == 3
