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
        assert torch.equal(m.w.detach(), ref["w"])  # what is evaluated is what would be stored
        exact = t1["w"].double() + lam * (t2["w"].double() - t1["w"].double())
        torch.testing.assert_close(m.w.detach().double(), exact, rtol=2 ** -22, atol=2 ** -22)
    it.apply(0.0)
    assert torch.equal(m.w.detach(), t1["w"])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_in_place_on_a_model_sharing_theta_t1s_storage(dtype):
    """A model built on theta_t1's own tensors (load_state_dict(assign=True)) still gets
    every point right: the interpolator computes from its own copies, not from the
    tensor it writes. bf16 models get Eq. 10 in float32, rounded once."""
    g = torch.Generator().manual_seed(5)
    t1 = {"w": torch.randn(64, generator=g).to(dtype), "b": torch.tensor(0.0, dtype=dtype)}
    t2 = {"w": (t1["w"].float() + torch.randn(64, generator=g)).to(dtype), "b": torch.tensor(0.0, dtype=dtype)}
    kept = {k: v.clone() for k, v in t1.items()}
    m = LinModel()
    m.w = torch.nn.Parameter(torch.zeros(64))
    m = m.to(dtype)
    m.load_state_dict(t1, assign=True)
    assert m.w.data_ptr() == t1["w"].data_ptr()
    it = InPlaceInterpolator(m, t1, t2)
    for lam in (1.5, 0.3, 1.5, 0.0):
        it.apply(lam)
        assert torch.equal(m.w.detach(), interpolate_state(kept, t2, lam)["w"])
        a, b = kept["w"].double(), t2["w"].double()
        exact = a + lam * (b - a)
        u = 2 ** -8 if dtype == torch.bfloat16 else 2 ** -24
        assert torch.all((m.w.detach().double() - exact).abs() <= u * exact.abs() + 3 * 2 ** -24 * (a.abs() + b.abs()))
    assert torch.equal(m.w.detach(), kept["w"])


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
