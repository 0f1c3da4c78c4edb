"""One table of all methods x shared checks, plus the hypothesis properties."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mmgrid.merge import merge
from mmgrid.merge.methods import get_method, method_names, validate_params

ALL = method_names()


def _inputs(method, models):
    if method == "temporal":
        return [models["a"], models["b"]], None
    return [models["a"], models["b"], models["c"]], models["base"]


@pytest.mark.parametrize("method", ALL)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_shared_checks(method, dtype, models):
    cast = {k: {n: (v.to(dtype) if v.is_floating_point() else v) for n, v in m.items()} for k, m in models.items()}
    ins, base = _inputs(method, cast)
    out = merge(method, ins, base=base, seed=1) if "seed" in validate_params(method, {}).__dict__ else merge(method, ins, base=base)
    again = merge(method, ins, base=base, seed=1) if "seed" in validate_params(method, {}).__dict__ else merge(method, ins, base=base)
    assert list(out) == list(ins[0])
    for k, v in out.items():
        assert v.dtype == ins[0][k].dtype and v.shape == ins[0][k].shape  # dtype and shapes preserved
        if v.is_floating_point():
            assert torch.isfinite(v.float()).all()  # no NaN
        assert torch.equal(v, again[k])  # deterministic for a seed
    assert torch.equal(out["codes"], ins[0]["codes"])  # int tensors pass through


@pytest.mark.parametrize("method", [m for m in ALL if get_method(m).symmetric])
def test_symmetric_methods_ignore_order(method, models):
    ins, base = _inputs(method, models)
    a = merge(method, ins, base=base)
    b = merge(method, ins[::-1], base=base)
    for k in a:
        assert torch.allclose(a[k].float(), b[k].float(), atol=1e-5), k


@pytest.mark.parametrize("method", ["task_arithmetic", "ties", "dare", "ties_dare", "orthomerge", "gcwm"])
def test_zero_weight_gives_base(method, models):
    params = {"lambdas": [0.0]} if method != "ties_dare" and method != "ties" else {"lambdas": [0.0]}
    out = merge(method, [models["a"]], base=models["base"], **params)
    for k, v in out.items():
        if method == "orthomerge" and v.ndim == 2 and "embed" not in k:
            continue  # the rotation part is not weighted by lambda (Eq. 14)
        assert torch.allclose(v.float(), models["base"][k].float(), atol=1e-6), k


floats = st.floats(-3, 3, allow_nan=False, width=32)
vec = st.lists(floats, min_size=1, max_size=6)


@settings(max_examples=30, deadline=None)
@given(vec, st.integers(0, 1000))
def test_temporal_endpoints(values, seed):
    g = torch.Generator().manual_seed(seed)
    t1 = {"w": torch.tensor(values)}
    t2 = {"w": torch.tensor(values) + torch.randn(len(values), generator=g)}
    assert torch.equal(merge("temporal", [t1, t2], lam=0.0)["w"], t1["w"])
    assert torch.equal(merge("temporal", [t1, t2], lam=1.0)["w"], t2["w"])  # lerp at 1 is t2 exactly


@settings(max_examples=30, deadline=None)
@given(vec, st.integers(1, 4))
def test_average_of_identical_is_that_model(values, n):
    m = {"w": torch.tensor(values)}
    assert torch.allclose(merge("average", [m] * n)["w"], m["w"], atol=1e-6)


@settings(max_examples=30, deadline=None)
@given(vec, vec, st.sampled_from(["model", "tensor"]))
def test_ties_one_model_density_one_is_that_model(values, bvals, scope):
    n = min(len(values), len(bvals))
    m, b = {"w": torch.tensor(values[:n])}, {"w": torch.tensor(bvals[:n])}
    assert torch.allclose(merge("ties", [m], base=b, density=1.0, scope=scope)["w"], m["w"], atol=1e-5)


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 10_000), st.floats(0.05, 0.6))
def test_orthomerge_exact_rotation_recovered(seed, scale):
    from mmgrid.merge.geometry import cayley

    g = torch.Generator().manual_seed(seed)
    w0 = torch.randn(7, 4, generator=g)
    a = torch.randn(4, 4, generator=g)
    w = w0 @ cayley(scale * (a - a.T)).T
    out = merge("orthomerge", [{"w": w}], base={"w": w0})["w"]
    assert torch.allclose(out, w, atol=1e-4)


@settings(max_examples=5, deadline=None)
@given(st.floats(0.05, 0.8), st.integers(0, 100))
def test_dare_unbiased_statistically(p, seed):
    base = {"w": torch.zeros(50_000)}
    m = {"w": torch.full((50_000,), 2.0)}
    out = merge("dare", [m], base=base, p=p, seed=seed)["w"]
    # mean of 50k iid draws: sd = 2 sqrt(p/(1-p)) / sqrt(50k) <= 0.02
    assert abs(float(out.mean()) - 2.0) < 0.1
