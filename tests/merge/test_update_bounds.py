"""Every registered method's stated update bound, on every shape family.

For each method of the registry (a new one is covered as soon as it registers), the merged
update of every tensor obeys ||theta* - theta_0|| <= c max_i ||theta_i - theta_0|| with the c
the method returns from ``update_bound`` (its docstring's derivation) and theta_0 its
``bound_origin``: on wide, tall and square matrices, 1-D tensors, vocabulary-shaped matrices
(many rows, a small width), and inputs carrying added-token rows.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mmgrid.merge import merge
from mmgrid.merge.methods import get_method, method_names, validate_params
from mmgrid.merge.tensors import from_state

ALL = method_names()
NO_TENSOR_BOUND = {"opcm", "dop"}  # None by design; their docstrings say what holds instead


def _n_inputs(method: str, n: int) -> int:
    cls = get_method(method)
    return max(cls.min_inputs, min(n, cls.max_inputs or n))


def _params(method: str, n: int, weights: list[float]) -> dict:
    """The defaults, plus drawn weights for a method that weighs its inputs (seeded methods
    keep their default seed: the draws are fixed)."""
    p = validate_params(method, {})
    if method == "temporal":
        return {"lam": 0.7}
    if hasattr(p, "per_input"):
        return {"weights": weights[:n]}
    return {}


def _theta0(method: str, base: dict, ins: list[dict]) -> dict:
    where = get_method(method).bound_origin
    if where == "origin":
        return {k: torch.zeros_like(v) for k, v in base.items()}
    if where == "first_input":
        return ins[0]
    return base


def _merge(method: str, ins: list, base, params: dict) -> dict:
    if method == "temporal":
        return merge(method, ins[:2], **params)
    return merge(method, ins, base=base, **params)


def _check(method: str, out: dict, ins: list[dict], base: dict, params: dict, rows: dict | None = None) -> None:
    """The bound on each tensor (on the first ``rows[k]`` rows where inputs added rows)."""
    theta0 = _theta0(method, base, ins)
    p = validate_params(method, params)
    for k, v in out.items():
        r = (rows or {}).get(k, v.shape[0] if v.ndim else None)
        cut = (lambda t: t[:r]) if v.ndim else (lambda t: t)
        c = get_method(method).update_bound(p, len(ins), cut(v).numel())
        assert c is not None and not math.isnan(c), (method, k, c)
        top = max(float(torch.linalg.vector_norm(cut(x[k]) - cut(theta0[k]))) for x in ins)
        got = float(torch.linalg.vector_norm(cut(v) - cut(theta0[k])))
        scale = max(float(cut(theta0[k]).abs().max()), top, 1.0)
        assert got <= c * top * (1 + 1e-5) + 1e-6 * scale, (method, params, k, tuple(v.shape), got, c, top)


def _family_state(g: torch.Generator, a: int, b: int, rows: int, width: int) -> dict:
    """One tensor of each shape family: wide (out < in), tall, square, 1-D, vocabulary rows."""
    shapes = {"layers.0.wide.weight": (a, a + b), "layers.0.tall.weight": (a + b, a),
              "layers.0.square.weight": (a + 1, a + 1), "layers.0.norm.weight": (a + b,),
              "embed_tokens.weight": (rows, width)}
    return {k: torch.randn(s, generator=g) for k, s in shapes.items()}


def test_every_method_states_a_bound():
    """update_bound is declared by every method (the base class raises), finite on the
    defaults, and None exactly for the methods without a per-tensor bound."""
    for m in ALL:
        cls = get_method(m)
        assert "update_bound" in vars(cls) or any("update_bound" in vars(b) for b in cls.__mro__[1:-2]), m
        c = cls.update_bound(validate_params(m, {}), _n_inputs(m, 3), 24)
        if m in NO_TENSOR_BOUND:
            assert c is None, m
        else:
            assert c is not None and 1.0 <= c < math.inf, (m, c)
        assert cls.bound_origin in ("base", "origin", "first_input"), m


def test_the_base_class_demands_a_bound():
    from mmgrid.merge.methods.base import Method

    with pytest.raises(NotImplementedError):
        Method.update_bound(None, 2, 4)


def test_stated_constants_follow_the_parameters():
    """Hand-computed c's: the formulas of the docstrings."""
    c = lambda m, n, numel=16, **kw: get_method(m).update_bound(validate_params(m, kw), n, numel)  # noqa: E731
    assert c("task_arithmetic", 3, weights=[0.5, -1.0, 2.0], scale=2.0) == pytest.approx(7.0)
    assert c("dare", 2, p=0.75) == pytest.approx(8.0)  # (1 + 1) / (1 - 0.75)
    assert c("dare", 2, p=0.75, rescale="l1", numel=25) == pytest.approx(10.0)  # 2 sqrt(25)
    assert c("ties", 4) == pytest.approx(2.0)  # disjoint mean: sqrt(4)
    assert c("ties", 3, weights=[1.0, -1.0, 1.0]) == math.inf  # the mean's denominator can vanish
    assert c("ties", 2, combine="sum", weights=[0.5, 0.25], scale=4.0) == pytest.approx(3.0)
    assert c("della_linear", 2, density=0.5, epsilon=0.1) == pytest.approx(2 / 0.4)
    assert c("orthomerge", 3) == pytest.approx(5.0)  # 2 + sum_i |w_i|
    assert c("orthomerge", 4, strategy="conflict_aware", residual_method="ties") == pytest.approx(2 + math.sqrt(2) * 2)
    assert c("orthomerge", 2, residual_method="dare", p=0.5, weights=[1.0, 0.5]) == pytest.approx(2 + 3.0)
    assert c("model_stock", 3, clamp_cos=False) == math.inf
    assert c("temporal", 2, lam=-2.5) == pytest.approx(2.5)


@settings(max_examples=8, deadline=None, derandomize=True)
@given(st.integers(0, 10_000), st.integers(2, 4), st.integers(1, 3), st.integers(2, 4),
       st.sampled_from([1e-3, 0.1, 1.0]), st.lists(st.floats(0.1, 2.0), min_size=4, max_size=4))
def test_update_is_within_the_stated_bound_on_every_shape(seed, a, b, n, noise, weights):
    g = torch.Generator().manual_seed(seed)
    base = _family_state(g, a, b, rows=8 * a + 5, width=a)
    most = max(n, *(get_method(m).min_inputs for m in ALL))  # acceleration takes three whatever n is
    draws = [{k: v + noise * (1 + i) * torch.randn(v.shape, generator=g) for k, v in base.items()} for i in range(most)]
    for method in ALL:
        if method in NO_TENSOR_BOUND:
            continue
        ins = draws[: _n_inputs(method, n)]
        params = _params(method, len(ins), weights)
        _check(method, _merge(method, ins, base, params), ins, base, params)


def _with_added_rows(state: dict, tokens: list[str], g: torch.Generator, shared: int) -> tuple[dict, dict]:
    st_ = dict(state)
    width = state["embed_tokens.weight"].shape[1]
    st_["embed_tokens.weight"] = torch.cat([state["embed_tokens.weight"], torch.randn(len(tokens), width, generator=g)])
    return st_, {"added_rows": {"embed_tokens.weight": [shared, tokens]}}


@settings(max_examples=4, deadline=None, derandomize=True)
@given(st.integers(0, 10_000), st.integers(2, 3))
def test_bound_with_added_vocabulary_rows(seed, a):
    """Inputs with added-token rows the base lacks: the shared rows obey the method's bound.
    An added row of a token some inputs lack is their mean or a copy (merge/vocab.py): no
    longer than the longest of them; a token every input has is merged by the method
    (against the mean where the base lacks the row), so c times the longest, around 0."""
    g = torch.Generator().manual_seed(seed)
    base = _family_state(g, a, 1, rows=6 * a, width=a)
    shared = base["embed_tokens.weight"].shape[0]
    toks = [["<s_0>", "<a_1>"], ["<s_0>", "<b_1>"], ["<s_0>", "<a_1>", "<c_2>"]]
    for method in ALL:
        if method in NO_TENSOR_BOUND:
            continue
        k = _n_inputs(method, 3)
        raw = [{n: v + 0.1 * torch.randn(v.shape, generator=g) for n, v in base.items()} for _ in range(k)]
        withrows = [_with_added_rows(r, toks[i], g, shared) for i, r in enumerate(raw)]
        sources = [from_state(s, f"in{i}", m) for i, (s, m) in enumerate(withrows)]
        params = _params(method, k, [1.0, 0.5, 0.8])
        out = _merge(method, sources, base, params)
        states = [s for s, _ in withrows]
        _check(method, out, states, base, params, rows={"embed_tokens.weight": shared})
        emb = out["embed_tokens.weight"]
        names = list(dict.fromkeys(t for ts in toks[:k] for t in ts))
        assert emb.shape[0] == shared + len(names), method
        for j, tok in enumerate(names):
            mine = [s["embed_tokens.weight"][shared + toks[i].index(tok)] for i, s in enumerate(states) if tok in toks[i]]
            c = 1.0
            if len(mine) == k:
                c = max(1.0, get_method(method).update_bound(validate_params(method, params), k, a))
            longest = max(float(x.norm()) for x in mine)
            assert float(emb[shared + j].norm()) <= c * longest * (1 + 1e-5) + 1e-6, (method, tok)
