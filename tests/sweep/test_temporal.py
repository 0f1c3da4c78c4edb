"""The temporal sweep on a fake registry grid: lambda* known by construction."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sweep_fakes import DOMAINS, PARADIGM, STARS, LinModel, theta
from mmgrid.errors import MergeError
from mmgrid.sweep.interpolate import InPlaceInterpolator, interpolate_state
from mmgrid.sweep.selection import lambda_stars
from mmgrid.sweep.temporal import run_temporal, temporal_results


def test_in_place_equals_materialised_state():
    m = LinModel()
    t1, t2 = theta("A", "p1"), theta("A", "p2")
    t2["b"] = t1["b"].clone()  # unchanged tensor: not touched
    it = InPlaceInterpolator(m, t1, t2)
    assert it.n_changed == 1
    for lam in (0.0, 0.7, 1.0, 1.5):
        it.apply(lam)
        ref = interpolate_state(t1, t2, lam)
        torch.testing.assert_close(m.w.detach(), ref["w"])
    it.apply(0.0)
    torch.testing.assert_close(m.w.detach(), t1["w"])


def test_interpolator_rejects_unknown_names():
    with pytest.raises(MergeError, match="no tensor"):
        InPlaceInterpolator(LinModel(), {"x": torch.zeros(2)}, {"x": torch.ones(2)})


def test_sweep_finds_lambda_star_and_records_without_checkpoints(grid, counter):
    cfg, reg, prep = grid
    n_ckpt = len(reg.query())
    PARADIGM.loads.clear()
    df = run_temporal(cfg, reg, prep, evaluator_factory=counter)
    assert len(reg.query()) == n_ckpt  # no sweep point was stored
    assert counter.factories == DOMAINS and PARADIGM.loads == DOMAINS  # one model, one evaluator a domain
    assert counter.calls == 7 * len(DOMAINS)  # 0, 0.25, ..., 1.5
    stars = lambda_stars(df).set_index(["domain", "group"])["lambda_star"]
    for d, groups in STARS.items():
        for g, s in groups.items():
            assert stars[(d, g)] == s
    # the registry holds the same numbers, traceable to the input ids
    back = temporal_results(reg, paradigm="fakelin")
    assert len(back) == len(df)
    merged = back.merge(df, on=["domain", "group", "lambda", "metric"], suffixes=("", "_run"))
    np.testing.assert_allclose(merged["value"], merged["value_run"])
    p2 = reg.resolve({"paradigm": "fakelin", "domain": "A", "period": "p2"})
    assert set(back.loc[back["domain"] == "A", "p2_id"]) == {p2}


def test_rerun_is_a_cache_hit_and_eval_settings_are_part_of_the_recipe(grid, counter):
    cfg, reg, prep = grid
    first = run_temporal(cfg, reg, prep, evaluator_factory=counter)
    calls = counter.calls
    again = run_temporal(cfg, reg, prep, evaluator_factory=counter)
    assert counter.calls == calls  # nothing evaluated again
    key = ["domain", "group", "lambda", "metric"]
    a, b = first.sort_values(key).reset_index(drop=True), again.sort_values(key).reset_index(drop=True)
    np.testing.assert_allclose(a["value"], b["value"])
    assert list(a["recipe_hash"]) == list(b["recipe_hash"])
    cfg.eval.max_users = 10  # another evaluation setting: another recipe, evaluated afresh
    run_temporal(cfg, reg, prep, evaluator_factory=counter)
    assert counter.calls == 2 * calls
