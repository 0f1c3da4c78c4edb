"""The rolling deployment study on a fake grid whose metric peaks where the test says: the hand-computed
lambda* from the past, the comparison with lambda = 1, the accuracy matrix, and that a deployment at t never
reads a checkpoint or a window after t."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from mmgrid.config import GridConfig
from mmgrid.configtools import build
from mmgrid.errors import MmgridError
from mmgrid.eval.ranking import EvalResults, PerUser
from mmgrid.registry import Registry
from sweep_fakes import FakePrepared  # noqa: F401  (registers the fake paradigm "fakelin")

STAGES = ["pretrain", "q1", "q2", "q3", "q4"]
PHASES = {"pretrain": [None, "2021-07-01"], "q1": ["2021-07-01", "2021-10-01"], "q2": ["2021-10-01", "2022-01-01"],
          "q3": ["2022-01-01", "2022-04-01"], "q4": ["2022-04-01", "2022-07-01"], "test": ["2022-07-01", "2022-10-01"]}
WINDOW_INDEX = {p: i for i, p in enumerate(PHASES)}
DOMAINS = ["A", "B"]
N_USERS = 30


class TwoDomains:
    domains = DOMAINS

    def domain(self, name):
        from sweep_fakes import FakeDomain

        return FakeDomain(name)


def window_evaluator(seen: list):
    """theta_k = k * ones (stage index k); on window j the metric of w peaks at (j - 0.5) * ones, so the lambda*
    of (theta_{s-2}, theta_{s-1}) on window s is 1.5 for every s, and lambda = 1.5 on (theta_{t-1}, theta_t) hits
    the next window's peak exactly."""
    def factory(cfg, name, paradigm, domain, prepared, window):
        seen.append(window)
        c = WINDOW_INDEX[window] - 0.5
        jitter = np.linspace(-0.01, 0.01, N_USERS)

        def evaluate(model):
            s = 1.0 / (1.0 + float(((model.w.detach() - c) ** 2).sum()))
            per = PerUser(np.arange(N_USERS), np.zeros(N_USERS, dtype=bool),
                          {"ndcg@10": s + jitter, "recall@10": 2 * s + jitter})
            return EvalResults({"all": {"ndcg@10": s, "recall@10": 2 * s, "n": N_USERS}}, per)
        return evaluate
    return factory


@pytest.fixture()
def rolling_grid(tmp_path):
    reg = Registry.open(tmp_path / "reg", durable=False)
    ids = {}
    for d in DOMAINS:
        prev, role = reg.put({"w": torch.zeros(4), "b": torch.zeros(())}, {"paradigm": "fakelin", "domain": d,
                                                                           "period": "base"}, "base"), "init"
        for k, period in enumerate(STAGES):
            prev = reg.put({"w": torch.full((4,), float(k)), "b": torch.tensor(0.5)},
                           {"paradigm": "fakelin", "domain": d, "period": period}, "trained",
                           parents=[(prev, role)], params={"stage": period})
            role = "previous_stage"
            ids[(d, period)] = prev
    cfg = build(GridConfig, {
        "name": "r", "registry": str(tmp_path / "reg"), "prepared": str(tmp_path / "prep"),
        "data": {"phases": PHASES},
        "train": {"stages": STAGES, "epochs": {s: 1 for s in STAGES}},
        "eval": {"activity_phase": "q4", "groups": ["all"]},
        "sweeps": {"temporal": {"paradigm": "fakelin", "start": 0.0, "stop": 1.5, "step": 0.25}},
    })
    return cfg, reg, TwoDomains(), ids


def strategies():
    import mmgrid.sweep.rolling as R

    return [s for s in R.available() if s.name in ("latest", "lambda*_past", "lambda_mean_past", "magmax")]


def test_timeline_deploys_each_period_on_the_next_window(rolling_grid):
    import mmgrid.sweep.rolling as R

    cfg = rolling_grid[0]
    assert R.timeline(cfg) == (STAGES, ["q2", "q3", "q4", "test"])


def test_lambda_from_the_past_matches_the_hand_computed_case(rolling_grid):
    import mmgrid.sweep.rolling as R

    cfg, reg, prepared, ids = rolling_grid
    seen: list = []
    study = R.run_rolling(cfg, reg, prepared, R.RollingOptions(strategies(), window_evaluator(seen)))
    rows = study.rows[study.rows["metric"] == "ndcg@10"]
    lam = reg.results(study=R.STUDY, strategy="lambda*_past", group="all", metric="ndcg@10")
    dep = lam[lam["deploy"].astype(bool) & (lam["domain"] == "A")]
    # t = 1 (q1): no earlier pair, lambda = 1; from t = 2 on: lambda*_{t-1} = 1.5 (hand-computed above)
    assert sorted(zip(dep["deployed_at"], dep["lambda"])) == [("q1", 1.0), ("q2", 1.5), ("q3", 1.5), ("q4", 1.5)]
    # lambda 1.5 on (theta_{t-1}, theta_t) = (t + 0.5) ones: exactly the next window's peak, metric 1;
    # latest = t ones: 1 / (1 + 4 * 0.25) = 0.5
    a = rows[(rows["domain"] == "A") & (rows["window"] == "q3")].set_index("strategy")
    assert a.loc["lambda*_past", "mean"] == pytest.approx(1.0, rel=1e-6)
    assert a.loc["latest", "mean"] == pytest.approx(0.5, rel=1e-6)
    assert a.loc["lambda*_past", "diff"] == pytest.approx(0.5, rel=1e-6)
    pooled = rows[(rows["domain"] == "all") & (rows["window"] == "all")].set_index("strategy")
    assert pooled.loc["latest", "diff"] == 0.0 and np.isnan(pooled.loc["latest", "p"])
    # pooled over the 4 windows x 2 domains: (0.5 + 3 x 1.0) / 4 vs 0.5
    assert pooled.loc["lambda*_past", "mean"] == pytest.approx(0.875, rel=1e-6)
    others = rows[rows["p"].notna()]
    assert (others["p_holm"] >= others["p"] - 1e-12).all()
    assert study.verdicts[R.CLAIM_PAST][0] == "holds" and "detects" not in study.verdicts[R.CLAIM_PAST][1]
    assert R.CLAIM_BEST in study.verdicts
    # the accuracy matrix: latest's R[i, j] = 1 / (1 + 4 (i - (j - 0.5))^2) over the windows q1..q4
    m = study.matrices[("A", "latest")]
    assert m["windows"] == ["q1", "q2", "q3", "q4"]
    R_hand = np.array([[1 / (1 + 4 * (i - (j - 0.5)) ** 2) for j in range(1, 5)] for i in range(1, 5)])
    assert np.allclose(m["R"], R_hand, rtol=1e-6)
    assert m["bwt"] == pytest.approx(np.mean([R_hand[3, i] - R_hand[i, i] for i in range(3)]), rel=1e-6)
    from mmgrid.render.report_rolling import rolling_text
    from mmgrid.sweep.studies import get_study

    assert "lambda*_past" in rolling_text(study)
    # `mmgrid study rolling` prints a summary (the studies layer renders no table): the four windows, no table
    summary = get_study("rolling").render(study)
    assert "over 4 windows" in summary and "|" not in summary
    # cached by recipe: a second run evaluates nothing
    assert R.evaluate_rolling(cfg, reg, prepared, R.RollingOptions(strategies(), window_evaluator([]))) == 0


def test_a_deployment_never_reads_a_checkpoint_or_window_after_it(rolling_grid):
    import mmgrid.sweep.rolling as R

    cfg, reg, prepared, ids = rolling_grid
    touched: list = []
    R.evaluate_domain(cfg, reg, prepared, "A", cfg.train.seed, R.RollingOptions(
        strategies(), window_evaluator([]), watch=lambda t, what, v: touched.append((t, what, v))))
    assert {t for t, _, _ in touched} == {1, 2, 3, 4}
    for t, what, v in touched:
        if what == "checkpoint":
            assert v in [ids[("A", s)] for s in STAGES[: t + 1]], (t, v)
        else:
            assert v in STAGES[: t + 1], (t, v)
    # and a look-ahead is refused outright
    past = R.Past([ids[("A", s)] for s in STAGES], STAGES, 2, lambda w, s: 0.0, reg)
    with pytest.raises(MmgridError, match="after it"):
        past.checkpoint(3)
    with pytest.raises(MmgridError, match="after it"):
        past.score("q3", {})


def test_later_checkpoints_poisoned_change_no_earlier_deployment(rolling_grid, tmp_path):
    """Deployments at t = 1, 2 are the same whether the later checkpoints are the real ones or garbage."""
    import mmgrid.sweep.rolling as R

    cfg, reg, prepared, ids = rolling_grid
    R.evaluate_domain(cfg, reg, prepared, "A", cfg.train.seed, R.RollingOptions(strategies(), window_evaluator([]),
                                                                               matrix=False))
    first = reg.results(study=R.STUDY, domain="A", metric="ndcg@10")
    # a second registry: the same q0..q2, then poisoned q3, q4
    reg2 = Registry.open(tmp_path / "reg2", durable=False)
    prev, role = reg2.put({"w": torch.zeros(4), "b": torch.zeros(())}, {"paradigm": "fakelin", "domain": "A",
                                                                        "period": "base"}, "base"), "init"
    for k, period in enumerate(STAGES):
        w = torch.full((4,), float(k)) if k <= 2 else torch.full((4,), 1e3)
        prev = reg2.put({"w": w, "b": torch.tensor(0.5)}, {"paradigm": "fakelin", "domain": "A", "period": period},
                        "trained", parents=[(prev, role)], params={"stage": period})
        role = "previous_stage"
    cfg2 = build(GridConfig, {**cfg.to_dict(), "registry": str(tmp_path / "reg2")})
    R.evaluate_domain(cfg2, reg2, prepared, "A", cfg.train.seed, R.RollingOptions(strategies(), window_evaluator([]),
                                                                                 matrix=False))
    second = reg2.results(study=R.STUDY, domain="A", metric="ndcg@10")
    key = ["strategy", "deployed_at", "window"]
    a = first[first["t"].isin([1, 2])].set_index(key)["value"].sort_index()
    b = second[second["t"].isin([1, 2])].set_index(key)["value"].sort_index()
    assert len(a) > 0 and a.index.equals(b.index) and np.allclose(a.to_numpy(), b.to_numpy(), rtol=1e-9)
    later = second[second["t"] == 3].set_index(key)["value"].sort_index()
    assert not np.allclose(later.to_numpy(), first[first["t"] == 3].set_index(key)["value"].sort_index().to_numpy())


def test_a_grid_too_short_to_roll_is_a_named_error(rolling_grid):
    import mmgrid.sweep.rolling as R
    from mmgrid.errors import ConfigError

    cfg = rolling_grid[0]
    short = build(GridConfig, {**cfg.to_dict(), "train": {"stages": ["pretrain", "q1"],
                                                          "epochs": {"pretrain": 1, "q1": 1}}})
    with pytest.raises(ConfigError, match="at least two incremental periods"):
        R.timeline(short)
    last = build(GridConfig, {**cfg.to_dict(), "data": {"phases": {k: v for k, v in PHASES.items() if k != "test"}}})
    with pytest.raises(ConfigError, match="no window after stage 'q4'"):
        R.timeline(last)


def test_the_report_section_and_the_grid_api(rolling_grid, tmp_path):
    import mmgrid.sweep.rolling as R
    from mmgrid.query import Grid
    from mmgrid.render.report_rolling import TITLE, rolling_html, rolling_markdown

    cfg, reg, prepared, _ = rolling_grid
    study = R.run_rolling(cfg, reg, prepared, R.RollingOptions(strategies(), window_evaluator([])))
    lines, figs = rolling_markdown(study, tmp_path)
    assert sorted(figs) == ["rolling_curves.png", "rolling_matrix.png"]
    assert all((tmp_path / f).stat().st_size > 1000 for f in figs)
    text = "\n".join(lines)
    assert R.CLAIM_PAST in text and "| lambda*_past |" in text and "BWT" in text
    page = rolling_html(study)
    assert TITLE == "Deployment over time" and "rolling-curves" in page and "rolling-matrix" in page
    # one heatmap a strategy: every strategy with a matrix, the reference first, latest's matrix as computed
    from mmgrid.render.report_rolling import strategy_matrices

    mats = strategy_matrices(study)
    assert list(mats)[0] == "latest" and set(mats) == {s for _, s in study.matrices}
    assert set(mats) == {s.name for s in strategies()}
    assert all(f'"text":"{s}"' in page for s in mats)  # a titled heatmap panel a strategy
    want = np.mean([np.array(study.matrices[(d, "magmax")]["R"]) for d in DOMAINS], axis=0) * 100
    assert np.allclose(mats["magmax"]["R"], want)
    got = Grid.open(reg.root).rolling(paradigm="fakelin")
    assert set(got.rows["strategy"]) == set(study.rows["strategy"])
    assert got.verdicts[R.CLAIM_PAST][0] == study.verdicts[R.CLAIM_PAST][0]


def test_a_shared_first_stage_is_read_from_the_first_seed(rolling_grid, tmp_path):
    """train.shared_stages: [pretrain] trains theta_0 once, on the first seed; seed 1's replicate rolls from it
    (there is no seed-1 pretrain checkpoint to find)."""
    import mmgrid.sweep.rolling as R

    cfg, _, prepared, _ = rolling_grid
    reg = Registry.open(tmp_path / "seeds", durable=False)
    base = reg.put({"w": torch.zeros(4), "b": torch.zeros(())}, {"paradigm": "fakelin", "domain": "A",
                                                                 "period": "base"}, "base")
    pre = reg.put({"w": torch.zeros(4), "b": torch.tensor(0.5)}, {"paradigm": "fakelin", "domain": "A",
                                                                  "period": "pretrain"}, "trained",
                  parents=[(base, "init")], params={"stage": "pretrain"}, seed=0)
    for seed in (0, 1):
        prev = pre
        for k, period in enumerate(STAGES[1:], 1):
            prev = reg.put({"w": torch.full((4,), float(k + seed)), "b": torch.tensor(0.5)},
                           {"paradigm": "fakelin", "domain": "A", "period": period}, "trained",
                           parents=[(prev, "previous_stage")], params={"stage": period, "s": seed}, seed=seed)
    d = cfg.to_dict()
    two = build(GridConfig, {**d, "registry": str(tmp_path / "seeds"),
                             "train": {**d["train"], "seeds": [0, 1], "shared_stages": ["pretrain"]}})
    touched: list = []
    R.evaluate_domain(two, reg, prepared, "A", 1, R.RollingOptions(strategies(), window_evaluator([]), matrix=False,
                                                                  watch=lambda t, w, v: touched.append((w, v))))
    assert ("checkpoint", pre) in touched


# --------------------------------------------------------------------------- lambda_hat_past (MMGRid Eq. 11)


def fake_statistics(asked: list):
    """avg_gap_days = the number of phases read (k + 1 at stage k), p_active = 0.1 k: known by hand."""
    def stats(prepared, data, phases):
        asked.append((data.name, list(phases)))
        return {"avg_gap_days": float(len(phases)), "p_active": 0.1 * (len(phases) - 1)}
    return stats


def hat_strategies():
    import mmgrid.sweep.rolling as R

    return [s for s in R.available() if s.name in ("latest", "lambda_hat_past")]


def test_lambda_hat_past_is_eq11_fitted_on_pairs_before_t_only():
    """Hand-made pairs: the non-active lambda* (Eq. 11 inverted) lies on 1 + 0.1 x; the fit predicts it at x_t and
    Eq. 11 blends it with p_t. A pair after t (a wild lambda*) changes nothing; too few pairs fall back."""
    import mmgrid.sweep.rolling as R

    pairs = R.PastPairs()
    for d, p in (("A", 0.5), ("B", 0.25)):
        # stage k's statistics: x_k (the features of pair k + 1) and p_k (the share on stage k's window)
        for k in (1, 2, 3):
            pairs.stats[(d, k)] = {"avg_gap_days": float(k + 1 + (d == "B")), "p_active": p}
        # pair s: lambda*_s is Eq. 11 of the line's value at x_{s-1}
        pairs.stars[d] = {s: (1 - p) * (1.0 + 0.1 * pairs.stats[(d, s - 1)]["avg_gap_days"]) + p for s in (2, 3)}
    pairs.stats[("A", 3)] = {"avg_gap_days": 6.0, "p_active": 0.5}
    pairs.stars["B"][4] = 50.0  # measured after t = 3: must not be read
    pairs.stats[("B", 4)] = {"avg_gap_days": 1.0, "p_active": 0.0}
    lam, rule, n = R.lambda_hat_past(pairs, "A", 3, ["avg_gap_days"], (0.0, 3.0))
    assert (rule, n) == (R.RULE_FIT, 4)
    assert lam == pytest.approx(0.5 * (1.0 + 0.1 * 6.0) + 0.5, rel=1e-9)  # 1.3
    assert R.lambda_hat_past(pairs, "A", 3, ["avg_gap_days"], (0.0, 1.2))[0] == 1.2  # clipped to the grid
    # t = 2: two pairs (s = 2 of A and B) cannot fit a line and leave a residual: the mean of A's past lambda*
    lam2, rule2, n2 = R.lambda_hat_past(pairs, "A", 2, ["avg_gap_days"], (0.0, 3.0))
    assert (rule2, n2) == (R.RULE_MEAN, 2) and lam2 == pytest.approx(pairs.stars["A"][2])
    assert R.lambda_hat_past(R.PastPairs(), "A", 1, ["avg_gap_days"], (0.0, 3.0)) == (1.0, R.RULE_ONE, 0)


def test_lambda_hat_past_in_the_study_matches_an_independent_fit(rolling_grid):
    """Both domains: lambda*_s = 1.5 for every s (the fixture), p_s = 0.1 s, x_{s-1} = s; at t the line through
    (s, (1.5 - p_s) / (1 - p_s)) for s = 2..t (each domain once) predicts at x_t = t + 1, blended with p_t = 0.1 t."""
    import mmgrid.sweep.rolling as R

    cfg, reg, prepared, _ = rolling_grid
    d = cfg.to_dict()
    d["sweeps"]["temporal"] = {**d["sweeps"]["temporal"], "stop": 2.0}
    cfg = build(GridConfig, d)
    asked: list = []
    R.evaluate_rolling(cfg, reg, prepared, R.RollingOptions(hat_strategies(), window_evaluator([]), matrix=False,
                                                            statistics=fake_statistics(asked)))
    got = reg.results(study=R.STUDY, strategy="lambda_hat_past", group="all", metric="ndcg@10")
    got = got[got["deploy"].astype(bool)]
    for t in (1, 2, 3, 4):
        s = np.arange(2, t + 1, dtype=float)
        if 2 * len(s) < 3:
            want, rule = (1.0, R.RULE_ONE) if t == 1 else (1.5, R.RULE_MEAN)
        else:
            slope, icpt = np.polyfit(np.concatenate([s, s]), np.concatenate([(1.5 - 0.1 * s) / (1 - 0.1 * s)] * 2), 1)
            want, rule = float(np.clip((1 - 0.1 * t) * (icpt + slope * (t + 1)) + 0.1 * t, 0.0, 2.0)), R.RULE_FIT
        for dom in DOMAINS:
            row = got[(got["domain"] == dom) & (got["t"] == t)].iloc[0]
            assert row["lambda"] == pytest.approx(want, abs=1e-8), (dom, t)
            assert row["lambda_rule"] == rule
    # the statistics were only ever asked of the phases up to a stage, never of a window after the last stage
    assert all(ph == STAGES[: len(ph)] for _, ph in asked) and {len(ph) for _, ph in asked} == {2, 3, 4, 5}


def test_lambda_hat_past_never_reads_after_t(rolling_grid):
    import mmgrid.sweep.rolling as R

    cfg, reg, prepared, ids = rolling_grid
    touched: list = []
    R.evaluate_rolling(cfg, reg, prepared, R.RollingOptions(
        hat_strategies(), window_evaluator([]), statistics=fake_statistics([]),
        watch=lambda t, what, v: touched.append((t, what, v))))
    assert {t for t, _, _ in touched} == {1, 2, 3, 4} and any(w == "window" for _, w, _ in touched)
    allowed = {t: {ids[(d, s)] for d in DOMAINS for s in STAGES[: t + 1]} for t in range(1, 5)}
    for t, what, v in touched:
        assert (v in allowed[t]) if what == "checkpoint" else (v in STAGES[: t + 1]), (t, what, v)
    past = R.Past([ids[("A", s)] for s in STAGES], STAGES, 2, lambda w, s: 0.0, reg)
    with pytest.raises(MmgridError, match="after it"):
        past.statistics(3, lambda phases: {})
    assert past.statistics(2, lambda phases: {"n": len(phases)}) == {"n": 3}


def test_lambda_hat_past_with_an_unknown_feature_is_a_named_error_before_anything_is_recorded(rolling_grid):
    import mmgrid.sweep.rolling as R
    from mmgrid.errors import ConfigError

    cfg, reg, prepared, _ = rolling_grid
    d = cfg.to_dict()
    d["sweeps"]["predict_lambda"] = {**d["sweeps"].get("predict_lambda", {}), "features": ["no_such_stat"]}
    bad = build(GridConfig, d)
    with pytest.raises(ConfigError, match="no_such_stat"):
        R.evaluate_rolling(bad, reg, prepared, R.RollingOptions(hat_strategies(), window_evaluator([]),
                                                                statistics=fake_statistics([])))
    assert reg.results(study=R.STUDY).empty


def test_period_stats_by_hand_and_blind_to_later_phases():
    import polars as pl

    from mmgrid.data.stats import period_stats

    day = 86_400_000
    windows = {"p0": (0, 10 * day), "p1": (10 * day, 20 * day), "p2": (20 * day, 30 * day)}
    inter = pl.DataFrame({"user_idx": [0, 1, 0, 2, 1], "item_idx": [0, 0, 1, 2, 3],
                          "timestamp": [0, 4 * day, 12 * day, 15 * day, 25 * day],
                          "phase": ["p0", "p0", "p1", "p1", "p2"]})
    items = pl.DataFrame({"item_idx": [0, 1, 2, 3], "first_seen_ms": [0, 12 * day, 5 * day, 25 * day]})
    examples = pl.DataFrame({"phase": ["p1", "p1", "p1", "p2"], "user_idx": [0, 2, 3, 1]})
    got = period_stats(inter, items, examples, windows, ["p0", "p1"])
    # gaps in days: 0, 4, 0, 10 -> 3.5; p1's items 1 (new in p1) and 2 (seen at day 5): 1/2 new;
    # p1's example users {0, 2, 3}: user 0 active in p0 -> 1/3
    assert got == pytest.approx({"avg_gap_days": 3.5, "new_share": 0.5, "p_active": 1 / 3})
    later = inter.with_columns(pl.when(pl.col("phase") == "p2").then(pl.lit(99 * day)).otherwise(pl.col("timestamp"))
                               .alias("timestamp"))
    assert period_stats(later, items, examples, windows, ["p0", "p1"]) == got


def test_an_inconclusive_verdict_states_its_minimum_detectable_effect(rolling_grid):
    """Each user's value moves with the model by user-specific noise around the same mean: no difference to see,
    and the verdict says how large one it could have seen."""
    import mmgrid.sweep.rolling as R
    from mmgrid.stats.power import mde_from_interval

    cfg, reg, prepared, _ = rolling_grid
    d = cfg.to_dict()
    d["sweeps"]["temporal"] = {**d["sweeps"]["temporal"], "stop": 1.0}
    cfg = build(GridConfig, d)

    def factory(cfg, name, paradigm, domain, prepared, window):
        rng = np.random.default_rng(WINDOW_INDEX[window])
        noise = rng.normal(0, 0.05, N_USERS)

        def evaluate(model):
            w = float(model.w.detach().sum())
            per = 0.3 + noise * np.cos(w * np.arange(N_USERS))
            return EvalResults({"all": {"ndcg@10": float(per.mean()), "recall@10": float(per.mean()), "n": N_USERS}},
                               PerUser(np.arange(N_USERS), np.zeros(N_USERS, dtype=bool),
                                       {"ndcg@10": per, "recall@10": per}))
        return evaluate

    study = R.run_rolling(cfg, reg, prepared, R.RollingOptions(
        [s for s in R.available() if s.name in ("latest", "lambda*_past", "magmax")], factory, matrix=False))
    v, evidence = study.verdicts[R.CLAIM_PAST]
    assert v == "inconclusive"
    lo, hi = (float(x) for x in evidence.split("[")[1].split("]")[0].split(", "))
    shown = float(evidence.split("detects |difference| >= ")[1].split(" ")[0])
    # MDE = (z_0.975 + z_0.8) x SE, SE = width / (2 x 1.96): about 0.71 x the interval's width
    assert shown == pytest.approx(mde_from_interval(lo, hi, 0.95), abs=0.005)
    assert shown == pytest.approx(2.8016 * (hi - lo) / (2 * 1.95996), abs=0.005) and "80% power" in evidence


def _cells(diffs: dict[str, list[float]], n_users: int = 20) -> dict:
    """A study's values: one domain, one window per entry of each strategy's list, every user of window j at
    ``latest`` + that difference (latest at 0; a spread of +-0.001 over users, the same in every window)."""
    spread = np.linspace(-0.001, 0.001, n_users)
    vals = {("A", "latest", f"q{j}", f"w{j}"): (np.arange(n_users), np.zeros((1, n_users)), [0])
            for j in range(len(next(iter(diffs.values()))))}
    for strat, ds in diffs.items():
        for j, d in enumerate(ds):
            vals[("A", strat, f"q{j}", f"w{j}")] = (np.arange(n_users), (d + spread)[None, :], [0])
    return vals


def test_the_best_strategy_is_judged_at_the_family_level_and_pooled_intervals_span_the_windows():
    """Window differences 1, 1, 3, 3 (user spread tiny): the pooled difference 2 has SE sqrt(s^2 / 4) with
    s^2 = 4 / 3 over the 4 windows, 0.5774; the 95% interval 2 -/+ t_{3, 0.975} 0.5774 = 2 -/+ 3.1824 x 0.5774 = 2 -/+ 1.8374 lies above
    0, the family interval of the best of two, 2 -/+ t_{3, 0.9875} 0.5774 = 2 -/+ 4.1765 x 0.5774 = 2 -/+ 2.4113, does not; the
    interval over the users alone would be about 2 -/+ 0.2."""
    import mmgrid.sweep.rolling as R

    study = R.RollingStudy("ndcg@10", pd.DataFrame(), windows=["w0", "w1", "w2", "w3"])
    R._verdicts(study, _cells({"lambda*_past": [1.0, 1.0, 3.0, 3.0], "magmax": [0.0, 0.0, 0.0, 0.0]}))
    past, best = study.judged[R.CLAIM_PAST], study.judged[R.CLAIM_BEST]
    assert (past["ci_low"], past["ci_high"]) == pytest.approx((2 - 1.8374, 2 + 1.8374), abs=2e-4)
    assert study.verdicts[R.CLAIM_PAST][0] == "holds" and "over the 4 (domain, window) cells" in study.verdicts[
        R.CLAIM_PAST][1]
    assert best["strategy"] == "lambda*_past" and best["level"] == pytest.approx(0.975)
    assert (best["ci_low"], best["ci_high"]) == pytest.approx((2 - 2.4113, 2 + 2.4113), abs=2e-4)
    v, evidence = study.verdicts[R.CLAIM_BEST]
    assert v == "inconclusive" and "family level 97.50%" in evidence and "at 80% power" in evidence
    # with lambda*_past the only strategy compared, the family level is 95%: the claim holds
    alone = R.RollingStudy("ndcg@10", pd.DataFrame(), windows=["w0", "w1", "w2", "w3"])
    R._verdicts(alone, _cells({"lambda*_past": [1.0, 1.0, 3.0, 3.0]}))
    assert alone.verdicts[R.CLAIM_BEST][0] == "holds" and alone.judged[R.CLAIM_BEST]["level"] == pytest.approx(0.95)
    # every strategy below latest at the family level: the claim does not hold
    worse = R.RollingStudy("ndcg@10", pd.DataFrame(), windows=["w0", "w1"])
    R._verdicts(worse, _cells({"magmax": [-1.0, -1.01], "opcm": [-2.0, -2.01]}))
    assert worse.verdicts[R.CLAIM_BEST][0] == "does not hold"


def test_the_pooled_row_is_over_the_cells_and_a_window_row_over_its_users():
    import mmgrid.sweep.rolling as R

    vals = _cells({"lambda*_past": [1.0, 1.0, 3.0, 3.0]})
    rows = pd.DataFrame(R._rows(vals, ["w0", "w1", "w2", "w3"], "ndcg@10"))
    pooled = rows[(rows.domain == "all") & (rows.window == "all") & (rows.strategy == "lambda*_past")].iloc[0]
    assert (pooled.diff_low, pooled.diff_high) == pytest.approx((2 - 1.8374, 2 + 1.8374), abs=2e-4)
    assert pooled.ci_low == pytest.approx(pooled.diff_low) and pooled.p == pytest.approx(0.0405, abs=5e-4)  # 2 P(t_3 > 2 / 0.5774)
    one = rows[(rows.domain == "A") & (rows.window == "w2") & (rows.strategy == "lambda*_past")].iloc[0]
    assert one["diff"] == pytest.approx(3.0) and one.diff_high - one.diff_low < 0.002  # users only: +-0.001
