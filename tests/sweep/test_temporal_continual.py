"""The continual-merging comparison of the temporal study on the tiny real grid of tests/eval:
every strategy recorded with per-user values, cached by recipe, compared with lambda = 1."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "eval"))
from jobs_tinygrid import WorkerLikeExecutor, built_grid  # noqa: E402


@pytest.fixture(scope="module")
def study_grid(tmp_path_factory):
    from mmgrid.data.dataset import load_prepared
    from mmgrid.registry import Registry

    cfg, _ = built_grid(tmp_path_factory, "registry-continual")
    return cfg, Registry.open(cfg.registry), load_prepared(cfg.prepared)


def test_study_records_compares_and_caches(study_grid, monkeypatch):
    import mmgrid.sweep.continual as C

    cfg, reg, prepared = study_grid
    domains = list(prepared.domains)
    # lambda_hat* as `mmgrid predict-lambda` would have recorded it (here: given)
    monkeypatch.setattr(C, "lambdas_of", lambda cfg, reg: {"lambda*": {}, "lambda_hat*": {d: 0.8 for d in domains}})
    study = C.run_continual(cfg, reg, prepared)
    rows = study.rows
    strategies = {"lambda=1", "lambda_hat*", *C.CONTINUAL}
    seeds = len(cfg.train.seed_list)
    per_domain = rows[rows["domain"] != "all"]
    assert set(per_domain["strategy"]) == strategies and set(per_domain["domain"]) == set(domains)
    assert set(rows["group"]) >= {"all", "active", "non_active"}
    assert (per_domain["n_seeds"] == seeds).all()
    ref = rows[rows["strategy"] == "lambda=1"]
    assert np.allclose(ref["diff"], 0.0) and ref["p"].isna().all()  # lambda = 1 against itself
    others = rows[rows["strategy"] != "lambda=1"]
    assert others["p"].between(0, 1).all() and (others["p_holm"] >= others["p"] - 1e-12).all()
    assert (others["diff_low"] <= others["diff"]).all() and (others["diff"] <= others["diff_high"]).all()
    # lambda = 1 is theta_t2: its recorded mean equals the plain evaluation of p2 on the same users
    assert study.best_baseline in C.CONTINUAL
    assert study.verdict in ("holds", "does not hold", "inconclusive")
    assert study.verdict_line().startswith(f"- **{study.verdict}** at 95%: {C.CLAIM}")
    from mmgrid.render.continual import render

    text = render(study)
    assert "| lambda=1 |" in text or "lambda=1" in text and C.CLAIM in text
    # cached by recipe: a second run evaluates nothing
    assert sum(C.evaluate_domain(cfg, reg, prepared, d, s, lams={"lambda_hat*": {d: 0.8}})
               for s in cfg.train.seed_list for d in domains) == 0
    # a different lambda_hat* is a new recipe: only that strategy is evaluated
    assert C.evaluate_domain(cfg, reg, prepared, domains[0], cfg.train.seed_list[0],
                             lams={"lambda_hat*": {domains[0]: 0.9}}) == 1


def test_the_sequence_and_the_hand_checked_reference(study_grid):
    """theta_0 is the checkpoint t1 was fine-tuned from (the pretrain stage); the study's lambda = 1
    record is theta_t2's evaluation (the same users, the same numbers as the grid's own eval)."""
    import mmgrid.sweep.continual as C

    cfg, reg, prepared = study_grid
    d = prepared.domains[0]
    p0, p1, p2 = C.sequence_ids(cfg, reg, d, cfg.train.seed_list[0])
    assert reg.get(p0).coords["period"] == "pretrain"
    assert {p.id for p in reg.get(p2).parents} == {p1}
    res = reg.results(study=C.STUDY, metric=cfg.sweeps.temporal.metric, group="all")
    ref = res[(res["strategy"] == "lambda=1") & (res["domain"] == d) & (res["seed"].astype(float) == cfg.train.seed_list[0])]
    assert len(ref) >= 1 and math.isfinite(float(ref["value"].iloc[-1]))


def test_executor_runs_give_the_same_records(tmp_path_factory):
    """One job per (seed, domain) through the worker-like executor: the same strategies recorded."""
    import mmgrid.sweep.continual as C
    from mmgrid.data.dataset import load_prepared
    from mmgrid.registry import Registry

    cfg, _ = built_grid(tmp_path_factory, "registry-continual-jobs")
    reg, prepared = Registry.open(cfg.registry), load_prepared(cfg.prepared)
    ex = WorkerLikeExecutor()
    study = C.run_continual(cfg, reg, prepared, executor=ex)
    assert len(ex.jobs) == len(cfg.train.seed_list) * len(prepared.domains)
    assert set(study.rows["strategy"]) == {"lambda=1", *C.CONTINUAL}
    assert study.verdict == "inconclusive" and "neither lambda_hat* nor lambda*" in study.evidence
