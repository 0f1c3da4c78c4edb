"""lambda* prediction end to end on the fake grid, and a new domain's answer."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mmgrid.errors import ConfigError
from mmgrid.sweep.lambda_model import answer_new_domain, evaluate_lambda_hat, predict_lambda
from mmgrid.sweep.temporal import run_temporal
from sweep_fakes import DOMAINS, GAPS, P_ACTIVE, STARS


def test_prediction_on_fake_grid(grid, counter):
    cfg, reg, prep = grid
    run_temporal(cfg, reg, prep, evaluator_factory=counter)
    pred = predict_lambda(cfg, reg, prep, evaluate=False)
    # non-active lambda* = 1.75 - 0.0025 * gap exactly: LOO recovers it, rho = -1
    np.testing.assert_allclose(pred.table["lambda_star"], [STARS[d]["non_active"] for d in DOMAINS])
    np.testing.assert_allclose(pred.loo["lambda_pred"], pred.loo["lambda_star"], atol=1e-9)
    np.testing.assert_allclose(pred.loo["lambda_hat"], [(1 - p) * STARS[d]["non_active"] + p
                                                       for d, p in zip(DOMAINS, P_ACTIVE)], atol=1e-9)
    assert math.isclose(pred.rho, -1.0) and pred.direction == "falls"
    ans = answer_new_domain(pred, {"avg_gap_days": 250.0, "p_active": 0.5})
    assert math.isclose(ans.lambda_pred, 1.75 - 0.0025 * 250, abs_tol=1e-9)
    assert math.isclose(ans.lambda_hat, 0.5 * ans.lambda_pred + 0.5, abs_tol=1e-9)
    with pytest.raises(ConfigError, match="p_active"):
        answer_new_domain(pred, {"avg_gap_days": 250.0})


def test_lambda_hat_models_are_stored_with_lineage(grid, counter):
    cfg, reg, prep = grid
    run_temporal(cfg, reg, prep, evaluator_factory=counter)
    pred = predict_lambda(cfg, reg, prep, evaluator_factory=counter)
    df = pred.evaluated
    assert set(df["study"]) == {"lambda_hat"} and set(df["domain"]) == set(DOMAINS)
    stored = reg.query(kind="merged")
    assert len(stored) == len(DOMAINS)
    cid = stored["id"].iloc[0]
    assert {p.role for p in reg.get(cid).parents} == {"merge_input"}
    assert not reg.results(id=cid).empty


def test_no_results_says_what_to_run(grid):
    cfg, reg, prep = grid
    with pytest.raises(ConfigError, match="sweep temporal"):
        predict_lambda(cfg, reg, prep, evaluate=False)


def test_unknown_feature(grid, counter):
    cfg, reg, prep = grid
    run_temporal(cfg, reg, prep, evaluator_factory=counter)
    cfg.sweeps.predict_lambda.features = ["nope"]
    with pytest.raises(ConfigError, match="avg_gap_days"):
        predict_lambda(cfg, reg, prep, evaluate=False)
