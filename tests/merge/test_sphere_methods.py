"""slerp, nuslerp, multislerp, karcher, model_stock, nearswap, passthrough: hand-computed
small cases, their invariants, and one test per entry point (API, file pass, recipe, CLI).

The expected values are worked out by hand in the comments (angles in degrees)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fastpass_data import _same, trio  # noqa: F401  (trio is a fixture)
from mmgrid.merge import merge, merge_to_file
from mmgrid.merge.errors import MergeParamError

E1, E2 = torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0])
R2 = 1 / math.sqrt(2)


def sd(t: torch.Tensor) -> dict:
    return {"w": t.clone()}


def close(a: torch.Tensor, b, tol: float = 1e-6) -> bool:
    return torch.allclose(a, torch.as_tensor(b, dtype=a.dtype), rtol=tol, atol=tol)


# --- slerp ---------------------------------------------------------------------------

def test_slerp_hand_cases():
    # orthogonal unit vectors, Omega = 90: t = 1/2 -> 45 deg, t = 1/3 -> 30 deg
    assert close(merge("slerp", [sd(E1), sd(E2)], t=0.5)["w"], [R2, R2])
    assert close(merge("slerp", [sd(E1), sd(E2)], t=1 / 3)["w"], [math.sqrt(3) / 2, 0.5])
    # norms are not interpolated: s0 = s1 = sin 45 / sin 90 on 2 e1, 3 e2
    assert close(merge("slerp", [sd(2 * E1), sd(3 * E2)], t=0.5)["w"], [2 * R2, 3 * R2])
    # colinear (cos 1 > 0.9995): linear (1 - t) a + t b
    assert close(merge("slerp", [sd(torch.tensor([1.0, 2.0])), sd(torch.tensor([2.0, 4.0]))], t=0.25)["w"], [1.25, 2.5])
    # cos 60 deg per flattened tensor of a matrix: s = sin 30 / sin 60 = 1 / sqrt(3)
    a, b = torch.tensor([[1.0, 0.0], [1.0, 0.0]]), torch.tensor([[0.0, 1.0], [1.0, 0.0]])
    assert close(merge("slerp", [sd(a), sd(b)], t=0.5)["w"], (a + b) / math.sqrt(3))


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from([torch.float32, torch.bfloat16]))
def test_slerp_endpoints_are_the_inputs_and_equal_norms_stay_on_the_sphere(seed, dtype):
    g = torch.Generator().manual_seed(seed)
    a, b = torch.randn(5, 3, generator=g), torch.randn(5, 3, generator=g)
    A, B = {"w": a.to(dtype)}, {"w": b.to(dtype)}
    assert torch.equal(merge("slerp", [A, B], t=0.0)["w"], A["w"])
    assert torch.equal(merge("slerp", [A, B], t=1.0)["w"], B["w"])
    b = b * (a.norm() / b.norm())
    out = merge("slerp", [sd(a), sd(b)], t=0.37)["w"]
    assert math.isclose(float(out.norm()), float(a.norm()), rel_tol=1e-5)  # on the circle of radius r


def test_slerp_bad_input():
    with pytest.raises(MergeParamError, match="exactly 2"):
        merge("slerp", [sd(E1), sd(E2), sd(E1)])
    with pytest.raises(MergeParamError, match=r"t=1.5 is outside \[0.0, 1.0\]"):
        merge("slerp", [sd(E1), sd(E2)], t=1.5)


# --- nuslerp -------------------------------------------------------------------------

def test_nuslerp_hand_cases():
    c, s = math.cos(math.radians(67.5)), math.sin(math.radians(67.5))
    # weights (1, 3): t = 3 / 4 of 90 deg = 67.5 deg; alpha 0.25 is the same
    assert close(merge("nuslerp", [sd(E1), sd(E2)], weights=[1.0, 3.0])["w"], [c, s])
    assert close(merge("nuslerp", [sd(E1), sd(E2)], alpha=0.25)["w"], [c, s])
    # task-vector mode: slerp of tau_i around the base
    b = torch.tensor([5.0, -2.0])
    assert close(merge("nuslerp", [sd(b + E1), sd(b + E2)], base=sd(b))["w"], b + torch.tensor([R2, R2]), 1e-5)
    a, bb = torch.tensor([[1.0, 0.0], [1.0, 0.0]]), torch.tensor([[0.0, 1.0], [1.0, 0.0]])
    # flattened (default): cos 60 deg -> (a + b) / sqrt(3)
    assert close(merge("nuslerp", [sd(a), sd(bb)])["w"], (a + bb) / math.sqrt(3))
    # rows: row 0 at 90 deg -> (r2, r2); row 1 colinear -> (1, 0)
    assert close(merge("nuslerp", [sd(a), sd(bb)], flatten=False)["w"], [[R2, R2], [1.0, 0.0]])
    # columns: col 0 (1,1) vs (0,1) at 45 deg, s = sin 22.5 / sin 45; col 1 (0,0) vs (1,0): norm
    # floored, cos 0, s = sin 45 -> (r2, 0)
    k = math.sin(math.radians(22.5)) / math.sin(math.radians(45))
    assert close(merge("nuslerp", [sd(a), sd(bb)], flatten=False, row_wise=True)["w"], [[k, R2], [2 * k, 0.0]])
    # row_wise without flatten=False changes nothing (mergekit)
    assert torch.equal(merge("nuslerp", [sd(a), sd(bb)], row_wise=True)["w"], merge("nuslerp", [sd(a), sd(bb)])["w"])


def test_nuslerp_equal_weights_zero_sum_and_antipodes():
    assert close(merge("nuslerp", [sd(E1), sd(E2)], weights=[0.0, 0.0])["w"], [R2, R2])  # t = 0.5 (mergekit)
    # antiparallel: linear (our reading), not a division by sin(pi) ~ 1e-7
    assert close(merge("nuslerp", [sd(E1), sd(-3 * E1)], weights=[3.0, 1.0])["w"], [0.0, 0.0])
    with pytest.raises(MergeParamError, match=">= 0"):
        merge("nuslerp", [sd(E1), sd(E2)], weights=[1.0, -1.0])


# --- multislerp ----------------------------------------------------------------------

def test_multislerp_hand_cases():
    e = torch.eye(3)
    # three orthonormal inputs, equal weights: the direction (1,1,1)/sqrt 3 at norm 1
    out = merge("multislerp", [sd(e[0]), sd(e[1]), sd(e[2])])["w"]
    assert close(out, [1 / math.sqrt(3)] * 3)
    # weights (1, 3) on 2 e1, 4 e2: direction (0.25, 0.75) / |.|, norm 0.25 * 2 + 0.75 * 4 = 3.5
    d = torch.tensor([0.25, 0.75]) / math.hypot(0.25, 0.75)
    assert close(merge("multislerp", [sd(2 * E1), sd(4 * E2)], weights=[1.0, 3.0])["w"], 3.5 * d)
    # with a base: the same around it
    b = torch.tensor([1.0, 1.0])
    got = merge("multislerp", [sd(b + 2 * E1), sd(b + 4 * E2)], base=sd(b), weights=[1.0, 3.0])["w"]
    assert close(got, b + 3.5 * d, 1e-5)
    # one input is that input
    x = torch.randn(4, 3)
    assert torch.equal(merge("multislerp", [sd(x)])["w"], x)


def test_multislerp_antipodes():
    # two antipodal inputs with equal weights: linear (mergekit), three: a named error
    assert close(merge("multislerp", [sd(E1), sd(-E1)])["w"], [0.0, 0.0])
    with pytest.raises(MergeParamError, match="antipodal"):
        merge("multislerp", [sd(E1), sd(-E1), sd(E2)], weights=[1.0, 1.0, 0.0])
    with pytest.raises(MergeParamError, match="sum to 0"):
        merge("multislerp", [sd(E1), sd(E2)], weights=[1.0, -1.0])


# --- karcher -------------------------------------------------------------------------

def test_karcher_hand_cases():
    # on one great circle the Karcher mean is the weighted mean angle: 0.25 * 0 + 0.75 * 90 = 67.5
    # (the projected Euclidean mean would be atan(3) = 71.6 deg); norm 0.25 * 1 + 0.75 * 1
    out = merge("karcher", [sd(E1), sd(E2)], weights=[1.0, 3.0])["w"]
    assert close(out, [math.cos(math.radians(67.5)), math.sin(math.radians(67.5))], 1e-5)
    # equal weights, norms 2 and 4: the bisector at norm 3
    assert close(merge("karcher", [sd(2 * E1), sd(4 * E2)])["w"], [3 * R2, 3 * R2], 1e-6)
    # max_iter=0: the projected Euclidean mean, atan(3)
    a = math.atan(3.0)
    assert close(merge("karcher", [sd(E1), sd(E2)], weights=[1.0, 3.0], max_iter=0)["w"], [math.cos(a), math.sin(a)])
    # a zero input has no direction but counts in the norm: (1/2)(0) + (1/2)(2) = 1 along e2
    assert close(merge("karcher", [sd(0 * E1), sd(2 * E2)])["w"], [0.0, 1.0])


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 4))
def test_karcher_of_one_model_is_that_model(seed, n):
    x = torch.randn(3, 5, generator=torch.Generator().manual_seed(seed))
    assert torch.equal(merge("karcher", [sd(x)])["w"], x)
    assert torch.allclose(merge("karcher", [sd(x)] * n)["w"], x, rtol=1e-5, atol=1e-6)


# --- model_stock ---------------------------------------------------------------------

def test_model_stock_hand_cases():
    b = torch.tensor([1.0, 1.0])
    t1, t2 = torch.tensor([1.0, 0.0]), torch.tensor([0.5, math.sqrt(3) / 2])  # cos 60
    # N = 2, cos 1/2: t = 2 (1/2) / (1 + 1/2) = 2/3; theta* = b + 2/3 mean(tau)
    out = merge("model_stock", [sd(b + t1), sd(b + t2)], base=sd(b))["w"]
    assert close(out, b + (2 / 3) * (t1 + t2) / 2, 1e-6)
    # N = 3 at 60 deg pairwise (e.g. (1,1,0), (1,0,1), (0,1,1)): t = 3/2 / (1 + 1) = 3/4
    b3 = torch.zeros(3)
    ts = [torch.tensor([1.0, 1.0, 0.0]), torch.tensor([1.0, 0.0, 1.0]), torch.tensor([0.0, 1.0, 1.0])]
    out = merge("model_stock", [sd(t) for t in ts], base=sd(b3))["w"]
    assert close(out, 0.75 * sum(ts) / 3)
    # opposed task vectors (cos -1/2): clamped to cos 0, t 0: the base ...
    t3 = torch.tensor([-0.5, math.sqrt(3) / 2])
    assert close(merge("model_stock", [sd(b + t1), sd(b + t3)], base=sd(b))["w"], b)
    # ... mergekit's arithmetic: t = 2 (-1/2) / (1 - 1/2) = -2
    got = merge("model_stock", [sd(b + t1), sd(b + t3)], base=sd(b), clamp_cos=False)["w"]
    assert close(got, b - 2 * (t1 + t3) / 2, 1e-6)
    # cos -1: 1 + (N - 1) cos = 0, no finite t: the base (mergekit's rule)
    assert close(merge("model_stock", [sd(b + t1), sd(b - t1)], base=sd(b), clamp_cos=False)["w"], b)
    # filter_wise: row 0 at cos 1/2 (t = 2/3), row 1 orthogonal (cos 0, t = 0)
    m1 = torch.stack([t1, E1])
    m2 = torch.stack([t2, E2])
    out = merge("model_stock", [sd(m1), sd(m2)], base=sd(torch.zeros(2, 2)), filter_wise=True)["w"]
    assert close(out, torch.stack([(2 / 3) * (t1 + t2) / 2, torch.zeros(2)]), 1e-6)
    with pytest.raises(MergeParamError, match="at least 2"):
        merge("model_stock", [sd(b + t1)], base=sd(b))


# --- nearswap ------------------------------------------------------------------------

def test_nearswap_hand_case_and_endpoints():
    base, other = torch.tensor([0.0, 0.0, 0.0, 1.0]), torch.tensor([0.5, 0.01, -2.0, 1.0])
    # t = 0.1: w = clamp(0.1 / |d|) = (0.2, 1, 0.05, 1 (d = 0 -> floored at 1e-6)) -> w * other
    out = merge("nearswap", [sd(other)], base=sd(base), t=0.1)["w"]
    assert close(out, [0.1, 0.01, -0.1, 1.0])
    x = torch.randn(6, 4)
    y = x + torch.randn(6, 4)
    assert torch.equal(merge("nearswap", [sd(y)], base=sd(x), t=0.0)["w"], x)  # t = 0: the base
    assert torch.equal(merge("nearswap", [sd(y)], base=sd(x), t=1e9)["w"], y)  # t >= max d: the other
    with pytest.raises(MergeParamError, match=">= 0"):
        merge("nearswap", [sd(y)], base=sd(x), t=-1.0)
    with pytest.raises(MergeParamError, match="exactly 1"):
        merge("nearswap", [sd(y), sd(y)], base=sd(x))


# --- passthrough ---------------------------------------------------------------------

def test_passthrough_copies_one_model(models):
    m = {k: (v.to(torch.bfloat16) if v.is_floating_point() else v) for k, v in models["a"].items()}
    out = merge("passthrough", [m])
    assert all(torch.equal(out[k], m[k]) and out[k].dtype == m[k].dtype for k in m)
    assert torch.equal(merge("passthrough", [sd(E1 + E2)], scale=-2.0)["w"], torch.tensor([-2.0, -2.0]))
    with pytest.raises(MergeParamError, match="slices"):
        merge("passthrough", [m, m])


# --- entry points: the file pass, the API with ids, recipes, the CLI --------------------

MINE = {"slerp": {"t": 0.3}, "nuslerp": {"weights": [1.0, 2.0], "flatten": False}, "multislerp": {},
        "karcher": {}, "model_stock": {"filter_wise": True}, "nearswap": {"t": 0.05}, "passthrough": {}}


@pytest.mark.parametrize("method", sorted(MINE))
def test_file_pass_equals_the_in_memory_merge(method, models, tmp_path: Path):
    from safetensors.torch import load_file

    from mmgrid.merge.methods import get_method

    cls = get_method(method)
    ins = [models["a"], models["b"], models["c"]][: cls.max_inputs or 3]
    base = models["base"]
    want = merge(method, ins, base=base, **MINE[method])
    merge_to_file(method, ins, tmp_path / "m.safetensors", base=base, **MINE[method])
    got = load_file(str(tmp_path / "m.safetensors"))
    assert list(got) == list(want) and all(torch.equal(got[k], want[k]) for k in want)


@pytest.fixture()
def reg(tmp_path: Path, models):
    from mmgrid.registry import Registry

    r = Registry.open(tmp_path / "reg")
    ids = {"base": r.put(models["base"], {"paradigm": "text", "domain": "none", "period": "p0"}, "base")}
    for k, dom in (("a", "A"), ("b", "B")):
        ids[k] = r.put(models[k], {"paradigm": "text", "domain": dom, "period": "p1"}, "trained",
                       parents=[(ids["base"], "init")])
    return r, ids


def test_recipe_and_api_with_ids(reg, models):
    from mmgrid.merge.recipe import Recipe, run_recipe

    r, ids = reg
    rec = Recipe.from_yaml(f"method: model_stock\ninputs: [{ids['a']}, {ids['b']}]\nbase: {ids['base']}\n")
    cid = run_recipe(rec, r)
    assert r.get(cid).params["method"] == "model_stock"
    direct = merge("model_stock", [ids["a"], ids["b"]], base=ids["base"], registry=r)
    in_memory = merge("model_stock", [models["a"], models["b"]], base=models["base"])
    loaded = r.load(cid)
    assert all(torch.equal(loaded[k], direct[k]) and torch.equal(direct[k], in_memory[k]) for k in direct)


def test_cli_slerp(reg, models, capsys):
    from mmgrid.cli import main

    r, ids = reg
    assert main(["merge", "--method", "slerp", "--inputs", ids["a"], ids["b"], "--set", "t=0.3",
                 "--registry", str(r.root)]) == 0
    cid = capsys.readouterr().out.strip().splitlines()[-1]
    assert r.get(cid).params["t"] == 0.3
    want = merge("slerp", [models["a"], models["b"]], t=0.3)
    loaded = r.load(cid)
    assert all(torch.equal(loaded[k], want[k]) for k in want)
    assert main(["merge", "--method", "slerp", "--inputs", ids["a"], ids["b"], "--set", "t=2",
                 "--registry", str(r.root)]) == 2


def test_spherical_sums_over_chunks(monkeypatch):
    """The float64 dot products are accumulated chunk by chunk (no float64 copy of a whole
    tensor): with chunks of 7 entries they equal the float64 products of whole tensors."""
    from mmgrid.merge.methods import spherical as sp

    monkeypatch.setattr(sp, "CHUNK", 7)
    g = torch.Generator().manual_seed(3)
    a, b = torch.randn(5, 6, generator=g), torch.randn(5, 6, generator=g)
    assert math.isclose(sp.dot(a, b), float((a.double() * b.double()).sum()), rel_tol=1e-12)
    assert math.isclose(sp.norm(a), float(a.double().norm()), rel_tol=1e-12)
    assert torch.allclose(sp.row_dots(a, b), (a.double() * b.double()).sum(-1), rtol=1e-12)
    assert torch.allclose(sp.row_dots(a.T, b.T), (a.double() * b.double()).sum(0), rtol=1e-12)
    assert sp.row_dots(torch.zeros(0, 3), torch.zeros(0, 3)).shape == (0,)
    # a method through the chunked sums gives what it gives in one chunk
    monkeypatch.setattr(sp, "CHUNK", 1 << 20)
    one = merge("slerp", [sd(a), sd(b)], t=0.4)["w"]
    monkeypatch.setattr(sp, "CHUNK", 7)
    assert torch.allclose(merge("slerp", [sd(a), sd(b)], t=0.4)["w"], one, rtol=1e-6, atol=1e-7)


# --- karcher and multislerp on streaming statistics (version 2) ------------------------

def _karcher_on_tensors(ms: list[torch.Tensor], w: list[float], max_iter: int = 10, tol: float = 1e-5) -> torch.Tensor:
    """The fixed-point iteration of Buss & Fillmore Sec. 3 on whole float64 tensors (version 1's
    algorithm, in float64): the independent expectation of the coefficient iteration."""
    ms = [m.double().reshape(-1) for m in ms]
    w = [x / sum(w) for x in w]
    norms = [float(m.norm()) for m in ms]
    valid = [i for i, r in enumerate(norms) if r > tol]
    a = [w[i] / sum(w[j] for j in valid) for i in valid]
    units = [ms[i] / norms[i] for i in valid]
    u = sum(ai * ui for ai, ui in zip(a, units))
    u = units[0].clone() if float(u.norm()) < tol else u / u.norm()
    for _ in range(max_iter):
        step = torch.zeros_like(u)
        for ai, ui in zip(a, units):
            cos = max(-1.0, min(1.0, float(u @ ui)))
            om = math.acos(cos)
            if om >= tol:
                step += ai * om / math.sin(om) * (ui - cos * u)
        ns = float(step.norm())
        if ns < tol:
            break
        u = math.cos(ns) * u + math.sin(ns) / ns * step
        u = u / u.norm()
    return u * sum(wi * r for wi, r in zip(w, norms))


@pytest.mark.parametrize("weights", [[1.0, 1.0, 1.0], [0.2, 1.0, 3.0]])
def test_karcher_coefficient_iteration_equals_the_tensor_iteration(weights):
    g = torch.Generator().manual_seed(7)
    ms = [torch.randn(6, 9, generator=g) + (2.0 if i else 0.0) for i in range(3)]  # up to ~100 degrees apart
    got = merge("karcher", [sd(m) for m in ms], weights=weights)["w"]
    want = _karcher_on_tensors(ms, weights).reshape(6, 9)
    assert torch.allclose(got.double(), want, rtol=1e-5, atol=1e-6)


def test_multislerp_coefficients_equal_the_direct_formula():
    """(sum_i w_i ||v_i||) * normalize(sum_i w_i v_i / ||v_i||), around the base, in float64."""
    g = torch.Generator().manual_seed(3)
    base, *ms = [torch.randn(5, 4, generator=g) for _ in range(4)]
    w = [0.5, 1.0, 2.5]
    got = merge("multislerp", [sd(m) for m in ms], base=sd(base), weights=w)["w"]
    vs = [(m - base).double() for m in ms]
    wn = [x / sum(w) for x in w]
    mean = sum(wi * v / v.norm() for wi, v in zip(wn, vs))
    want = base.double() + sum(wi * float(v.norm()) for wi, v in zip(wn, vs)) * mean / mean.norm()
    assert torch.allclose(got.double(), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("method,params,with_base", [
    ("karcher", {}, False), ("karcher", {"weights": [1.0, 0.5, 2.0], "max_iter": 3}, False),
    ("multislerp", {}, False), ("multislerp", {"weights": [1.0, 0.5, 2.0]}, True)])
@pytest.mark.parametrize("chunk", [5, 1 << 18])
def test_streamed_sphere_methods_fast_pass_equals_reference(trio, method, params, with_base, chunk):
    """The fast pass (flat chunks, per-tensor coefficients from the first pass) gives the reference
    path's bits for any chunking (the Gram matrix is summed in fixed blocks)."""
    from mmgrid.merge.executor import REFERENCE, Route

    ins = [trio[k] for k in "abc"]
    base = trio["base"] if with_base else None
    ref = merge(method, ins, base=base, route=REFERENCE, **params)
    assert _same(ref, merge(method, ins, base=base, route=Route(chunk=chunk, prepare_chunk=chunk), **params))


@pytest.mark.parametrize("method", ["karcher", "multislerp"])
def test_streamed_sphere_methods_take_the_fast_pass(trio, monkeypatch, method):
    """No tensor of a karcher / multislerp merge goes through the whole-tensor reference path."""
    from mmgrid.merge import executor

    seen = []
    real = executor.reference_tensor
    monkeypatch.setattr(executor, "reference_tensor", lambda *a, **k: seen.append(a[4]) or real(*a, **k))
    merge(method, [trio["a"], trio["b"]])
    assert seen == []
