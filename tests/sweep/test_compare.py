"""Comparing two runs cell by cell (mmgrid.sweep.compare): pairing per user and seed, the
difference and its interval against hand computation and scipy, Holm, the cells that cannot be
paired, and two real tiny runs that differ in the learning rate."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import stats as sps

from mmgrid.registry import Registry
from mmgrid.render.compare import comparison_text
from mmgrid.sweep.compare.runs import CompareSpec, compare_runs

USERS = np.arange(10, 20, dtype=np.int64)  # ten users
ACTIVE = np.arange(10) < 4


def _cell(reg: Registry, coords: dict, seed: int, ndcg: np.ndarray, users: np.ndarray = USERS,
          metrics: tuple[str, ...] = ("ndcg@10",), kind: str = "trained") -> str:
    cid = reg.put({"w": torch.full((2,), float(seed))}, {"paradigm": "text", "variant": "default", **coords}, kind,
                  seed=seed)
    vals = {m: ndcg for m in metrics}
    rel = reg.put_per_user(users, ACTIVE[: len(users)], vals)
    reg.record_eval(cid, "test", "all", {m: float(np.mean(ndcg)) for m in metrics}, extra={"per_user": rel})
    return cid


@pytest.fixture()
def two(tmp_path: Path):
    a, b = Registry.open(tmp_path / "a"), Registry.open(tmp_path / "b")
    yield a, b
    a.close(), b.close()


def test_one_seed_difference_interval_and_p_against_scipy(two):
    """One cell, one seed: diff = mean(a - b) by hand; p = the exact sign-flip p of scipy's
    permutation_test; the interval close to scipy's percentile bootstrap of the mean."""
    a, b = two
    va = np.array([0.5, 0.2, 0.0, 1.0, 0.3, 0.4, 0.1, 0.6, 0.0, 0.9])
    vb = np.array([0.4, 0.1, 0.0, 0.8, 0.3, 0.1, 0.2, 0.3, 0.0, 0.6])
    _cell(a, {"domain": "Books", "period": "p2"}, 0, va)
    _cell(b, {"domain": "Books", "period": "p2"}, 0, vb)
    res = compare_runs(a, b, CompareSpec(n_resamples=20000))
    assert len(res.rows) == 1 and res.unpaired.empty
    r = res.rows.iloc[0]
    d = va - vb  # 0.1, 0.1, 0, 0.2, 0, 0.3, -0.1, 0.3, 0, 0.3
    assert r["diff"] == pytest.approx(1.2 / 10, rel=1e-12)
    assert r["mean_a"] == pytest.approx(va.mean()) and r["mean_b"] == pytest.approx(vb.mean())
    assert r["n_users"] == 10 and r["seeds"] == [0]
    exact = sps.permutation_test((d,), np.mean, permutation_type="samples", n_resamples=np.inf,
                                 alternative="two-sided").pvalue
    assert r["p"] == pytest.approx(exact, rel=1e-9)
    boot = sps.bootstrap((d,), np.mean, method="percentile", n_resamples=20000, random_state=0).confidence_interval
    width = boot.high - boot.low
    assert abs(r["ci_low"] - boot.low) < 0.1 * width and abs(r["ci_high"] - boot.high) < 0.1 * width
    assert r["p_holm"] == pytest.approx(r["p"])  # one cell: Holm changes nothing
    text = comparison_text(res)
    assert "+12.00 [" in text and "Books" in text


def test_seeds_pair_with_the_same_seed_and_holm_over_cells(two):
    """Two seeds: each seed's row pairs with the other run's row of that seed (a different
    order of writing changes nothing); the difference is the mean over seeds and users; Holm
    over two cells is min(1, 2 p_min) and max(that, p_max)."""
    a, b = two
    rng = np.random.default_rng(0)
    vals = {(run, dom, s): rng.random(10) for run in "ab" for dom in ("Books", "Phones") for s in (0, 1)}
    for dom in ("Books", "Phones"):
        for s in (0, 1):
            _cell(a, {"domain": dom, "period": "p2"}, s, vals[("a", dom, s)])
        for s in (1, 0):
            _cell(b, {"domain": dom, "period": "p2"}, s, vals[("b", dom, s)] - (0.3 if dom == "Books" else 0.0))
    res = compare_runs(a, b, CompareSpec(n_resamples=500))
    rows = res.rows.set_index("domain")
    for dom in ("Books", "Phones"):
        shift = 0.3 if dom == "Books" else 0.0
        want = np.mean([vals[("a", dom, s)] - (vals[("b", dom, s)] - shift) for s in (0, 1)])
        assert rows.loc[dom, "diff"] == pytest.approx(want, rel=1e-12) and rows.loc[dom, "seeds"] == [0, 1]
    p = rows["p"].to_numpy()
    lo, hi = sorted(p)
    want_holm = sorted([min(1.0, 2 * lo), max(min(1.0, 2 * lo), hi)])
    assert sorted(rows["p_holm"]) == pytest.approx(want_holm)
    assert rows.loc["Books", "ci_low"] > 0.0  # a shift of 0.3 on every user is found


def test_cells_that_cannot_be_paired_say_why(two):
    a, b = two
    v = np.linspace(0, 1, 10)
    _cell(a, {"domain": "Only", "period": "p2"}, 0, v)  # not in B
    _cell(a, {"domain": "Users", "period": "p2"}, 0, v)
    _cell(b, {"domain": "Users", "period": "p2"}, 0, v[:8], users=USERS[:8])  # two users fewer
    _cell(a, {"domain": "Metric", "period": "p2"}, 0, v)
    _cell(b, {"domain": "Metric", "period": "p2"}, 0, v, metrics=("recall@10",))  # another metric
    _cell(a, {"domain": "Seeds", "period": "p2"}, 0, v)
    _cell(b, {"domain": "Seeds", "period": "p2"}, 1, v)  # no seed in common
    _cell(a, {"domain": "Ok", "period": "p2"}, 0, v)
    _cell(b, {"domain": "Ok", "period": "p2"}, 0, v)
    res = compare_runs(a, b)
    why = dict(zip(res.unpaired["domain"], res.unpaired["reason"]))
    assert set(why) == {"Only", "Users", "Metric", "Seeds"} and list(res.rows["domain"]) == ["Ok"]
    assert "only in run A" in why["Only"]
    assert "different users" in why["Users"] and "2 only in run A" in why["Users"]
    assert "ndcg@10 recorded in run A only" in why["Metric"] and "recall@10" in why["Metric"]
    assert "no training seed in common" in why["Seeds"]
    assert res.rows.iloc[0]["diff"] == 0.0 and res.rows.iloc[0]["p"] == 1.0
    text = comparison_text(res)
    assert "cannot be paired (4):" in text and "domain=Users" in text


def test_study_rows_pair_by_their_coordinates_and_a_strategy_by_its_name(two):
    """Study rows (recipe evaluations, no checkpoint) pair by the study's recorded coordinates:
    a temporal lambda with the same lambda; a named strategy (lambda*) with the same strategy even
    where each run chose another lambda."""
    a, b = two
    v = np.linspace(0, 1, 10)
    for reg, star, shift in ((a, 1.3, 0.0), (b, 0.9, 0.2)):
        rel = reg.put_per_user(USERS, ACTIVE, {"ndcg@10": v - shift})
        for lam in (0.5, 1.0):
            reg.record_eval(None, "test", "all", {"ndcg@10": float(np.mean(v - shift))},
                            recipe={"method": "temporal", "lam": lam, "run": str(reg.root)},
                            extra={"per_user": rel, "study": "temporal", "paradigm": "emb", "domain": "Books",
                                   "lambda": lam, "seed": 0})
        reg.record_eval(None, "test", "all", {"ndcg@10": float(np.mean(v - shift))},
                        recipe={"method": "temporal", "lam": star, "run": str(reg.root)},
                        extra={"per_user": rel, "study": "continual", "paradigm": "emb", "domain": "Books",
                               "strategy": "lambda_star", "lambda": star, "seed": 0})
    res = compare_runs(a, b, CompareSpec(n_resamples=200))
    assert res.unpaired.empty, res.unpaired
    got = {(r["study"], r["lambda"] if r["study"] == "temporal" else r["strategy"]): r["diff"]
           for r in res.rows.to_dict("records")}
    assert got == {("temporal", 0.5): pytest.approx(0.2), ("temporal", 1.0): pytest.approx(0.2),
                   ("continual", "lambda_star"): pytest.approx(0.2)}
    only = compare_runs(a, b, CompareSpec(filters={"study": "none"}, n_resamples=200))
    assert only.rows.empty and only.unpaired.empty


def test_duplicates_use_the_newest_and_are_counted(two):
    a, b = two
    v = np.linspace(0, 1, 10)
    cid = _cell(a, {"domain": "Books", "period": "p2"}, 0, v)
    rel = a.put_per_user(USERS, ACTIVE, {"ndcg@10": v + 0.1})
    a.record_eval(cid, "test", "all", {"ndcg@10": float(np.mean(v + 0.1))}, extra={"per_user": rel})  # re-evaluated
    _cell(b, {"domain": "Books", "period": "p2"}, 0, v)
    res = compare_runs(a, b, CompareSpec(n_resamples=200))
    r = res.rows.iloc[0]
    assert r["diff"] == pytest.approx(0.1) and r["duplicates"] == 1


def test_filters_and_bad_spec(two):
    from mmgrid.errors import ConfigError

    a, b = two
    v = np.linspace(0, 1, 10)
    for reg in two:
        _cell(reg, {"domain": "Books", "period": "p1"}, 0, v)
        _cell(reg, {"domain": "Books", "period": "p2"}, 0, v)
    res = compare_runs(a, b, CompareSpec(filters={"period": "p2", "kind": "trained"}, n_resamples=100))
    assert list(res.rows["period"]) == ["p2"]
    with pytest.raises(ConfigError, match="unknown cell filter"):
        CompareSpec(filters={"colour": "red"})
    with pytest.raises(ConfigError, match="level"):
        CompareSpec(level=1.5)


def test_command_prints_the_table_and_exits_1_when_nothing_pairs(two, capsys):
    from mmgrid.cli import main

    a, b = two
    v = np.linspace(0, 1, 10)
    _cell(a, {"domain": "Books", "period": "p2"}, 0, v + 0.05)
    _cell(b, {"domain": "Books", "period": "p2"}, 0, v)
    assert main(["compare", str(a.root), str(b.root), "--metric", "ndcg@10", "--resamples", "200"]) == 0
    out = capsys.readouterr().out
    assert "A - B [interval]" in out and "+5.00 [" in out
    assert main(["compare", str(a.root), str(b.root), "--domain", "Nowhere"]) == 1
    assert "no cell could be paired" in capsys.readouterr().out
    assert main(["compare", str(a.root / "nowhere"), str(b.root)]) == 2  # named error, nothing written
    assert "neither a registry" in capsys.readouterr().err and not (a.root / "nowhere").exists()


@pytest.mark.slow
def test_two_tiny_runs_differing_in_the_learning_rate(tmp_path_factory: pytest.TempPathFactory, capsys):
    """Two real tiny grids (SASRec, 2 domains, 3 stages) built and evaluated with lr 1e-3 and
    3e-3: every trained cell pairs (same users, same seed), with a finite difference inside its
    interval, and the command prints them."""
    import dataclasses

    here = Path(__file__).resolve().parents[1] / "exec"
    if str(here) not in sys.path:
        sys.path.insert(0, str(here))
    from exec_tinygrid import tiny_grid

    from mmgrid.cli import main
    from mmgrid.eval.grid import evaluate_grid
    from mmgrid.query import Grid
    from mmgrid.train.build import build_grid

    regs = []
    for name, lr in (("registry-lr1", 1e-3), ("registry-lr3", 3e-3)):
        cfg = tiny_grid(tmp_path_factory, name)
        cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, lr=lr))
        plan = build_grid(cfg, progress=False)
        evaluate_grid(cfg, plan, progress=False)
        regs.append(Path(cfg.registry))
    res = Grid.open(regs[0]).compare(regs[1], metric="ndcg@10", kind="trained")
    assert res.unpaired.empty, res.unpaired
    sas, pop = res.rows[res.rows["paradigm"] == "sasrec"], res.rows[res.rows["paradigm"] == "popular"]
    assert len(sas) >= 2 and set(res.rows["paradigm"]) == {"sasrec", "popular"}
    for r in sas.to_dict("records"):
        assert np.isfinite(r["diff"]) and r["ci_low"] <= r["diff"] <= r["ci_high"] and r["n_users"] > 5
    assert (sas["diff"] != 0).any()  # the learning rate changed the trained models
    assert (pop["diff"] == 0).all() and (pop["p"] == 1).all()  # most-popular does not train: identical
    assert main(["compare", str(regs[0]), str(regs[1]), "--kind", "trained", "--resamples", "300"]) == 0
    out = capsys.readouterr().out
    assert "sasrec" in out and "A - B [interval]" in out
    print(out)
