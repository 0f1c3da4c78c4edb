"""The studies on a two-seed grid: the temporal sweep runs on every replicate (records carry the
seed and the per-user values), the cross-domain study on the first seed only."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sweep_fakes import DOMAINS, STARS, FakePrepared, fake_merge, theta
from mmgrid.config import GridConfig
from mmgrid.configtools import build
from mmgrid.eval.ranking import EvalResults, PerUser
from mmgrid.registry import Registry
from mmgrid.sweep.crossdomain import run_cross_domain
from mmgrid.sweep.temporal import run_temporal, temporal_results

N_USERS = 12


def _theta(d: str, period: str, seed: int) -> dict[str, torch.Tensor]:
    t = theta(d, period)
    return {"w": t["w"] + 0.1 * seed, "b": t["b"]}  # each replicate its own weights


@pytest.fixture()
def two_seeds(tmp_path):
    reg = Registry.open(tmp_path / "reg", durable=False)
    base = reg.put({"w": torch.zeros(4), "b": torch.zeros(())}, {"paradigm": "fakelin", "domain": "any", "period": "base"},
                   "base", seed=0)
    for seed in (0, 1):
        for d in DOMAINS:
            prev, role = base, "init"
            for period in ("pretrain", "p1", "p2"):
                prev = reg.put(_theta(d, period, seed), {"paradigm": "fakelin", "domain": d, "period": period},
                               "trained", parents=[(prev, role)], params={"stage": period}, seed=seed)
                role = "previous_stage"
    cfg = build(GridConfig, {
        "name": "t", "registry": str(tmp_path / "reg"), "prepared": str(tmp_path / "prep"),
        "train": {"seeds": [0, 1]},
        "sweeps": {"temporal": {"paradigm": "fakelin", "domains": ["A", "B"], "start": 0.0, "stop": 1.0, "step": 0.5},
                   "cross_domain": {"paradigms": ["fakelin"], "pairs": [["A", "B"]], "methods": {"average": {}},
                                    "alphas": [0.5]}},
    })
    return cfg, reg, FakePrepared()


def per_user_factory(cfg, name, paradigm, domain, prepared):
    """An evaluator answering with per-user values, as mmgrid.eval's does (group means = per-user means)."""
    w1 = theta(domain.name, "p1")["w"]
    users = np.arange(N_USERS, dtype=np.int64)
    active = users % 2 == 0

    def evaluate(model):
        star = STARS[domain.name]["all"]
        base = 1.0 / (1.0 + float(((model.w.detach() - (w1 + star)) ** 2).sum()))
        per = {"ndcg@10": base * (1 + users / 100.0), "recall@10": (users < 6).astype(float)}
        out = EvalResults(per_user=PerUser(users, active, per))
        for g, mask in (("all", np.ones(N_USERS, bool)), ("active", active), ("non_active", ~active)):
            out[g] = {**{m: float(v[mask].mean()) for m, v in per.items()}, "n": float(mask.sum())}
        return out

    return evaluate


def test_temporal_sweep_runs_on_every_seed(two_seeds) -> None:
    cfg, reg, prep = two_seeds
    df = run_temporal(cfg, reg, prep, evaluator_factory=per_user_factory)
    assert sorted(df["seed"].unique()) == [0, 1]
    assert len(df) == 2 * 2 * 3 * 3 * 3  # seeds x domains x lambdas x groups x (ndcg, recall, n)
    first = temporal_results(reg, paradigm="fakelin")
    both = temporal_results(reg, paradigm="fakelin", seed="all")
    assert set(first["seed"]) == {0} and len(both) == 2 * len(first) and set(both["seed"]) == {0, 1}
    assert set(temporal_results(reg, paradigm="fakelin", seed=1)["seed"]) == {1}
    # each seed swept its own t1 / t2
    p2 = {s: reg.resolve({"paradigm": "fakelin", "domain": "A", "period": "p2", "seed": s}) for s in (0, 1)}
    for s in (0, 1):
        assert set(both.loc[(both["domain"] == "A") & (both["seed"] == s), "p2_id"]) == {p2[s]}
    res = reg.results(study="temporal", metric="ndcg@10", seed=1)
    assert len(res) == 2 * 3 * 3
    for _, row in res.iterrows():
        pu = reg.per_user(row)
        assert pu["ndcg@10"].mean() == row["value"] and row["ci_low"] <= row["value"] <= row["ci_high"]
    again = run_temporal(cfg, reg, prep, evaluator_factory=per_user_factory)  # cached: the same rows
    assert sorted(map(tuple, again[["seed", "domain", "lambda", "group", "metric"]].values.tolist())) == \
        sorted(map(tuple, df[["seed", "domain", "lambda", "group", "metric"]].values.tolist()))


def test_cross_domain_runs_on_the_first_seed_only(two_seeds) -> None:
    cfg, reg, prep = two_seeds
    run_cross_domain(cfg, reg, prep, evaluator_factory=per_user_factory, merge_fn=fake_merge)
    res = reg.results(study="cross_domain")
    assert set(res["seed"]) == {0}
    recipe_inputs = set(res["recipe"])
    p2_seed1 = reg.resolve({"paradigm": "fakelin", "domain": "A", "period": "p2", "seed": 1})
    assert not any(p2_seed1 in r for r in recipe_inputs)
    assert res["per_user"].notna().all()


def test_period_ids_pick_the_asked_seed_else_the_lowest(two_seeds) -> None:
    from mmgrid.sweep.temporal import period_ids

    _, reg, _ = two_seeds
    ids = {s: period_ids(reg, "fakelin", "default", "A", ("p1", "p2"), s) for s in (0, 1)}
    assert ids[0] != ids[1] and all(reg.get(i).seed == s for s, pair in ids.items() for i in pair)
    assert period_ids(reg, "fakelin", "default", "A", ("p1", "p2")) == ids[0]  # no seed: the lowest


def test_predict_lambda_takes_lambda_star_from_every_seed_as_the_report(two_seeds) -> None:
    """`mmgrid predict-lambda` (and the lambda_hat* models it evaluates) reads lambda* off the seed-averaged
    curve, with the report's interval, not off the first seed's curve."""
    from mmgrid.sweep.lambda_model import predict_lambda
    from mmgrid.sweep.selection import select_lambda_star

    cfg, reg, prep = two_seeds
    run_temporal(cfg, reg, prep, evaluator_factory=per_user_factory)
    pred = predict_lambda(cfg, reg, prep, evaluate=False)
    both = temporal_results(reg, paradigm="fakelin", seed="all")
    for d in ("A", "B"):
        g = both[(both["domain"] == d) & (both["group"] == "all") & (both["metric"] == "ndcg@10")]
        by_seed = {s: select_lambda_star(x["lambda"].to_numpy(), x["value"].to_numpy()) for s, x in g.groupby("seed")}
        mean = g.groupby("lambda", as_index=False)["value"].mean()
        row = pred.stars[(pred.stars["domain"] == d) & (pred.stars["group"] == "all")].iloc[0]
        assert row["lambda_star"] == select_lambda_star(mean["lambda"].to_numpy(), mean["value"].to_numpy())
        assert row["ci_low"] <= row["lambda_star"] <= row["ci_high"]  # the report's interval comes along
        assert len(by_seed) == 2
