"""TIES's sign rule (unweighted / weighted) and DARE's rescale
(inverse_keep / l1 / none) as options; the injectable masks; defaults unchanged."""

from __future__ import annotations

import pytest
import torch

from mmgrid.merge import masks, merge
from mmgrid.merge.errors import MergeParamError
from mmgrid.merge.methods import params_dict, validate_params


def t(*xs):
    return torch.tensor(xs, dtype=torch.float32)


Z = {"w": t(0.0, 0.0)}
A = {"w": t(1.0, 2.0)}   # tau_1
B = {"w": t(-3.0, 1.0)}  # tau_2


def test_sign_rule_hand_case_ties():
    """Entry 0: unweighted mass 1 - 3 = -2 elects '-'; weighted 3*1 + 0.5*(-3) = 1.5 elects '+'.
    Entry 1: both positive, both rules elect '+'."""
    kw = dict(base=Z, density=1.0, scope="tensor", weights=[3.0, 0.5])
    un = merge("ties", [A, B], sign_rule="unweighted", **kw)["w"]
    wt = merge("ties", [A, B], sign_rule="weighted", **kw)["w"]
    # disjoint mean: entry 0 = 0.5*(-3)/0.5 = -3 (unweighted) or 3*1/3 = 1 (weighted);
    # entry 1 = (3*2 + 0.5*1) / 3.5 either way
    assert torch.allclose(un, t(-3.0, 6.5 / 3.5))
    assert torch.allclose(wt, t(1.0, 6.5 / 3.5))
    # combine=sum: sign-masked weighted sum, entry 0 = 0.5*(-3) or 3*1
    un_s = merge("ties", [A, B], sign_rule="unweighted", combine="sum", **kw)["w"]
    wt_s = merge("ties", [A, B], sign_rule="weighted", combine="sum", **kw)["w"]
    assert torch.allclose(un_s, t(-1.5, 6.5)) and torch.allclose(wt_s, t(3.0, 6.5))


def test_sign_rule_on_ties_dare_and_the_whole_model_scope():
    kw = dict(base=Z, density=1.0, p=0.0, weights=[3.0, 0.5])
    assert torch.allclose(merge("ties_dare", [A, B], sign_rule="weighted", **kw)["w"], t(1.0, 6.5 / 3.5))
    assert torch.allclose(merge("ties_dare", [A, B], **kw)["w"], t(-3.0, 6.5 / 3.5))
    # scope=model (the fast pass takes the unweighted rule; the weighted one runs the reference path)
    assert torch.allclose(merge("ties", [A, B], base=Z, density=1.0, weights=[3.0, 0.5], sign_rule="weighted")["w"],
                          t(1.0, 6.5 / 3.5))


def test_equal_weights_make_the_rules_agree(models):
    ins = [models["a"], models["b"], models["c"]]
    for kw in ({}, {"weights": [0.4, 0.4, 0.4], "combine": "sum"}):
        un = merge("ties", ins, base=models["base"], **kw)
        wt = merge("ties", ins, base=models["base"], sign_rule="weighted", **kw)
        assert all(torch.allclose(un[k].float(), wt[k].float(), rtol=1e-6, atol=1e-7) for k in un)


def _keep(pattern):
    def fn(key, index, drop, shape):
        return torch.tensor(pattern[index], dtype=torch.bool).reshape(shape)
    return fn


def test_dare_rescale_hand_case():
    """tau = (1, 2, 3, 4), p = 0.5, mask keeps entries 0 and 2: m tau = (1, 0, 3, 0)."""
    base, m = {"w": t(0, 0, 0, 0)}, {"w": t(1, 2, 3, 4)}
    with masks.injected_masks(_keep([[True, False, True, False]])):
        inv = merge("dare", [m], base=base, p=0.5)["w"]
        l1 = merge("dare", [m], base=base, p=0.5, rescale="l1")["w"]
        none = merge("dare", [m], base=base, p=0.5, rescale="none")["w"]
    assert torch.equal(inv, t(2, 0, 6, 0))              # / (1 - p)
    assert torch.allclose(l1, t(2.5, 0, 7.5, 0))        # * ||tau||_1 / ||m tau||_1 = 10 / 4
    assert torch.equal(none, t(1, 0, 3, 0))
    assert float(l1.abs().sum()) == pytest.approx(10.0)  # the invariant: L1 norm kept


def test_l1_rescale_keeps_each_tensors_l1_norm(models):
    out = merge("dare", [models["a"]], base=models["base"], p=0.6, rescale="l1", seed=3)
    for k, v in out.items():
        if v.is_floating_point():
            tau = models["a"][k] - models["base"][k]
            assert float((v - models["base"][k]).abs().sum()) == pytest.approx(float(tau.abs().sum()), rel=1e-5), k


def test_ties_dare_rescale_applies_to_dares_survivors():
    base, m = {"w": t(0, 0, 0, 0)}, {"w": t(1, 2, 3, 4)}
    with masks.injected_masks(_keep([[True, False, True, False]])):
        out = merge("ties_dare", [m], base=base, p=0.5, density=1.0, rescale="l1")["w"]
    assert torch.allclose(out, t(2.5, 0, 7.5, 0))


def test_injected_seeded_masks_reproduce_the_default_draw(models):
    ins = [models["a"], models["b"]]
    want = merge("dare", ins, base=models["base"], p=0.4, seed=7)
    seen = []

    def same(key, index, drop, shape):
        seen.append((key, index, drop))
        return masks.seeded_mask(7, key, index, drop, shape)

    with masks.injected_masks(same):
        got = merge("dare", ins, base=models["base"], p=0.4, seed=7)
    assert all(torch.equal(want[k], got[k]) for k in want)
    assert {(k, i) for k, i, _ in seen} >= {("layers.0.q.weight", 0), ("layers.0.q.weight", 1)}
    assert all(d == 0.4 for _, _, d in seen)


def test_an_injected_mask_of_the_wrong_shape_is_named():
    with masks.injected_masks(lambda key, i, drop, shape: torch.ones(3, dtype=torch.bool)):
        with pytest.raises(MergeParamError, match="injected mask for tensor 'w', input 0"):
            merge("dare", [{"w": t(1, 2)}], base={"w": t(0, 0)}, p=0.5)


def test_defaults_keep_the_recorded_parameters_and_results(models):
    """New options with their defaults leave the recorded params (and so ids) as they were."""
    assert set(params_dict(validate_params("ties", {}))) == {"weights", "alpha", "density", "scope", "combine", "scale"}
    assert set(params_dict(validate_params("dare", {}))) == {"weights", "alpha", "p", "scale", "seed"}
    assert "sign_rule" not in params_dict(validate_params("ties_dare", {}))
    assert params_dict(validate_params("ties", {"sign_rule": "weighted"}))["sign_rule"] == "weighted"
    ins = [models["a"], models["b"], models["c"]]
    for m, kw in (("ties", {"sign_rule": "unweighted"}), ("dare", {"rescale": "inverse_keep"})):
        a, b = merge(m, ins, base=models["base"]), merge(m, ins, base=models["base"], **kw)
        assert all(torch.equal(a[k], b[k]) for k in a), m
