"""One spelling of merge weights: the shared Weights parameters, the deprecated
``lambdas``, and the cross-domain study asking a method for Eq. 7's weights."""

from __future__ import annotations

import warnings

import pytest
import torch

from mmgrid.merge import merge
from mmgrid.merge.errors import MergeParamError
from mmgrid.merge.methods import eq7, get_method, method_names, validate_params, weighs

WEIGHING = {"average", "task_arithmetic", "ties", "dare", "ties_dare", "orthomerge", "gcwm",
            "breadcrumbs", "breadcrumbs_ties", "della", "della_linear", "nuslerp", "multislerp", "karcher"}


def test_every_method_that_weighs_its_inputs_uses_the_shared_type():
    assert {m for m in method_names() if weighs(get_method(m).Params)} == WEIGHING
    for m in WEIGHING:
        p = validate_params(m, {"weights": [0.25, 0.75]})
        assert p.per_input(2) == (0.25, 0.75)
        assert validate_params(m, eq7(0.3)).per_input(2) == pytest.approx((0.3, 0.7))


def test_old_spelling_lambdas_still_works_with_a_deprecation_message(models):
    ins, base = [models["a"], models["b"]], models["base"]
    for m in ("task_arithmetic", "ties", "orthomerge", "gcwm"):
        with pytest.warns(FutureWarning, match="'lambdas' is deprecated, use 'weights'"):
            old = merge(m, ins, base=base, lambdas=[0.3, 1.2])
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            new = merge(m, ins, base=base, weights=[0.3, 1.2])
        assert all(torch.equal(old[k], new[k]) for k in new), m
    with pytest.raises(MergeParamError, match="not both"):
        validate_params("ties", {"lambdas": [1.0, 1.0], "weights": [1.0, 1.0]})
    # temporal's Eq. 10 scalar is not an input weighting: no weights, lambda= is its alias
    assert not weighs(get_method("temporal").Params)
    assert validate_params("temporal", {"lambda": 0.4}).lam == 0.4


def test_weights_errors_name_the_problem():
    with pytest.raises(MergeParamError, match="either weights or alpha"):
        validate_params("task_arithmetic", {"weights": [1.0, 1.0], "alpha": 0.5}).per_input(2)
    with pytest.raises(MergeParamError, match="exactly 2 inputs"):
        validate_params("gcwm", {"alpha": 0.5}).per_input(3)
    with pytest.raises(MergeParamError, match="2 values for 3 inputs"):
        validate_params("orthomerge", {"weights": [1.0, 2.0]}).per_input(3)
    with pytest.raises(MergeParamError, match=r"outside \[0, 1\]"):
        validate_params("average", {"alpha": 1.5})


def test_eq7_alpha_gives_the_pair_weights(models):
    """average with alpha is alpha theta_i + (1 - alpha) theta_j (MMGRid Eq. 7 with WA);
    task arithmetic with alpha equals its explicit weights."""
    a, b, base = models["a"], models["b"], models["base"]
    out = merge("average", [a, b], alpha=0.25)
    for k, v in out.items():
        if v.is_floating_point():
            assert torch.allclose(v, 0.25 * a[k] + 0.75 * b[k], rtol=1e-6, atol=1e-7), k
    ta = merge("task_arithmetic", [a, b], base=base, alpha=0.25)
    tw = merge("task_arithmetic", [a, b], base=base, weights=[0.25, 0.75])
    assert all(torch.equal(ta[k], tw[k]) for k in ta)


def test_cross_domain_asks_the_method():
    from mmgrid.sweep.crossdomain import method_params

    assert method_params("ties_dare", {"p": 0.1}, 0.25) == ({"p": 0.1, "alpha": 0.25}, True)
    assert method_params("average", {}, 0.5) == ({"alpha": 0.5}, True)
    assert method_params("gcwm", {}, 1.0) == ({"alpha": 1.0}, True)
    assert method_params("temporal", {"lam": 2.0}, 0.5) == ({"lam": 2.0}, False)
